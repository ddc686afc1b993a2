"""Single large layers, the cases issue 10 item 7 names for "75 % of peak": hetgen beside onnxruntime.

    python benchmarks/bench_kernels.py [--runs 15] [--threads 1,2] [--cases gemm1024,conv3x3@28,...]

Each case is a one-operator ONNX model (constant weights, as a real layer has them), built for the
host and measured beside onnxruntime at its defaults (graph optimisations on, the same thread
count: `speed_session`, the speed yardstick) with the same interleaving as `bench_models.py
--threads`: per thread count T, hetgen with HG_THREADS=T and onnxruntime with
intra_op_num_threads=T, every count of both in one loop, medians. onnxruntime with its optimiser
off (`ort_session`) is the numerical reference only; where the optimised session's result differs
from it, the case says so and its onnxruntime time is skipped. Printed per case and count: both
latencies, their ratio, hetgen's GFLOP/s (2 per multiply-add; a Winograd convolution is counted as
the direct one) and that as a share of T times one core's peak (the FMA loop of `hetgen tune`), the
same share for hetgen's fastest run ("best %": on a shared machine the median mostly measures the
other tenants, the fastest run the code), and hetgen's largest difference from the reference
relative to its largest value. At one thread the same again by the calling thread's CPU time
(`cpu` columns: both run every task on the calling thread there), which the other tenants of a
shared machine disturb far less than the wall clock.

A layer alone is not the layer in a model: with `memory: lean` (the default) a one-layer model's
workspace cap is a share of a bound that is that layer alone, so a large convolution may get
smaller GEMM blocks than in a network. The layers as the models run them: bench_layers.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import matrix_flops, measure_threads, peak_gflops  # noqa: E402

import hetgen  # noqa: E402
from hetgen.runtime.reference import REFERENCE_SESSION, SPEED_SESSION  # noqa: E402


def matmul(m: int, n: int, k: int) -> onnx.ModelProto:
    """Y [m x n] = X [m x k] W [k x n], W a constant."""
    w = (np.random.default_rng(0).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        f"matmul_{m}x{n}x{k}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv(channels_in: int, channels_out: int, size: int, kernel: int) -> onnx.ModelProto:
    """A same-padded convolution with bias over a [1, channels_in, size, size] input."""
    rng = np.random.default_rng(0)
    fan_in = channels_in * kernel * kernel
    w = (rng.standard_normal((channels_out, channels_in, kernel, kernel)) / np.sqrt(fan_in)).astype(np.float32)
    b = (rng.standard_normal(channels_out) * 0.1).astype(np.float32)
    pad = kernel // 2
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[pad] * 4, kernel_shape=[kernel, kernel])],
        f"conv{kernel}x{kernel}_{channels_in}_{channels_out}_{size}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels_in, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels_out, size, size])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = {
    "gemm1024": lambda: matmul(1024, 1024, 1024),
    "gemm512x4096x1024": lambda: matmul(512, 4096, 1024),
    "gemm128x768x256": lambda: matmul(128, 768, 256),  # the transformer bench's QKV projection
    "conv3x3@28": lambda: conv(256, 256, 28, 3),
    "conv3x3@56": lambda: conv(256, 256, 56, 3),
    "conv1x1@14": lambda: conv(512, 2048, 14, 1),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--platform", default="host")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    args = parser.parse_args()
    names = [name for name in args.cases.split(",") if name]
    unknown = [name for name in names if name not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; accepted: {', '.join(CASES)}")
    counts = [int(c) for c in args.threads.split(",") if c.strip().isdigit() and 1 <= int(c) <= 64]
    if not counts or len(counts) != len(args.threads.split(",")):
        parser.error(f"--threads {args.threads}: expected thread counts from 1 to 64, e.g. 1,2")
    peak = peak_gflops()
    print(f"core peak (FMA loop): {peak:.1f} GFLOP/s per thread")
    print(f"ort: {SPEED_SESSION}, the same thread count; rel err: hetgen against {REFERENCE_SESSION}")
    print(
        f"{'case':18} {'threads':>7} {'hetgen ms':>10} {'ort ms':>9} {'ratio':>6} {'GFLOP/s':>8} {'% peak':>7}"
        f" {'best %':>7} {'rel err':>9} {'cpu ms':>8} {'ort cpu':>8} {'ratio':>6} {'% peak':>7} {'best %':>7}"
    )
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-kernels-") as tmp:
        for name in names:
            model = CASES[name]()
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(model, path)
            out = hetgen.compile(args.platform, path, out=Path(tmp) / path.stem, native_only=True)
            flops = matrix_flops(model)
            for count, figures in measure_threads(out, args.runs, counts, name).items():
                if figures.skipped:
                    print(figures.skipped)
                ours, theirs, error, best = figures.ours, figures.theirs or float("nan"), figures.error, figures.fastest
                gflops, best_gflops = flops / ours / 1e6, flops / best / 1e6
                cpu = ""
                if count == 1:
                    theirs_cpu = figures.theirs_cpu or float("nan")
                    cpu = (
                        f" {figures.cpu:8.3f} {theirs_cpu:8.3f} {figures.cpu / theirs_cpu:6.2f}"
                        f" {100 * flops / figures.cpu / 1e6 / peak:6.0f}% {100 * flops / figures.cpu_fastest / 1e6 / peak:6.0f}%"
                    )
                print(
                    f"{name:18} {count:7d} {ours:10.3f} {theirs:9.3f} {ours / theirs:6.2f} {gflops:8.1f}"
                    f" {100 * gflops / (peak * count):6.0f}% {100 * best_gflops / (peak * count):6.0f}% {error:9.1e}"
                    + cpu,
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
