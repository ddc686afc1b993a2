"""Tile shapes: what one tile of a kernel unit computes and which blocks of its tensors it reads.

For each operator hetgen tiles (hetgen/spec/tiling.py decides among them): convolutions and window
pooling by output rows (with the input rows their windows reach, the halo) and output channels (with
their slice of the weights), global pooling by channels, matrix products by rows and columns of the
output (a batch item at a time), elementwise operators by chunks; any operator as one whole tile.
A `Candidate` says what choosing needs before the tiles are built: the bytes its DMA moves (halo
re-reads and weight re-loads included), its tile count and its largest block per operand.

Sizes follow each tensor's element type, so the int8 products (QLinearConv, ConvInteger,
QLinearMatMul, MatMulInteger: the `integer_mac` trait) tile as their float operators do: their
`Operands` say which input is the activation, which the weights, and which follow the output
channels (a bias, per-channel weight scales and zero points: sliced with the channels) or the rows;
every other input is one value (a scale, a zero point), loaded once and kept in SRAM.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from hetgen.ir import DType, Graph, Node, TensorType
from hetgen.ops._spatial import window
from hetgen.ops.base import Epilogue, OpInstance, Tiling, WorkRule
from hetgen.ops.registry import op_def
from hetgen.spec.work import shape_work

# A constant input of one value, as a unit carries it: its dtype's name and its bytes (hashable, so
# plans stay cacheable). Kernels whose lowering bakes such values in (a quantized Add's scales)
# get them on every tile.
Scalar = tuple[str, bytes]


@dataclass(frozen=True)
class Block:
    """A strided piece of a tensor in device memory: `count` segments of `seg_bytes`, `stride`
    bytes apart, starting `offset` bytes into the tensor. In SRAM the segments lie packed."""

    tensor: str
    offset: int
    count: int
    seg_bytes: int
    stride: int

    @property
    def nbytes(self) -> int:
        return self.count * self.seg_bytes


def _block(tensor: str, offset: int, count: int, seg_bytes: int, stride: int) -> Block:
    if count > 1 and seg_bytes == stride:  # back to back: one contiguous segment
        return Block(tensor, offset, 1, count * seg_bytes, count * seg_bytes)
    return Block(tensor, offset, count, seg_bytes, stride if count > 1 else seg_bytes)


@dataclass(frozen=True)
class UnitOp:
    """The kernel unit as tiling sees it: its head operator, tensor names and types, epilogue."""

    node: Node
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_types: tuple[TensorType | None, ...]
    output_types: tuple[TensorType, ...]
    constant: tuple[bool, ...]  # per input: a weight (from the weight store), not an activation
    epilogue: tuple[Epilogue, ...]
    # per input: its value where it is a constant of one element (a scale, a zero point), else None
    scalars: tuple[Scalar | None, ...] = ()

    @property
    def work(self) -> WorkRule:
        """Its operator's work rule: CONV (Conv) and GEMM (Gemm) tile with their weight and bias."""
        definition = op_def(self.node.op)
        return definition.work if definition is not None else WorkRule.VECTOR

    def instance(self, input_types, output_types, attrs: dict | None = None) -> OpInstance:
        node = self.node
        if len(input_types) < len(node.inputs):
            # a tile names no trailing input it does not read (`_trimmed`: Conv(x, w, "") tiles as
            # Conv(x, w)); its kernel then lays out its arguments as the tile passes them
            node = replace(node, inputs=node.inputs[: len(input_types)])
        if attrs is not None:
            kept = tuple((k, v) for k, v in node.attrs if k not in attrs)
            node = replace(node, attrs=kept + tuple((k, v) for k, v in attrs.items() if v is not None))
        constants = tuple(
            _scalar_value(value, t) if value is not None and t is not None and t.size == 1 else None
            for value, t in zip(self.scalars or (None,) * len(input_types), input_types)
        )
        return OpInstance(node, tuple(input_types), tuple(output_types), constants, self.epilogue)

    @functools.cached_property
    def window_facts(self) -> tuple[Operands, tuple, tuple[tuple[int, Block, TensorType], ...]]:
        """A rank-4 window operator's operands, geometry (`window_geometry`) and one-value inputs
        (each with its block and type on every tile), worked out once per unit: choosing a tiling
        and pricing a cascade's stripes build tens of thousands of its tiles (`_window_tile`), and
        these were almost half of their time."""
        roles = operands(self)
        one_value = _one_value_inputs(self, roles) or ()
        return roles, _window_geometry(self), tuple((i, *_scalar_block(self, i)) for i in one_value)


def _scalar_value(value: Scalar, tensor_type: TensorType) -> np.ndarray:
    dtype, data = value
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(tensor_type.shape)


def unit_op(
    nodes: Sequence[Node], graph: Graph, epilogue: tuple[Epilogue, ...], inputs: Sequence[str] | None = None
) -> UnitOp:
    """The unit with its tensors named by position (`in0`, `out0`, ...) and its node named `unit`,
    so that every unit of the same operator, attributes, shapes and one-value constants shares one
    plan; a plan's blocks name tensors that way (`tensor_names` maps them back). `inputs`: the
    kernel's inputs where they are not its head's (a Conv with its residual Add: x, w, bias or "",
    the residual)."""
    head, last = nodes[0], nodes[-1]
    types = graph.types
    read = tuple(inputs) if inputs is not None else head.inputs
    outputs = tuple(name for name in last.outputs if name)
    positions = tuple(f"in{i}" if name else "" for i, name in enumerate(read))
    outs = tuple(f"out{j}" for j in range(len(outputs)))
    canonical = Node("unit", head.op, positions, outs, head.attrs, opset=head.opset)
    unit = UnitOp(
        canonical,
        positions,
        canonical.outputs,
        tuple(types.get(name) if name else None for name in read),
        tuple(types[name] for name in outputs),
        tuple(bool(name) and name in graph.constants for name in read),
        epilogue,
    )
    return replace(unit, scalars=unit_scalars(unit, graph, read))


def unit_scalars(unit: UnitOp, graph: Graph, read: Sequence[str]) -> tuple[Scalar | None, ...]:
    """The values a unit carries: its one-element constants, but for its activation and weights
    (a tile kernel reads those from SRAM, whatever their size)."""
    roles = operands(unit)
    return tuple(None if i in (roles.x, roles.w) else scalar_of(graph, name) for i, name in enumerate(read))


def scalar_of(graph: Graph, name: str) -> Scalar | None:
    """The value of `name` where it is a constant of one element (what a unit carries of it)."""
    value = graph.constants.get(name) if name else None
    if value is None or value.size != 1:
        return None
    return (value.dtype.str, np.ascontiguousarray(value).tobytes())


def tensor_names(nodes: Sequence[Node], inputs: Sequence[str] | None = None) -> dict[str, str]:
    """A unit's position names (`in0`, `out0`, ...: what its plan's blocks say) -> its tensors
    (`inputs`: the kernel's inputs where they are not its head's, as for `unit_op`)."""
    read = tuple(inputs) if inputs is not None else nodes[0].inputs
    names = {f"in{i}": name for i, name in enumerate(read) if name}
    names.update({f"out{j}": name for j, name in enumerate(n for n in nodes[-1].outputs if n)})
    return names


@dataclass(frozen=True)
class TileSpec:
    """One tile before lowering: its operator instance's shapes and attributes, and its blocks."""

    input_types: tuple[TensorType | None, ...]
    output_types: tuple[TensorType, ...]
    attrs: tuple[tuple[str, object], ...]
    inputs: tuple[Block | None, ...]
    outputs: tuple[Block, ...]


def _t(dtype: DType, *shape: int) -> TensorType:
    return TensorType(dtype, tuple(int(s) for s in shape))


def _ranges(total: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, total)) for start in range(0, total, size)]


@dataclass(frozen=True)
class Operands:
    """Which input of a tiled operator plays which part: `x` the activation (the matrix product's
    A), `w` the weights (B; None: a pool or an elementwise operator), `per_channel` the inputs with
    one value per output channel or column (a bias; sliced with them, or one value for all),
    `per_row` those with one value per row of A. Every other input present holds one value."""

    x: int = 0
    w: int | None = None
    per_channel: tuple[int, ...] = ()
    per_row: tuple[int, ...] = ()
    like: WorkRule = WorkRule.VECTOR  # CONV, GEMM, MATMUL: the product it tiles as; else its own rule

    @property
    def sliced(self) -> frozenset[int]:
        return frozenset(i for i in (self.x, self.w, *self.per_channel, *self.per_row) if i is not None)


def operands(op: UnitOp) -> Operands:
    """The operands of `op`'s operator: an integer product's from its `integer_mac` trait; Conv and
    Gemm: x, w and the bias (C); MatMul: A and B; any other: input 0."""
    definition = op_def(op.node.op)
    mac = definition.integer_mac if definition is not None else None
    if mac is not None:
        like = WorkRule.CONV if mac.like == "Conv" else WorkRule.MATMUL
        return Operands(mac.x, mac.w, mac.per_channel, mac.per_row, like)
    work = op.work
    if work in (WorkRule.CONV, WorkRule.GEMM):
        return Operands(0, 1, (2,), (), work)
    if work is WorkRule.MATMUL:
        return Operands(0, 1, (), (), work)
    return Operands(0, None, (), (), work)


def _present(op: UnitOp, index: int | None) -> bool:
    return index is not None and index < len(op.inputs) and bool(op.inputs[index]) and op.input_types[index] is not None


def _one_value_inputs(op: UnitOp, roles: Operands) -> list[int] | None:
    """The inputs a tile reads whole, as one value: those outside `roles.sliced`, and sliced ones of
    one element. None when one outside `sliced` holds more (the operator does not tile)."""
    found = []
    for i, t in enumerate(op.input_types):
        if not _present(op, i) or (i in roles.sliced and t.size != 1) or (i == op_residual(op)):
            continue
        if t.size != 1 or i in (roles.x, roles.w):
            return None
        found.append(i)
    return found


def op_residual(op: UnitOp) -> int | None:
    """The input a Conv with its residual Add reads the residual from (its operator's `residual`
    trait: Conv's fourth, QLinearConv's tenth), None for any other unit. The residual's scales and
    zero points (a quantized one's) are one-value inputs like the others."""
    definition = op_def(op.node.op)
    fused = definition.residual if definition is not None else None
    if fused is None or fused.input >= len(op.inputs) or not op.inputs[fused.input]:
        return None
    return fused.input


def _scalar_block(op: UnitOp, i: int) -> tuple[Block, TensorType]:
    """A one-value input: its whole block, and its type on a tile (one element)."""
    t = op.input_types[i]
    return _block(op.inputs[i], 0, 1, t.nbytes, 0), _t(t.dtype, 1)


def rowwise(op: UnitOp) -> bool:
    """An elementwise operator declared `rowwise` (QuantizeLinear) of one rank-4 activation (its other
    inputs one value each: a scale and zero point) and an output of its shape: each output row is
    its input row's, so a cascade runs it as a 1x1 window (hetgen/spec/cascade.py: the input's
    QuantizeLinear stripe by stripe into the first convolution, instead of a pass of its own)."""
    definition = op_def(op.node.op)
    if definition is None or not definition.rowwise or definition.tiling is not Tiling.CHUNKS:
        return False
    if len(op.output_types) != 1:
        return False
    x, y = op.input_types[0] if op.input_types else None, op.output_types[0]
    if x is None or x.rank != 4 or tuple(x.shape) != tuple(y.shape) or op.constant[0]:
        return False
    return _one_value_inputs(op, operands(op)) is not None


def _window_geometry(op: UnitOp) -> tuple:
    """(kernel, strides, dilations, pads_begin, pads_end) over H and W of a rank-4 window op (a
    `rowwise` one: a 1x1 window)."""
    if rowwise(op):
        return (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)
    x, y = op.input_types[0], op.output_types[0]
    roles = operands(op)
    if roles.like is WorkRule.CONV:
        kernel = tuple(op.node.attr("kernel_shape") or op.input_types[roles.w].shape[2:])
        x = op.input_types[roles.x]
    else:
        kernel = tuple(op.node.attr("kernel_shape"))
    win = window(op.instance(op.input_types, op.output_types), x.shape[2:], y.shape[2:], kernel)
    return win.kernel[-2:], win.strides[-2:], win.dilations[-2:], win.pads_begin[-2:], win.pads_end[-2:]


def window_geometry(op: UnitOp) -> tuple:
    """(kernel, strides, dilations, pads_begin, pads_end) over H and W of a rank-4 window op (a
    cascade's layers chain by them: hetgen/spec/cascade.py)."""
    return op.window_facts[1]


def has_residual(op: UnitOp) -> bool:
    """A Conv (or QLinearConv) that adds a residual tensor (of the output's shape) to its outputs."""
    return op_residual(op) is not None


def _trimmed(blocks: list, types: list) -> tuple[tuple, tuple]:
    """Per input, omitted trailing inputs dropped (a kernel unit reads what its node names)."""
    while blocks and blocks[-1] is None:
        blocks.pop()
        types.pop()
    return tuple(types), tuple(blocks)


def _window_tiles(op: UnitOp, rows: int, chans: int, channels_outer: bool) -> list[TileSpec]:
    """Conv or window pooling: output rows x output channels per tile, one batch item at a time."""
    n_batch, _, out_h, _ = op.output_types[0].shape
    c_out = op.output_types[0].shape[1]
    row_ranges, chan_ranges = _ranges(out_h, rows), _ranges(c_out, chans)
    order = (
        [(c, r) for c in chan_ranges for r in row_ranges]
        if channels_outer
        else [(c, r) for r in row_ranges for c in chan_ranges]
    )
    return [_window_tile(op, n, chans, rows) for n in range(n_batch) for chans, rows in order]


def window_row_tile(op: UnitOp, first: int, end: int) -> TileSpec:
    """The tile of a rank-4 window op (one batch item) computing output rows first..end-1 of every
    channel: its input rows are those the windows reach, the padding they cross its pads (a
    cascade's stripe runs each layer as one: hetgen/spec/cascade_program.py)."""
    return _window_tile(op, 0, (0, op.output_types[0].shape[1]), (first, end))


def _window_tile(op: UnitOp, n: int, chans: tuple[int, int], rows: tuple[int, int]) -> TileSpec:
    roles, geometry, one_value = op.window_facts
    x_type, y_type_all = op.input_types[roles.x], op.output_types[0]
    x, y = x_type.shape, y_type_all.shape
    xb, yb = x_type.dtype.itemsize, y_type_all.dtype.itemsize
    _, c_in, height, width = x
    _, c_out, out_h, out_w = y
    (kh, _), (sh, _), (dh, _), (pt, pl), (_, pr) = geometry
    is_conv = roles.like is WorkRule.CONV
    groups = int(op.node.attr("group", 1)) if is_conv else c_out
    cout_g, cin_g = c_out // groups, c_in // groups
    n_in = len(op.inputs)
    (c0, c1), (r0, r1) = chans, rows
    first, last = r0 * sh - pt, (r1 - 1) * sh - pt + (kh - 1) * dh
    lo, hi = max(first, 0), min(last, height - 1)
    pad_top, pad_bottom = lo - first, last - hi
    i0, i1 = (0, c_in) if groups == 1 else (c0 // cout_g * cin_g, c1 // cout_g * cin_g)
    slab = hi - lo + 1
    blocks: list = [None] * n_in
    types: list = [None] * n_in
    blocks[roles.x] = _block(op.inputs[roles.x], ((n * c_in + i0) * height + lo) * width * xb, i1 - i0,
                             slab * width * xb, height * width * xb)  # fmt: skip
    types[roles.x] = _t(x_type.dtype, 1, i1 - i0, slab, width)
    y_block = _block(op.outputs[0], ((n * c_out + c0) * out_h + r0) * out_w * yb, c1 - c0,
                     (r1 - r0) * out_w * yb, out_h * out_w * yb)  # fmt: skip
    y_type = _t(y_type_all.dtype, 1, c1 - c0, r1 - r0, out_w)
    attrs = {"pads": (pad_top, pl, pad_bottom, pr), "auto_pad": None}
    if is_conv:
        w_type = op.input_types[roles.w]
        w = w_type.shape
        per_channel = math.prod(w[1:]) * w_type.dtype.itemsize
        blocks[roles.w] = _block(op.inputs[roles.w], c0 * per_channel, 1, (c1 - c0) * per_channel, 0)
        types[roles.w] = _t(w_type.dtype, c1 - c0, *w[1:])
        for i in roles.per_channel:
            if _present(op, i) and op.input_types[i].size != 1:
                size = op.input_types[i].dtype.itemsize
                blocks[i] = _block(op.inputs[i], c0 * size, 1, (c1 - c0) * size, 0)
                types[i] = _t(op.input_types[i].dtype, c1 - c0)
        residual = op_residual(op)
        if residual is not None:  # the residual's block is the output's: no halo
            blocks[residual] = replace(y_block, tensor=op.inputs[residual])
            types[residual] = replace(y_type, dtype=op.input_types[residual].dtype)
        attrs["group"] = 1 if groups == 1 else (c1 - c0) // cout_g
    for i, block, tensor_type in one_value:
        blocks[i], types[i] = block, tensor_type
    in_types, in_blocks = _trimmed(blocks, types)
    return TileSpec(in_types, (y_type,), tuple(attrs.items()), in_blocks, (y_block,))


def _global_pool_tiles(op: UnitOp, chans: int) -> list[TileSpec]:
    x_type, y_all = op.input_types[0], op.output_types[0]
    xb, yb = x_type.dtype.itemsize, y_all.dtype.itemsize
    n_batch, c, height, width = x_type.shape
    one_value = _one_value_inputs(op, operands(op)) or []
    specs = []
    for n in range(n_batch):
        for c0, c1 in _ranges(c, chans):
            blocks: list = [None] * len(op.inputs)
            types: list = [None] * len(op.inputs)
            blocks[0] = _block(op.inputs[0], (n * c + c0) * height * width * xb, 1, (c1 - c0) * height * width * xb, 0)
            types[0] = _t(x_type.dtype, 1, c1 - c0, height, width)
            for i in one_value:
                blocks[i], types[i] = _scalar_block(op, i)
            y_block = _block(op.outputs[0], (n * c + c0) * yb, 1, (c1 - c0) * yb, 0)
            in_types, in_blocks = _trimmed(blocks, types)
            specs.append(TileSpec(in_types, (_t(y_all.dtype, 1, c1 - c0, 1, 1),), (), in_blocks, (y_block,)))
    return specs


def _matrix_view(op: UnitOp) -> tuple[int, int, int, int, bool] | None:
    """(batch, M, K, N, b_per_batch) of a MatMul or Gemm that tiles as a 2-D product, else None."""
    roles = operands(op)
    a, b = op.input_types[roles.x].shape, op.input_types[roles.w].shape
    if roles.like is WorkRule.GEMM:
        if (
            op.node.attr("transA", 0)
            or len(op.inputs) > 2
            and op.inputs[2]
            and op.input_types[2].size
            not in (
                1,
                op.output_types[0].shape[1],
            )
        ):
            return None
        n = b[0] if op.node.attr("transB", 0) else b[1]
        return 1, a[0], a[1], n, False
    if len(a) < 2 or len(b) < 2:
        return None
    if len(b) == 2:
        if roles.per_row and any(_present(op, i) and op.input_types[i].size != 1 for i in roles.per_row):
            return None  # one value per row of a batch of A: rows of several batch items
        return 1, math.prod(a[:-1]), a[-1], b[-1], False
    if a[:-2] == b[:-2]:
        return math.prod(a[:-2]), a[-2], a[-1], b[-1], True
    return None


def _matrix_tiles(op: UnitOp, rows: int, cols: int, rows_outer: bool) -> list[TileSpec]:
    batch, m, k, n, per_batch = _matrix_view(op)
    roles = operands(op)
    a_type, b_type_all, y_all = op.input_types[roles.x], op.input_types[roles.w], op.output_types[0]
    ab, bb, yb = a_type.dtype.itemsize, b_type_all.dtype.itemsize, y_all.dtype.itemsize
    trans_b = roles.like is WorkRule.GEMM and bool(op.node.attr("transB", 0))
    row_ranges, col_ranges = _ranges(m, rows), _ranges(n, cols)
    order = (
        [(r, c) for r in row_ranges for c in col_ranges]
        if rows_outer
        else [(r, c) for c in col_ranges for r in row_ranges]
    )
    one_value = _one_value_inputs(op, roles) or []
    n_in = len(op.inputs)
    specs = []
    for bi in range(batch):
        a_base, b_base, y_base = bi * m * k * ab, (bi * k * n * bb if per_batch else 0), bi * m * n * yb
        for (m0, m1), (n0, n1) in order:
            blocks: list = [None] * n_in
            types: list = [None] * n_in
            blocks[roles.x] = _block(op.inputs[roles.x], a_base + m0 * k * ab, 1, (m1 - m0) * k * ab, 0)
            types[roles.x] = _t(a_type.dtype, m1 - m0, k)
            if trans_b:
                blocks[roles.w] = _block(op.inputs[roles.w], n0 * k * bb, 1, (n1 - n0) * k * bb, 0)
                types[roles.w] = _t(b_type_all.dtype, n1 - n0, k)
            else:
                blocks[roles.w] = _block(op.inputs[roles.w], b_base + n0 * bb, k, (n1 - n0) * bb, n * bb)
                types[roles.w] = _t(b_type_all.dtype, k, n1 - n0)
            for i, (lo, hi) in [(i, (n0, n1)) for i in roles.per_channel] + [(i, (m0, m1)) for i in roles.per_row]:
                if _present(op, i) and op.input_types[i].size != 1:
                    size = op.input_types[i].dtype.itemsize
                    blocks[i] = _block(op.inputs[i], lo * size, 1, (hi - lo) * size, 0)
                    types[i] = _t(op.input_types[i].dtype, hi - lo)
            for i in one_value:
                blocks[i], types[i] = _scalar_block(op, i)
            y_block = _block(op.outputs[0], y_base + (m0 * n + n0) * yb, m1 - m0, (n1 - n0) * yb, n * yb)
            in_types, in_blocks = _trimmed(blocks, types)
            specs.append(TileSpec(in_types, (_t(y_all.dtype, m1 - m0, n1 - n0),), (), in_blocks, (y_block,)))
    return specs


def _chunk_tiles(op: UnitOp, chunk: int) -> list[TileSpec]:
    total = op.output_types[0].size
    y_all = op.output_types[0]
    specs = []
    for e0, e1 in _ranges(total, chunk):
        blocks, types = [], []
        for name, typ in zip(op.inputs, op.input_types):
            if typ is None:  # an omitted optional input (Clip's min): no block, a NULL argument
                blocks.append(None)
                types.append(None)
            elif typ.size == 1:
                blocks.append(_block(name, 0, 1, typ.nbytes, 0))
                types.append(_t(typ.dtype, 1))
            else:
                size = typ.dtype.itemsize
                blocks.append(_block(name, e0 * size, 1, (e1 - e0) * size, 0))
                types.append(_t(typ.dtype, e1 - e0))
        y_block = _block(op.outputs[0], e0 * y_all.dtype.itemsize, 1, (e1 - e0) * y_all.dtype.itemsize, 0)
        specs.append(TileSpec(tuple(types), (_t(y_all.dtype, e1 - e0),), (), tuple(blocks), (y_block,)))
    return specs


def _whole_tile(op: UnitOp) -> list[TileSpec]:
    blocks = tuple(
        _block(name, 0, 1, typ.nbytes, 0) if name and typ is not None else None
        for name, typ in zip(op.inputs, op.input_types)
    )
    outputs = tuple(_block(name, 0, 1, typ.nbytes, 0) for name, typ in zip(op.outputs, op.output_types))
    return [TileSpec(op.input_types, op.output_types, (), blocks, outputs)]


def _halvings(total: int, align: int = 1) -> list[int]:
    """Tile extents to try: total, then about a half, a quarter, ... (multiples of `align`), down to `align`."""
    sizes, size = [], total
    while True:
        aligned = max(align, -(-size // align) * align)
        if aligned not in sizes:
            sizes.append(min(aligned, total))
        if size <= align:
            break
        size = -(-size // 2)
    return sizes


@dataclass(frozen=True)
class Candidate:
    """A tiling to try, with what choosing among tilings needs to know before building it: the
    DMA bytes it moves (halo re-reads and weight re-loads included), its tiles, and the largest
    block of each operand (its SRAM buffer)."""

    split: str
    tile_shape: tuple[int, ...]
    specs: Callable[[], list[TileSpec]]
    tiles: int
    dma_bytes: int
    input_blocks: tuple[int, ...]  # largest block per input (0: omitted)
    input_loads: tuple[int, ...]  # how many times each input is loaded
    output_blocks: tuple[int, ...]
    # The MAC-array products its tiles compute, as (tiles, batch, m, n): tiles of one shape, each
    # `batch` products of m x n outputs, as the simulator's work descriptors say (hetgen/spec/work.py);
    # () for the vector unit's work. The cost model prices the array's utilisation from them.
    products: tuple[tuple[int, int, int, int], ...] = ()


def _extents(total: int, size: int) -> list[tuple[int, int]]:
    """(how many, extent) of the ranges `_ranges(total, size)` makes: the full ones, then the rest."""
    full, rest = divmod(total, size)
    return [(count, extent) for count, extent in ((full, size), (1 if rest else 0, rest)) if count]


def _whole_products(op: UnitOp) -> tuple[tuple[int, int, int, int], ...]:
    """The product the whole operator as one tile computes (the simulator's descriptor of it)."""
    definition = op_def(op.node.op)
    if definition is None or not definition.mac:
        return ()
    work = shape_work(op.node, [t for t in op.input_types if t is not None], list(op.output_types))
    return ((1, work.batch, work.m, work.n),)


def _per_input(op: UnitOp, sized: dict[int, tuple[int, int]], one_value: list[int]) -> tuple[tuple, tuple]:
    """(largest block, loads) per input: `sized` gives the sliced inputs'; a one-value input is one
    block loaded once; an omitted one, none. Trailing omitted inputs are dropped, as tiles do."""
    blocks, loads = [0] * len(op.inputs), [0] * len(op.inputs)
    for i, (size, count) in sized.items():
        blocks[i], loads[i] = size, count
    for i in one_value:
        blocks[i], loads[i] = op.input_types[i].nbytes, 1
    return tuple(blocks), tuple(loads)


@dataclass(frozen=True)
class _RowPass:
    """The input rows one pass over a window op's row tiles loads (one input channel): a tile whose
    rows are the previous tile's loads nothing (a halo as tall as the output reads the same rows)."""

    loads: int  # the row tiles that load
    rows: int  # the rows they load
    every: int  # the rows every row tile reads, whether or not the previous read them
    first: int  # the rows of the first row tile
    wraps: bool  # whether the last row tile's rows differ from the first's (a second pass loads again)

    def again(self, passes: int) -> tuple[int, int]:
        """(loads, rows) of `passes` passes one after another (channels outer, ungrouped)."""
        repeat = (self.loads - 1 + self.wraps, self.rows - (0 if self.wraps else self.first))
        return self.loads + (passes - 1) * repeat[0], self.rows + (passes - 1) * repeat[1]


def _row_pass(ranges: list[tuple[int, int]], sh: int, pt: int, kh: int, dh: int, height: int) -> _RowPass:
    spans = [(max(r0 * sh - pt, 0), min((r1 - 1) * sh - pt + (kh - 1) * dh, height - 1)) for r0, r1 in ranges]
    fresh = [i == 0 or span != spans[i - 1] for i, span in enumerate(spans)]
    size = [hi - lo + 1 for lo, hi in spans]
    return _RowPass(
        sum(fresh),
        sum(n for n, f in zip(size, fresh) if f),
        sum(size),
        size[0],
        spans[-1] != spans[0],
    )


def _window_candidates(op: UnitOp) -> list[Candidate]:
    roles = operands(op)
    x_type, y_type = op.input_types[roles.x], op.output_types[0]
    x, y = x_type.shape, y_type.shape
    xb, yb = x_type.dtype.itemsize, y_type.dtype.itemsize
    n_batch, c_in, height, width = x
    _, c_out, out_h, out_w = y
    (kh, _), (sh, _), (dh, _), (pt, _), _ = _window_geometry(op)
    is_conv = roles.like is WorkRule.CONV
    groups = int(op.node.attr("group", 1)) if is_conv else c_out
    cout_g, cin_g = c_out // groups, c_in // groups
    w_type = op.input_types[roles.w] if is_conv else None
    per_channel = math.prod(w_type.shape[1:]) * w_type.dtype.itemsize if is_conv else 0
    # the inputs sliced with the output channels besides the weights (bias, weight scales): bytes a channel
    channel_vectors = {
        i: op.input_types[i].dtype.itemsize
        for i in roles.per_channel
        if is_conv and _present(op, i) and op.input_types[i].size != 1
    }
    one_value = _one_value_inputs(op, roles)
    if one_value is None:
        return []
    one_bytes = sum(op.input_types[i].nbytes for i in one_value)
    found = []
    for rows in _halvings(out_h):
        row_tiles = -(-out_h // rows)
        slab = min((rows - 1) * sh + (kh - 1) * dh + 1, height)
        passed = _row_pass(_ranges(out_h, rows), sh, pt, kh, dh, height)
        for chans in _halvings(c_out, cout_g if groups > 1 else 1):
            if rows == out_h and chans == c_out and n_batch == 1:
                continue
            chan_tiles = -(-c_out // chans)
            in_ch = c_in if groups == 1 else chans // cout_g * cin_g
            split = "rows x channels" if rows < out_h and chans < c_out else ("rows" if chans == c_out else "channels")
            weights = c_out * per_channel + c_out * sum(channel_vectors.values())
            out_bytes = c_out * out_h * out_w * yb
            for outer in (True, False) if rows < out_h and chans < c_out else (True,):
                # A block is loaded where it differs from the one the previous tile loaded (build_plan),
                # batch item by batch item (each item's blocks are its own).
                if outer and groups == 1:  # channels outer: the row tiles' input blocks, once per channel tile
                    in_loads, in_rows = passed.again(chan_tiles)
                elif outer:  # each channel tile reads its own channels' rows
                    in_loads, in_rows = passed.loads * chan_tiles, passed.rows
                elif groups == 1:  # rows outer: a row tile's input block stays for its channel tiles
                    in_loads, in_rows = passed.loads, passed.rows
                else:  # rows outer, grouped: every tile its own block
                    in_loads, in_rows = row_tiles * chan_tiles, passed.every
                in_total = in_rows * width * xb * c_in
                # the weights follow the channel tiles: loaded at each change of channel tile
                w_loads = 1 if chan_tiles == 1 else n_batch * chan_tiles * (1 if outer else row_tiles)
                w_total = weights * w_loads // chan_tiles if chan_tiles > 1 else weights
                tiles = n_batch * row_tiles * chan_tiles
                sized = {roles.x: (in_ch * slab * width * xb, n_batch * in_loads)}
                residual = 0
                if is_conv:
                    sized[roles.w] = (chans * per_channel, w_loads)
                    for i, size in channel_vectors.items():
                        sized[i] = (chans * size, w_loads)
                    if has_residual(op):  # one block per tile, the output block's rows and channels
                        sized[3] = (chans * rows * out_w * yb, tiles)
                        residual = n_batch * out_bytes
                blocks, loads = _per_input(op, sized, one_value)
                products = ()
                if is_conv:  # per tile: out pixels x output channels, or one product per group
                    products = tuple(
                        (n_batch * rc * cc, 1, r * out_w, c) if groups == 1 else (n_batch * rc * cc, c // cout_g, r * out_w, cout_g)
                        for rc, r in _extents(out_h, rows)
                        for cc, c in _extents(c_out, chans)
                    )  # fmt: skip
                found.append(
                    Candidate(
                        split,
                        (1, chans, rows, out_w),
                        functools.partial(_window_tiles, op, rows, chans, outer),
                        tiles,
                        n_batch * in_total + (w_total if is_conv else 0) + n_batch * out_bytes + residual + one_bytes,
                        blocks,
                        loads,
                        (chans * rows * out_w * yb,),
                        products,
                    )
                )
    return found


def _matrix_candidates(op: UnitOp) -> list[Candidate]:
    batch, m, k, n, per_batch = _matrix_view(op)
    roles = operands(op)
    one_value = _one_value_inputs(op, roles)
    if one_value is None:
        return []
    ab, bb = op.input_types[roles.x].dtype.itemsize, op.input_types[roles.w].dtype.itemsize
    yb = op.output_types[0].dtype.itemsize
    column_vectors = {i: op.input_types[i].dtype.itemsize for i in roles.per_channel if _present(op, i)}
    column_vectors = {i: size for i, size in column_vectors.items() if op.input_types[i].size != 1}
    row_vectors = {
        i: op.input_types[i].dtype.itemsize for i in roles.per_row if _present(op, i) and op.input_types[i].size != 1
    }
    one_bytes = sum(op.input_types[i].nbytes for i in one_value)
    a_total, b_total = m * k * ab, k * n * bb
    a_total += m * sum(row_vectors.values())
    b_total += n * sum(column_vectors.values())
    found = []
    for rows in _halvings(m):
        for cols in _halvings(n, 16 if n >= 16 else 1):
            if rows == m and cols == n and batch == 1:
                continue
            mt, nt = -(-m // rows), -(-n // cols)
            split = "rows x columns" if rows < m and cols < n else ("rows" if cols == n else "columns")
            for outer in (True, False) if rows < m and cols < n else (True,):
                if outer:  # rows outer: A's rows stay, B's columns are re-loaded per tile
                    a_loads, b_loads = mt, (mt * nt if nt > 1 else 1)
                else:
                    a_loads, b_loads = (mt * nt if mt > 1 else 1), nt
                a_moved = a_total * (a_loads // mt)
                b_moved = b_total * (b_loads // nt)
                sized = {roles.x: (rows * k * ab, batch * a_loads), roles.w: (k * cols * bb, batch * b_loads)}
                sized.update({i: (cols * size, batch * b_loads) for i, size in column_vectors.items()})
                sized.update({i: (rows * size, batch * a_loads) for i, size in row_vectors.items()})
                blocks, loads = _per_input(op, sized, one_value)
                found.append(
                    Candidate(
                        split,
                        (rows, cols),
                        functools.partial(_matrix_tiles, op, rows, cols, outer),
                        batch * mt * nt,
                        batch * (a_moved + b_moved + m * n * yb) + one_bytes,
                        blocks,
                        loads,
                        (rows * cols * yb,),
                        tuple((batch * rc * cc, 1, r, c) for rc, r in _extents(m, rows) for cc, c in _extents(n, cols)),
                    )
                )
    return found


def _simple_candidate(
    op: UnitOp, split: str, shape, make: Callable[[], list[TileSpec]], tiles: int, chunk_bytes, products=()
):
    inputs = tuple(
        0 if t is None else t.nbytes if t.size == 1 or split == "whole" else chunk_bytes(t) for t in op.input_types
    )
    moved = sum(t.nbytes for t in op.input_types if t is not None) + sum(t.nbytes for t in op.output_types)
    return Candidate(
        split,
        tuple(shape),
        make,
        tiles,
        moved,
        inputs,
        tuple((1 if t.size == 1 and split != "whole" else tiles) if t is not None else 0 for t in op.input_types),
        tuple(chunk_bytes(t) for t in op.output_types),
        products,
    )


def candidates(op: UnitOp) -> list[Candidate]:
    """Every tiling worth trying for `op`. The whole operator as one tile comes first; the others
    only where the operator's shapes allow."""
    whole = _simple_candidate(
        op, "whole", op.output_types[0].shape if op.output_types else (), functools.partial(_whole_tile, op), 1,
        lambda t: t.nbytes if t is not None else 0, _whole_products(op),
    )  # fmt: skip
    found = [whole]
    if any(t is not None and t.size == 0 for t in (*op.input_types, *op.output_types)):
        return found  # an empty tensor (a 0 dimension) has nothing to split: one tile, maybe of 0 bytes
    definition = op_def(op.node.op)
    tiling = definition.tiling if definition is not None else Tiling.WHOLE
    if len(op.output_types) != 1:
        return found
    x = op.input_types[operands(op).x]
    if x is None:
        return found
    if tiling is Tiling.WINDOW and x.rank == 4 and not op.node.attr("ceil_mode", 0):
        found += _window_candidates(op)
    elif tiling is Tiling.CHANNELS and x.rank == 4 and _one_value_inputs(op, operands(op)) is not None:
        n_batch, c, height, width = x.shape
        for chans in _halvings(c)[1:]:
            found.append(
                _simple_candidate(
                    op,
                    "channels",
                    (1, chans, 1, 1),
                    functools.partial(_global_pool_tiles, op, chans),
                    n_batch * -(-c // chans),
                    lambda t, chans=chans: chans * (t.nbytes // max(1, t.shape[0] * t.shape[1])),
                )  # fmt: skip
            )
    elif tiling is Tiling.MATRIX and _matrix_view(op) is not None:
        found += _matrix_candidates(op)
    elif tiling is Tiling.CHUNKS and all(
        t.shape == op.output_types[0].shape or t.size == 1 for t in op.input_types if t is not None
    ):
        total = op.output_types[0].size
        for chunk in _halvings(total, 16 if total >= 16 else 1)[1:]:
            found.append(
                _simple_candidate(
                    op,
                    "chunks",
                    (chunk,),
                    functools.partial(_chunk_tiles, op, chunk),
                    -(-total // chunk),
                    lambda t, chunk=chunk: min(chunk, t.size) * t.dtype.itemsize,
                )  # fmt: skip
            )
    return found
