"""hetgen beside onnxruntime at its defaults, one thread each, timed by the calling thread's CPU time.

    python benchmarks/bench_cpu_time.py [--runs 15] [--models mobilenetv2-1.0@224,ds_cnn,...]

On a shared machine whose load average is several times its cores, wall-clock medians
(benchmarks/bench_models.py) move by 2-4x between runs and with them the ratios; the CPU time a
one-thread run takes (`time.thread_time`, both run on the calling thread: hetgen with HG_THREADS=1,
onnxruntime with intra_op_num_threads=1) moves far less. Per model: the medians of both, their
ratio (below 1: hetgen is faster), and the wall-clock medians of the same runs, interleaved in
rounds of three runs each; last, the geometric mean of the CPU-time ratios.

Both are called as a user calls them, through their Python APIs with the same feeds: hetgen's
`Model.run({name: array})` and onnxruntime's `InferenceSession.run(None, {name: array})`, each
checking the feeds and returning newly allocated outputs. On LeNet-5 (tens of microseconds a run)
that call path is a tenth of the time on either side, so timing hetgen's `run_into` (preallocated
outputs, no checks of names) against onnxruntime's `run` would favour hetgen.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hetgen  # noqa: E402
from hetgen.models.suite import BENCH_MODELS  # noqa: E402
from hetgen.runtime.loader import checked_input, load  # noqa: E402
from hetgen.runtime.reference import speed_session  # noqa: E402
from hetgen.runtime.verify import MODEL_COPY, feeds_for  # noqa: E402

DEPTHWISE = "mobilenetv2-1.0@224,mobilenetv3s@224,efficientnet-lite0@224,ds_cnn,mobilenetv2"


def timed(run) -> tuple[float, float]:
    cpu, wall = time.thread_time(), time.perf_counter()
    run()
    return (time.thread_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3


def measure(out: Path, runs: int) -> dict[str, float]:
    model = load(out)
    raw = feeds_for(model, out, 0)[0]
    feeds = {t.name: checked_input(t, raw[t.name]) for t in model.inputs}
    session = speed_session(str(out / MODEL_COPY), threads=1)
    ours, theirs = [], []
    for _ in range(3):  # warm both
        model.run(feeds)
        session.run(None, feeds)
    for _ in range(runs):
        ours += [timed(lambda: model.run(feeds)) for _ in range(3)]
        theirs += [timed(lambda: session.run(None, feeds)) for _ in range(3)]
    return {
        "cpu": statistics.median(c for c, _ in ours),
        "ort_cpu": statistics.median(c for c, _ in theirs),
        "wall": statistics.median(w for _, w in ours),
        "ort_wall": statistics.median(w for _, w in theirs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--platform", default="host")
    parser.add_argument("--models", default=DEPTHWISE, help=f"comma-separated, from {', '.join(BENCH_MODELS)}")
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in BENCH_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; accepted: {', '.join(BENCH_MODELS)}")
    os.environ["HG_THREADS"] = "1"
    print(
        f"{'model':24} {'hetgen cpu ms':>13} {'ort cpu ms':>10} {'ratio':>6} {'hetgen ms':>10} {'ort ms':>8} {'ratio':>6}"
    )
    ratios = []
    with tempfile.TemporaryDirectory(prefix="hetgen-cpu-") as tmp:
        for name in names:
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(BENCH_MODELS[name](), path)
            out = hetgen.compile(args.platform, path, out=Path(tmp) / path.stem, native_only=True)
            f = measure(out, args.runs)
            ratios.append(f["cpu"] / f["ort_cpu"])
            print(
                f"{name:24} {f['cpu']:13.2f} {f['ort_cpu']:10.2f} {ratios[-1]:6.2f} "
                f"{f['wall']:10.2f} {f['ort_wall']:8.2f} {f['wall'] / f['ort_wall']:6.2f}",
                flush=True,
            )
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"1 thread, CPU time: geometric mean ratio {geomean:.2f}, max ratio {max(ratios):.2f} ({len(ratios)} models)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
