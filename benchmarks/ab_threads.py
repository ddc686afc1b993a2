"""Same-process A/B of two revisions at 1 and 2 threads: one model generated and built by this tree
and by another git revision (its files exported with `git archive`, generated in a child process),
each run at HG_THREADS=1 and 2 beside onnxruntime at its defaults with 1 and 2 intra-op threads,
all interleaved in one process (a random order each round, each build's runs after a settle gap:
benchmarks/settle.py), so every build sees the same load. Before and after each model it prints
how far apart the two CPUs are (benchmarks/core_distance.py). Per build and count: the median and
10th-percentile wall clock, and the median CPU time of the calling thread (at 2 threads the
caller's share of the work: it falls when the worker takes tasks).

    python benchmarks/ab_threads.py --against main --models squeezenet@224,mobilenetv2 --runs 50
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core_distance import core_distance  # noqa: E402
from settle import settle  # noqa: E402

import hetgen  # noqa: E402
from hetgen.models.suite import BENCH_MODELS  # noqa: E402
from hetgen.runtime.loader import checked_input, load  # noqa: E402
from hetgen.runtime.reference import speed_session  # noqa: E402
from hetgen.runtime.verify import MODEL_COPY, feeds_for  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
BUILD = "import sys, hetgen; hetgen.compile('host', sys.argv[1], out=sys.argv[2], native_only=True)"


def build_against(model: Path, revision: str, out: Path) -> None:
    """`model` generated and built into `out` by `revision`'s hetgen (exported beside `out`)."""
    tree = out.parent / f"tree-{revision.replace('/', '_')}"
    if not tree.exists():
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", revision], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    environment = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    # run in the exported tree: `python -c` puts the working folder first on sys.path, and from this
    # repository's root that imported this tree's hetgen, not the revision's
    subprocess.run([sys.executable, "-c", BUILD, str(model), str(out)], env=environment, check=True, cwd=tree)


def compare(out: Path, against: Path, revision: str, runs: int, counts: list[int]) -> None:
    runners, cpu, wall = {}, {}, {}
    feeds = None
    for label, folder in (("this", out), (revision, against)):
        for count in counts:
            os.environ["HG_THREADS"] = str(count)  # read when this copy's pool starts, at its first run
            model = load(folder)
            if feeds is None:
                feeds = feeds_for(model, out, 0)[0]
            inputs = [checked_input(t, feeds[t.name]) for t in model.inputs]
            outputs = [np.empty(t.shape, dtype=t.dtype) for t in model.outputs]
            model.run_into(inputs, outputs)
            runners[f"{label} {count}t"] = lambda m=model, i=inputs, o=outputs: m.run_into(i, o)
    os.environ.pop("HG_THREADS")
    for count in counts:
        session = speed_session(str(out / MODEL_COPY), threads=count)
        runners[f"onnxruntime {count}t"] = lambda s=session: s.run(None, feeds)
    for name in runners:
        cpu[name], wall[name] = [], []
    order = list(runners)
    for _ in range(runs):
        random.shuffle(order)
        for name in order:
            settle()  # the previous engine's spinning pool would take the second core
            for _ in range(3):
                start, thread = time.perf_counter(), time.thread_time()
                runners[name]()
                wall[name].append((time.perf_counter() - start) * 1e3)
                cpu[name].append((time.thread_time() - thread) * 1e3)
    print(f"{'build':>16} {'median ms':>10} {'p10 ms':>8} {'caller cpu ms':>14}")
    for name in sorted(runners):
        print(
            f"{name:>16} {statistics.median(wall[name]):10.3f} {np.percentile(wall[name], 10):8.3f} "
            f"{statistics.median(cpu[name]):14.3f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="main", help="the git revision whose runtime files the B build takes")
    parser.add_argument("--models", default="squeezenet@224", help=f"from {', '.join(BENCH_MODELS)}")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in BENCH_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; accepted: {', '.join(BENCH_MODELS)}")
    counts = [int(c) for c in args.threads.split(",")]
    with tempfile.TemporaryDirectory(prefix="hetgen-ab-threads-") as tmp:
        for name in names:
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(BENCH_MODELS[name](), path)
            out = hetgen.compile("host", path, out=Path(tmp) / path.stem, native_only=True)
            against = Path(tmp) / f"{path.stem}-{args.against.replace('/', '_')}"
            build_against(path, args.against, against)
            print(f"{name}: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {core_distance()}")
            compare(out, against, args.against, args.runs, counts)
            print(f"{name}: after: {core_distance()}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
