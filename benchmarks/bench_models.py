"""Latency of hetgen's generated host code beside onnxruntime, one thread each, on real-sized models.

    python benchmarks/bench_models.py [--runs 15] [--models resnet18,mobilenetv2,...] [--platform host]
    python benchmarks/bench_models.py --threads 1,2 [--runs 15] [--models resnet18@64]

Per model: the median latency of each (interleaved in one process, so both see the same noise on a
shared machine), their ratio (below 1: hetgen is faster), the GFLOP/s of hetgen's convolutions and
matrix products (counted as direct convolution: Winograd layers do fewer) against this core's peak
(measured with a small FMA loop, `_peak.c`), the largest difference from onnxruntime relative to
the largest reference value, and the generated program's memory (arena + weights, as packed)
against the model's weights plus the liveness lower bound of its activations. Last, the geometric
mean of the ratios.

With `--threads 1,2` it instead compares, per model and thread count T, hetgen run with HG_THREADS=T
(its GEMM's worker pool, templates/runtime/hg_threads.c; one build, each count loaded as its own
copy with its own pool) beside onnxruntime with intra_op_num_threads=T, all interleaved in one loop.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hetgen  # noqa: E402
from hetgen.models import cnn, transformer  # noqa: E402
from hetgen.ops.base import OpInstance  # noqa: E402
from hetgen.ops.registry import op_def  # noqa: E402
from hetgen.pipeline import import_graph  # noqa: E402
from hetgen.runtime.loader import checked_input, load  # noqa: E402
from hetgen.runtime.reference import ort_session  # noqa: E402
from hetgen.runtime.verify import MODEL_COPY, feeds_for  # noqa: E402

MODELS = {
    "resnet18": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=224),
    "resnet18@64": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=64),
    "mobilenetv2": lambda: cnn.mobilenet_v2(size=224),
    "vgg@64": lambda: cnn.vgg(widths=(64, 128, 256), size=64),
    "transformer": lambda: transformer.transformer_encoder(seq=128, dim=256, heads=4, layers=4, ffn=1024),
    "alexnet@224": lambda: cnn.alexnet(size=224),
    "googlenet@224": lambda: cnn.googlenet(size=224),
    "squeezenet@224": lambda: cnn.squeezenet(size=224),
}
MATRIX_OPS = ("Conv", "Gemm", "MatMul")


def peak_gflops() -> float:
    """One core's float32 FMA throughput, from a loop of independent vector FMAs (-march=native)."""
    source = Path(__file__).with_name("_peak.c")
    with tempfile.TemporaryDirectory() as tmp:
        library = Path(tmp) / "peak.so"
        subprocess.run(["cc", "-O2", "-march=native", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
        peak = ctypes.CDLL(str(library))
        peak.hg_peak_fma.restype = ctypes.c_double
        peak.hg_peak_fma.argtypes = [ctypes.c_long]
        peak.hg_peak_fma(1000)  # warm up the clock
        rates = []
        # the best of many short runs (under a millisecond, shorter than a scheduler slice): other
        # processes on a shared machine only ever make it look slower
        for _ in range(300):
            iterations = 200_000
            start = time.perf_counter()
            flops = peak.hg_peak_fma(iterations)
            rates.append(flops / (time.perf_counter() - start) / 1e9)
        return max(rates)


def matrix_flops(model: onnx.ModelProto) -> int:
    """Arithmetic of the model's convolutions and matrix products (2 per multiply-add)."""
    graph = import_graph(model, {})
    return sum(op_def(node.op).lower(OpInstance.of(node, graph)).flops for node in graph.nodes if node.op in MATRIX_OPS)


def memory_mb(out: Path, model: onnx.ModelProto) -> tuple[float, float]:
    """(the generated program's arena + weights, the model's weights + liveness lower bound), MB."""
    root = json.loads((out / "hetgen.json").read_text())["targets"][0]
    weights = sum(numpy_helper.to_array(init).nbytes for init in model.graph.initializer)
    return (root["arena_size"] + root["weights_bytes"]) / 1e6, (weights + root["liveness_lower_bound"]) / 1e6


def measure(out: Path, runs: int) -> tuple[float, float, float]:
    """(hetgen ms, onnxruntime ms, max |difference| / max |reference|), medians of interleaved runs."""
    model = load(out)
    session = ort_session(str(out / MODEL_COPY), threads=1)
    feeds = feeds_for(model, out, 0)[0]
    inputs = [checked_input(t, feeds[t.name]) for t in model.inputs]
    outputs = [np.empty(t.shape, dtype=t.dtype) for t in model.outputs]
    for _ in range(2):
        model.run_into(inputs, outputs)
        reference = session.run(None, feeds)
    error = max(
        float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-30)
        for got, want in zip(outputs, reference)
    )
    ours, theirs = [], []
    for _ in range(runs):
        start = time.perf_counter()
        model.run_into(inputs, outputs)
        middle = time.perf_counter()
        session.run(None, feeds)
        ours.append((middle - start) * 1e3)
        theirs.append((time.perf_counter() - middle) * 1e3)
    return statistics.median(ours), statistics.median(theirs), error


def measure_threads(out: Path, runs: int, counts: list[int]) -> dict[int, tuple[float, float, float]]:
    """Per thread count: (hetgen ms, onnxruntime ms, max relative difference), medians of runs that
    interleave every count of both, so all see the same noise."""
    models, sessions = {}, {}
    for count in counts:
        os.environ["HG_THREADS"] = str(count)  # read when this copy's pool starts, at its first run
        models[count] = load(out)
        sessions[count] = ort_session(str(out / MODEL_COPY), threads=count)
    os.environ.pop("HG_THREADS")
    first = models[counts[0]]
    feeds = feeds_for(first, out, 0)[0]
    inputs = [checked_input(t, feeds[t.name]) for t in first.inputs]
    outputs = {count: [np.empty(t.shape, dtype=t.dtype) for t in first.outputs] for count in counts}
    errors = {}
    for count in counts:
        for _ in range(2):
            models[count].run_into(inputs, outputs[count])
            reference = sessions[count].run(None, feeds)
        errors[count] = max(
            float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-30)
            for got, want in zip(outputs[count], reference)
        )
    ours: dict[int, list[float]] = {count: [] for count in counts}
    theirs: dict[int, list[float]] = {count: [] for count in counts}
    for _ in range(runs):
        for count in counts:
            start = time.perf_counter()
            models[count].run_into(inputs, outputs[count])
            middle = time.perf_counter()
            sessions[count].run(None, feeds)
            ours[count].append((middle - start) * 1e3)
            theirs[count].append((time.perf_counter() - middle) * 1e3)
    return {
        count: (statistics.median(ours[count]), statistics.median(theirs[count]), errors[count]) for count in counts
    }


def thread_table(names: list[str], platform: str, runs: int, counts: list[int]) -> int:
    print(
        f"{'model':14} {'threads':>7} {'hetgen ms':>10} {'ort ms':>10} {'ratio':>6} {'hg speedup':>10} {'rel err':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-") as tmp:
        for name in names:
            model = MODELS[name]()
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(model, path)
            out = hetgen.compile(platform, path, out=Path(tmp) / path.stem, native_only=True)
            figures = measure_threads(out, runs, counts)
            base = figures[counts[0]][0]
            for count, (ours, theirs, error) in figures.items():
                print(
                    f"{name:14} {count:7d} {ours:10.2f} {theirs:10.2f} {ours / theirs:6.2f} {base / ours:10.2f}"
                    f" {error:9.1e}",
                    flush=True,
                )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--platform", default="host")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument(
        "--threads", default="", help="e.g. 1,2: hetgen (HG_THREADS) beside onnxruntime at each thread count"
    )
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; accepted: {', '.join(MODELS)}")
    if args.threads:
        counts = [int(c) for c in args.threads.split(",") if c.strip().isdigit() and 1 <= int(c) <= 64]
        if len(counts) != len(args.threads.split(",")):
            parser.error(f"--threads {args.threads}: expected thread counts from 1 to 64, e.g. 1,2")
        return thread_table(names, args.platform, args.runs, counts)
    peak = peak_gflops()
    print(f"core peak (FMA loop): {peak:.1f} GFLOP/s, 1 thread")
    print(
        f"{'model':14} {'hetgen ms':>10} {'ort ms':>10} {'ratio':>6} {'GFLOP/s':>8} {'% peak':>7} {'rel err':>9}"
        f" {'mem MB':>8} {'bound MB':>9}"
    )
    ratios = []
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-") as tmp:
        for name in names:
            model = MODELS[name]()
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(model, path)
            out = hetgen.compile(args.platform, path, out=Path(tmp) / path.stem, native_only=True)
            ours, theirs, error = measure(out, args.runs)
            gflops = matrix_flops(model) / ours / 1e6
            used, bound = memory_mb(out, model)
            ratios.append(ours / theirs)
            print(
                f"{name:14} {ours:10.2f} {theirs:10.2f} {ours / theirs:6.2f} {gflops:8.1f} "
                f"{100 * gflops / peak:6.0f}% {error:9.1e} {used:8.1f} {bound:9.1f}",
                flush=True,
            )
    print(f"geometric mean ratio: {math.exp(statistics.fmean(math.log(r) for r in ratios)):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
