"""Depthwise 3x3 layers: the channel-vector kernel, the plane kernel and onnxruntime, per layer.

    python benchmarks/bench_depthwise.py [--runs 20] [--shapes 64x25x5,960x7x7,384x14x14,32x12x12]

hetgen/ops/conv.py offers two depthwise kernels on an application core: the plane kernel
(templates/kernels/conv_depthwise.c.j2, vectors along a flattened row) and, on narrow planes, 16
channels a vector (templates/kernels/conv_depthwise_cv.c.j2). For each shape (channels x height x
width) this builds chains of one and of five depthwise Conv + Relu layers (stride 1, pads 1) with
each kernel (the channel-vector offer withdrawn for the second; where the offer is not made, both
columns are the plane kernel) and times them beside onnxruntime
at its defaults, one thread each, by the calling thread's CPU time, interleaved in one process. A
layer's time is the difference of the chains' medians over four layers, so the call's overhead drops
out. Which kernel a shape takes: the `kernel` column.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hetgen  # noqa: E402
from hetgen.ops import conv  # noqa: E402
from hetgen.runtime.loader import load  # noqa: E402
from hetgen.runtime.reference import speed_session  # noqa: E402

LAYERS = 5


def chain(layers: int, channels: int, height: int, width: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, name = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((channels, 1, 3, 3)).astype(np.float32) * 0.3
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(channels, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [name, f"w{i}", f"b{i}"], [f"c{i}"], group=channels, pads=[1] * 4))
        name = "y" if i == layers - 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [f"c{i}"], [name]))
    shape = [1, channels, height, width]
    graph = helper.make_graph(
        nodes,
        "depthwise_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(proto: onnx.ModelProto, out: Path, channel_vector: bool) -> Path:
    offer = conv.depthwise_channel_vector
    if not channel_vector:
        conv.depthwise_channel_vector = lambda *args: None
    try:
        return hetgen.compile("host", proto, out=out, native_only=True)
    finally:
        conv.depthwise_channel_vector = offer


def takes_vector(out: Path) -> bool:
    kernels = "".join(path.read_text() for path in (out / "host" / "kernels").glob("*.c"))
    return "16 channels a vector" in kernels


def cpu_ms(run) -> float:
    start = time.thread_time()
    run()
    return (time.thread_time() - start) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--shapes", default="64x25x5,960x7x7,384x14x14,32x12x12")
    args = parser.parse_args()
    os.environ["HG_THREADS"] = "1"
    print(
        f"{'shape':12} {'kernel':8} {'vector us':>9} {'plane us':>9} {'ort us':>7} {'vector/plane':>12} {'vector/ort':>10}"
    )
    with tempfile.TemporaryDirectory(prefix="hetgen-dw-") as tmp:
        for shape in args.shapes.split(","):
            c, h, w = (int(v) for v in shape.split("x"))
            x = {"x": np.random.default_rng(1).standard_normal((1, c, h, w)).astype(np.float32)}
            runs = {}
            for layers in (1, LAYERS):
                proto = chain(layers, c, h, w)
                path = Path(tmp) / f"{shape}_{layers}.onnx"
                onnx.save(proto, path)
                built = build(proto, Path(tmp) / f"{shape}_{layers}_vector", True)
                taken = "vector" if takes_vector(built) else "plane"
                vector, plane = load(built), load(build(proto, Path(tmp) / f"{shape}_{layers}_plane", False))
                session = speed_session(str(path), threads=1)
                runs[layers] = {
                    "vector": lambda m=vector: m.run(x),
                    "plane": lambda m=plane: m.run(x),
                    "ort": lambda s=session: s.run(None, x),
                }
            times = {(layers, k): [] for layers in runs for k in runs[layers]}
            for _ in range(args.runs):
                for layers, fns in runs.items():
                    for k, fn in fns.items():
                        times[layers, k] += [cpu_ms(fn) for _ in range(3)]
            med = {key: statistics.median(v) for key, v in times.items()}
            us = {k: (med[LAYERS, k] - med[1, k]) / (LAYERS - 1) * 1e3 for k in ("vector", "plane", "ort")}
            print(
                f"{shape:12} {taken:8} {us['vector']:9.1f} {us['plane']:9.1f} {us['ort']:7.1f} "
                f"{us['vector'] / us['plane']:12.2f} {us['vector'] / us['ort']:10.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
