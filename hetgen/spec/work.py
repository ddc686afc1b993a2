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
from hetgen.ops.base import OpInstance, WorkRule
from hetgen.ops.registry import op_def


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
    # A dense convolution's kernel taps (k = its input channels x taps), which a MAC array that takes
    # input channels in blocks (the device model's mac_depth_block) rounds per tap; 0: not one.
    taps: int = 0
    # A DMA of a tensor the controller writes or reads (`Linear`): kept in DRAM in the controller's
    # layout, which the device reads (1) or writes (2) a pixel's channels at a time; 0: another DMA.
    # element_bytes: the size of that tensor's elements (an access is channels x it).
    linear: int = 0
    element_bytes: int = 0


def dma_work(nbytes: int) -> Work:
    return Work(Engine.DMA, bytes=nbytes)


def mac_depth(work: Work, block: int, dot: int = 0) -> int:
    """The depth (k) a MAC array runs `work` at when it takes input channels `block` at a time (the
    device model's mac_depth_block; 0: as many as there are): a dense convolution's channels are
    rounded up to whole blocks per kernel tap; any other product's k as is. On multipliers that
    each sum `dot` products along the depth (an int8 product on a dot-product array: the device
    model's int8_mac_depth; 0 or 1: one), that depth rounded up to whole dots, as hg_sim.c counts
    them (its ceil(depth / dot) steps of `dot` products)."""
    depth = work.k
    if block and work.taps and not work.k % work.taps:
        depth = work.taps * -(-(work.k // work.taps) // block) * block
    return -(-depth // dot) * dot if dot > 1 else depth


def brick_bytes(nbytes: int, channels: int, brick: int) -> int:
    """The bytes a DMA of a feature-map block of `channels` channels takes on a device that fetches
    whole bricks of `brick` channels a pixel (the device model's dma_brick_channels; 0: not
    modelled): its bytes x ceil(channels / brick) x brick / channels, as hg_sim.c counts them
    (hg_sim_brick_bytes); a DMA of no feature map (channels 0: weights) as is."""
    if not brick or not channels:
        return nbytes
    return -(-nbytes * (-(-channels // brick) * brick) // channels)


class Linear:
    """Which way a DMA moves a tensor held in the controller's linear (NHWC) layout in DRAM (Work.linear)."""

    NONE = 0
    READ = 1
    WRITE = 2


def linear_bytes(
    nbytes: int, channels: int, element_bytes: int, direction: int, burst: int, block: int, write_piece: int
) -> int:
    """The bytes a DMA of a tensor in a linear layout (NHWC: what the controller writes and reads;
    Vela keeps the tensors a CPU shares linear, extract_npu_subgraphs.py `force_linear_format`) takes
    where each access is a pixel's channels and each access costs a whole `burst` of the memory
    (the device model's linear_burst_bytes: vela.ini's Dram_burst_length). As Vela prices it
    (npu_performance.py `_estimate_memory_transfer_efficiency`): a read's access is the block of
    channels, C rounded up to the depth block (`block`, 8: the micro-block), of `element_bytes`
    each; a write's is that, at
    most `write_piece` (16 x element bits x cores bits: 16 bytes on a one-core U65); its bytes x
    burst / min(burst, access). As hg_sim.c counts them (hg_sim_linear_bytes); 0 `burst`: as is."""
    if not burst or not channels or direction == Linear.NONE:
        return nbytes
    access = (-(-channels // block) * block if block else channels) * max(1, element_bytes)
    if direction == Linear.WRITE and write_piece:
        access = min(access, write_piece)
    access = min(burst, access)
    return -(-nbytes * burst // access)


def depth_factor(work: Work, block: int, dot: int = 0) -> float:
    """mac_depth over the product's own depth: what rounding its channels to blocks, and its depth
    to whole dot products, costs (1: none)."""
    return mac_depth(work, block, dot) / work.k if work.k else 1.0


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
    definition = op_def(head.op)
    integer = definition.integer_mac if definition is not None else None
    if integer is not None:  # the float operator's shape, on the int8 MAC array
        op, x, w = integer.like, integer.x, integer.w
        float_head = Node(head.name, op, (head.inputs[x], head.inputs[w]), head.outputs, head.attrs)
        shaped = shape_work(float_head, [inputs[x], inputs[w]], outputs)
        engine = Engine.MAC_ARRAY_INT8_RESIDUAL if _adds_residual(definition, head) else Engine.MAC_ARRAY_INT8
        return Work(engine, shaped.batch, shaped.m, shaped.n, shaped.k, touched, taps=shaped.taps)
    rule = definition.work if definition is not None else WorkRule.VECTOR
    if rule is WorkRule.CONV:
        x, w = inputs[0].shape, inputs[1].shape
        groups = int(head.attr("group", 1))
        out_pixels = math.prod(output.shape[2:])
        depth = (x[1] // groups) * math.prod(w[2:])
        engine = Engine.MAC_ARRAY_RESIDUAL if _adds_residual(definition, head) else Engine.MAC_ARRAY
        taps = math.prod(w[2:]) if groups == 1 else 0  # a depthwise or grouped one: no depth rounding
        return Work(engine, x[0] * groups, out_pixels, w[0] // groups, depth, touched, taps=taps)
    if rule is WorkRule.GEMM:
        rows, cols = output.shape
        depth = inputs[0].shape[0] if head.attr("transA", 0) else inputs[0].shape[1]
        return Work(Engine.MAC_ARRAY, 1, rows, cols, depth, touched)
    if rule is WorkRule.MATMUL:  # numpy semantics: a 1-D operand is one row (a) or one column (b)
        a, b = inputs[0].shape, inputs[1].shape
        rows = a[-2] if len(a) >= 2 else 1
        cols = b[-1] if len(b) >= 2 else 1
        return Work(Engine.MAC_ARRAY, output.size // max(rows * cols, 1), rows, cols, a[-1], touched)
    taps = 1
    if rule is WorkRule.WINDOW:
        taps = math.prod(head.attr("kernel_shape", (1,)))
    elif rule is WorkRule.GLOBAL:
        taps = math.prod(inputs[0].shape[2:])
    return Work(Engine.VECTOR, 1, output.size, 1, taps, touched)


def _adds_residual(definition, head: Node) -> bool:
    """Whether `head` reads a residual it adds to its outputs (its operator's `residual` trait:
    a Conv's fourth input, a QLinearConv's tenth; hetgen/spec/patterns.py)."""
    fused = definition.residual if definition is not None else None
    return fused is not None and fused.input < len(head.inputs) and bool(head.inputs[fused.input])
