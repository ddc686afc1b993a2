"""ResNet-18 with convolutions in NCHW (hetgen's GEMM / Winograd / implicit-GEMM kernels) beside the
same model with runs of blocked layers (NCHW[V]c, hetgen/lower/blocked_layout.py), one thread each.

    python benchmarks/bench_blocked_layout.py [--sizes 64,224] [--runs 21] [--layouts nchw,nchwc]

Per size: both builds (-O3, -march=native) are loaded in one process and run interleaved, so both see
the same noise on a shared machine; prints each median latency (wall clock, and the calling
thread's CPU time, which a machine shared with other work inflates less), their ratios, and the
largest difference from onnxruntime relative to its largest output.
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
from hetgen.platform.loader import load_platform_text  # noqa: E402
from hetgen.runtime.reference import ort_session, random_inputs  # noqa: E402


def build(proto, layout: str, into: Path):
    text = f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{layout: {layout}}}\n"
    out = hetgen.compile(load_platform_text(text), proto, out=into / layout, native_only=True)
    return hetgen.load(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64,224")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--layouts", default="nchw,nchwc")
    args = parser.parse_args()
    layouts = args.layouts.split(",")
    for size in (int(s) for s in args.sizes.split(",")):
        proto = cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=size)
        with tempfile.TemporaryDirectory() as tmp:
            models = {layout: build(proto, layout, Path(tmp)) for layout in layouts}
            feeds = random_inputs(next(iter(models.values())).inputs, seed=1)
            wanted = ort_session(proto.SerializeToString()).run(None, feeds)[0]
            times: dict[str, list[float]] = {layout: [] for layout in layouts}
            cpu: dict[str, list[float]] = {layout: [] for layout in layouts}
            errors = {}
            for layout, model in models.items():
                got = next(iter(model.run(feeds).values()))
                errors[layout] = float(np.abs(got - wanted).max() / np.abs(wanted).max())
            for _ in range(args.runs):
                for layout, model in models.items():
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    model.run(feeds)
                    cpu[layout].append(time.thread_time() - start_cpu)
                    times[layout].append(time.perf_counter() - start)
            base, base_cpu = statistics.median(times[layouts[0]]), statistics.median(cpu[layouts[0]])
            for layout in layouts:
                median, median_cpu = statistics.median(times[layout]), statistics.median(cpu[layout])
                print(
                    f"resnet18@{size} {layout:8s} wall {median * 1e3:8.2f} ms (ratio {median / base:4.2f})  "
                    f"cpu {median_cpu * 1e3:8.2f} ms (ratio {median_cpu / base_cpu:4.2f})  "
                    f"max rel diff vs onnxruntime {errors[layout]:.1e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
