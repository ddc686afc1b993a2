"""What a simulated accelerator is asked to do: one work descriptor per command of its programs.

The simulator (templates/runtime/hg_sim.c) counts its cycles from these descriptors and its own
parameters (`DeviceModel`), never from the cost model's figures; docs/simulator.md describes the
micro-architecture. A descriptor is the shape of the work, read from the graph: the matrix product a
MAC array computes (a convolution is lowered to one, as im2col does), the elements and taps a vector
unit reduces, the bytes a DMA moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hetgen.abi import Engine  # the unit that executes a command: `enum hg_sim_engine` (hg_constants.h)
from hetgen.ir import Graph, Node, TensorType
from hetgen.ops.base import OpInstance

# Integer kernels and the float operator whose shape rule they share; (x, w) input indices.
INTEGER_KERNELS = {
    "QLinearConv": ("Conv", 0, 3),
    "ConvInteger": ("Conv", 0, 1),
    "QLinearMatMul": ("MatMul", 0, 3),
    "MatMulInteger": ("MatMul", 0, 1),
}


@dataclass(frozen=True)
class Work:
    engine: Engine
    batch: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    bytes: int = 0  # local-memory bytes the command reads and writes (DMA: bytes moved)
    # How many commands back the command this one waits for is (0: none): a tiled program's DMA
    # and compute overlap, each waiting only for the buffers it needs (hetgen/spec/tiling.py).
    after: int = 0
    # A strided DMA moves m segments of n bytes; the bytes between segment starts at each end.
    src_stride: int = 0
    dst_stride: int = 0


def dma_work(nbytes: int) -> Work:
    return Work(Engine.DMA, bytes=nbytes)


def kernel_work(head: Node, last: Node, graph: Graph) -> Work:
    """The descriptor of a kernel unit from `head` to `last`: the first operator decides the engine;
    activations fused after it are applied as outputs are written back, at no extra cost."""
    inputs = [graph.types[name] for name in head.inputs if name]
    outputs = [graph.types[name] for name in last.outputs if name]
    return shape_work(head, inputs, outputs)


def instance_work(instance: OpInstance, after: int = 0) -> Work:
    """The descriptor of one tile's kernel call (its operator on the tile's shapes)."""
    inputs = [t for t in instance.input_types if t is not None]
    return replace(shape_work(instance.node, inputs, list(instance.output_types)), after=after)


def shape_work(head: Node, inputs: list[TensorType], outputs: list[TensorType]) -> Work:
    output = outputs[0]
    touched = sum(t.nbytes for t in inputs) + sum(t.nbytes for t in outputs)
    if head.op in INTEGER_KERNELS:  # the float operator's shape, on the int8 MAC array
        op, x, w = INTEGER_KERNELS[head.op]
        float_head = Node(head.name, op, (head.inputs[x], head.inputs[w]), head.outputs, head.attrs)
        shaped = shape_work(float_head, [inputs[x], inputs[w]], outputs)
        return Work(Engine.MAC_ARRAY_INT8, shaped.batch, shaped.m, shaped.n, shaped.k, touched)
    if head.op == "Conv":
        x, w = inputs[0].shape, inputs[1].shape
        groups = int(head.attr("group", 1))
        out_pixels = math.prod(output.shape[2:])
        depth = (x[1] // groups) * math.prod(w[2:])
        # a fourth input is a residual the Conv adds to its outputs (hetgen/ops/conv.py)
        engine = Engine.MAC_ARRAY_RESIDUAL if len(head.inputs) > 3 and head.inputs[3] else Engine.MAC_ARRAY
        return Work(engine, x[0] * groups, out_pixels, w[0] // groups, depth, touched)
    if head.op == "Gemm":
        rows, cols = output.shape
        depth = inputs[0].shape[0] if head.attr("transA", 0) else inputs[0].shape[1]
        return Work(Engine.MAC_ARRAY, 1, rows, cols, depth, touched)
    if head.op == "MatMul":  # numpy semantics: a 1-D operand is one row (a) or one column (b)
        a, b = inputs[0].shape, inputs[1].shape
        rows = a[-2] if len(a) >= 2 else 1
        cols = b[-1] if len(b) >= 2 else 1
        return Work(Engine.MAC_ARRAY, output.size // max(rows * cols, 1), rows, cols, a[-1], touched)
    taps = 1
    if head.op in ("MaxPool", "AveragePool", "QLinearAveragePool"):
        taps = math.prod(head.attr("kernel_shape", (1,)))
    elif head.op in ("GlobalAveragePool", "GlobalMaxPool", "QLinearGlobalAveragePool"):
        taps = math.prod(inputs[0].shape[2:])
    return Work(Engine.VECTOR, 1, output.size, 1, taps, touched)
