"""ResNet-18 and MobileNetV2 with convolutions in NCHW (hetgen's GEMM / Winograd / implicit-GEMM
kernels) beside the same models with runs of blocked layers (NCHW[V]c, hetgen/partition/blocked_layout.py).

    python benchmarks/bench_blocked_layout.py [--sizes 64,224] [--runs 21] [--layouts nchw,nchwc]
                                              [--threads 1,2] [--models resnet18,mobilenet_v2]

Per model, size and thread count (the platform's `options.threads`, the worker pool's default): the
builds (-O3, -march=native) are loaded in one process and run interleaved, so all see the same
noise on a shared machine; prints each median latency (wall clock, and the calling thread's CPU
time, which a machine shared with other work inflates less; with threads > 1 only wall clock counts),
their ratios to the first layout, and the largest difference from onnxruntime relative to its
largest output.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hetgen  # noqa: E402
from hetgen.models import cnn  # noqa: E402

MODELS = {
    "resnet18": lambda size: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=size),
    "mobilenet_v2": lambda size: cnn.mobilenet_v2(size=size),
}
from hetgen.platform.loader import load_platform_text  # noqa: E402
from hetgen.runtime.reference import ort_session, random_inputs  # noqa: E402


def build(proto, layout: str, threads: int, into: Path):
    text = f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{layout: {layout}, threads: {threads}}}\n"
    out = hetgen.compile(load_platform_text(text), proto, out=into / f"{layout}_{threads}", native_only=True)
    return hetgen.load(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64,224")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--layouts", default="nchw,nchwc")
    parser.add_argument("--threads", default="1", help="thread counts, e.g. 1,2")
    parser.add_argument("--models", default="resnet18", help=f"of {','.join(MODELS)}")
    args = parser.parse_args()
    layouts = args.layouts.split(",")
    for name in args.models.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            proto = MODELS[name](size)
            for threads in (int(t) for t in args.threads.split(",")):
                compare(f"{name}@{size} x{threads}", proto, layouts, threads, args.runs)


def compare(title: str, proto, layouts: list[str], threads: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        models = {layout: build(proto, layout, threads, Path(tmp)) for layout in layouts}
        feeds = random_inputs(next(iter(models.values())).inputs, seed=1)
        wanted = ort_session(proto.SerializeToString()).run(None, feeds)[0]
        times: dict[str, list[float]] = {layout: [] for layout in layouts}
        cpu: dict[str, list[float]] = {layout: [] for layout in layouts}
        errors = {}
        for layout, model in models.items():
            got = next(iter(model.run(feeds).values()))
            errors[layout] = float(np.abs(got - wanted).max() / np.abs(wanted).max())
        for _ in range(runs):
            for layout, model in models.items():
                start, start_cpu = time.perf_counter(), time.thread_time()
                model.run(feeds)
                cpu[layout].append(time.thread_time() - start_cpu)
                times[layout].append(time.perf_counter() - start)
        base, base_cpu = statistics.median(times[layouts[0]]), statistics.median(cpu[layouts[0]])
        for layout in layouts:
            median, median_cpu = statistics.median(times[layout]), statistics.median(cpu[layout])
            print(
                f"{title:22s} {layout:8s} wall {median * 1e3:8.2f} ms (ratio {median / base:4.2f})  "
                f"cpu {median_cpu * 1e3:8.2f} ms (ratio {median_cpu / base_cpu:4.2f})  "
                f"max rel diff vs onnxruntime {errors[layout]:.1e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
