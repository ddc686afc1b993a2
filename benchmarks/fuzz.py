"""Run the differential fuzzer (tests/fuzz_cases.py) for many random graphs and print a summary.

    PYTHONPATH=. python benchmarks/fuzz.py --examples 2000 [--seed 1] [--max-ops 10] [--out DIR]
    PYTHONPATH=. python benchmarks/fuzz.py --platform all --examples 150   # 150 on each shipped platform

Each case is compiled and run in a forked child, so a crash in generated code is counted (and
saved) instead of ending the campaign. Every failure is saved under --out as model.onnx,
platform.yaml, pins.json, feeds.npz and outcome.txt (replay one with --replay FOLDER). The summary
counts cases, passes, refusals by reason and failures by reason. HG_FUZZ_NAMES=0 turns hostile
names off. `--platform NAME[,NAME...]` fuzzes on those shipped platforms, `--platform all` on each in turn (the
default mixes shipped and random platforms).
"""

from __future__ import annotations

import argparse
import collections
import os
import pickle
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from fuzz_cases import FuzzCase, Outcome, fuzz_cases, load_case, plain_names, run_case, save_case  # noqa: E402
from fuzz_graphs import SHIPPED_PLATFORMS  # noqa: E402

CASE_TIMEOUT_S = 180


def run_forked(case: FuzzCase) -> Outcome:
    """run_case in a child process: a crash or a hang in generated code becomes an Outcome."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into hypothesis
        try:
            os.close(read)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.alarm(CASE_TIMEOUT_S)
            with tempfile.TemporaryDirectory(prefix="hg_fuzz_") as folder:
                outcome = run_case(case, Path(folder) / "out")
            with os.fdopen(write, "wb") as stream:
                pickle.dump(outcome, stream)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        data = stream.read()
    _, status = os.waitpid(pid, 0)
    if data:
        return pickle.loads(data)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return Outcome("fail", f"crash ({name})" if name != "SIGALRM" else "hang", "")
    return Outcome("fail", f"child exited with {os.WEXITSTATUS(status)}", "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ops", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "hetgen-fuzz-failures")
    parser.add_argument("--replay", type=Path, help="run one saved case and print its outcome")
    parser.add_argument(
        "--platform", default="mix", help=f"mix (default), all, or one of {', '.join(SHIPPED_PLATFORMS)}"
    )
    args = parser.parse_args()
    if args.replay:
        outcome = run_forked(load_case(args.replay))
        print(f"{outcome.status}: {outcome.reason}\n{outcome.detail}")
        return 0 if outcome.status in ("pass", "refused") else 1

    named = args.platform.split(",")
    if args.platform not in ("mix", "all") and not set(named) <= set(SHIPPED_PLATFORMS):
        parser.error(f"--platform {args.platform!r}: accepted: mix, all, or a list of {', '.join(SHIPPED_PLATFORMS)}")
    platforms = SHIPPED_PLATFORMS if args.platform == "all" else (None,) if args.platform == "mix" else tuple(named)
    counts: collections.Counter = collections.Counter()
    per_platform: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    reasons: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    ops: collections.Counter = collections.Counter()
    start = time.monotonic()

    def campaign(case: FuzzCase):
        if stop:
            raise KeyboardInterrupt
        outcome = run_forked(case)
        if outcome.status == "fail" and run_forked(plain_names(case)).status in ("pass", "refused"):
            outcome = Outcome("fail", f"names: {outcome.reason}", outcome.detail)  # passes once renamed
        counts[outcome.status] += 1
        per_platform[Path(case.platform_file).stem if case.platform_file else "random"][outcome.status] += 1
        ops.update(case.ops)
        if outcome.status != "pass":
            reasons[outcome.status][outcome.reason] += 1
        if outcome.status in ("fail", "invalid"):
            folder = save_case(case, outcome, args.out / f"{outcome.status}-{sum(counts.values()):05d}")
            print(f"  {outcome.status}: {outcome.reason} -> {folder}", flush=True)
        total = sum(counts.values())
        if total % 25 == 0:
            print(f"[{time.monotonic() - start:7.0f}s] {total} cases: {dict(counts)}", flush=True)

    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))  # `kill PID` ends after the case, with the summary
    try:
        for index, platform in enumerate(platforms):
            run = settings(
                max_examples=args.examples,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )(given(case=fuzz_cases(max_ops=args.max_ops, platform=platform))(campaign))
            seed(args.seed + index)(run)()  # another sequence of graphs on each platform
    except KeyboardInterrupt:
        print("\ninterrupted")
    total = sum(counts.values())
    print(f"\n{total} random graphs in {time.monotonic() - start:.0f} s (seed {args.seed})")
    for status in ("pass", "refused", "fail", "invalid"):
        print(f"  {status}: {counts[status]}")
        for reason, n in reasons[status].most_common():
            print(f"      {n:5d}  {reason}")
    for platform, counted in sorted(per_platform.items()):
        print(f"  {platform:14s} " + ", ".join(f"{status} {n}" for status, n in sorted(counted.items())))
    print("builders used:", ", ".join(f"{name} {n}" for name, n in ops.most_common()))
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
