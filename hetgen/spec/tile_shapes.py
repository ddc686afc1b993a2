"""Tile shapes: what one tile of a kernel unit computes and which blocks of its tensors it reads.

For each operator hetgen tiles (hetgen/spec/tiling.py decides among them): convolutions and window
pooling by output rows (with the input rows their windows reach, the halo) and output channels (with
their slice of the weights), global pooling by channels, matrix products by rows and columns of the
output (a batch item at a time), elementwise operators by chunks; any operator as one whole tile.
A `Candidate` says what choosing needs before the tiles are built: the bytes its DMA moves (halo
re-reads and weight re-loads included), its tile count and its largest block per operand.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hetgen.ir import DType, Graph, Node, TensorType
from hetgen.ops._spatial import window
from hetgen.ops.base import Epilogue, OpInstance, Tiling, WorkRule
from hetgen.ops.registry import op_def
from hetgen.spec.work import shape_work

F32 = DType.FLOAT32


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

    @property
    def work(self) -> WorkRule:
        """Its operator's work rule: CONV (Conv) and GEMM (Gemm) tile with their weight and bias."""
        definition = op_def(self.node.op)
        return definition.work if definition is not None else WorkRule.VECTOR

    def instance(self, input_types, output_types, attrs: dict | None = None) -> OpInstance:
        node = self.node
        if attrs is not None:
            kept = tuple((k, v) for k, v in node.attrs if k not in attrs)
            node = replace(node, attrs=kept + tuple((k, v) for k, v in attrs.items() if v is not None))
        return OpInstance(node, tuple(input_types), tuple(output_types), (None,) * len(input_types), self.epilogue)


def unit_op(
    nodes: Sequence[Node], graph: Graph, epilogue: tuple[Epilogue, ...], inputs: Sequence[str] | None = None
) -> UnitOp:
    """The unit with its tensors named by position (`in0`, `out0`, ...) and its node named `unit`,
    so that every unit of the same operator, attributes and shapes shares one plan; a plan's
    blocks name tensors that way (`tensor_names` maps them back). `inputs`: the kernel's inputs
    where they are not its head's (a Conv with its residual Add: x, w, bias or "", the residual)."""
    head, last = nodes[0], nodes[-1]
    types = graph.types
    read = tuple(inputs) if inputs is not None else head.inputs
    outputs = tuple(name for name in last.outputs if name)
    positions = tuple(f"in{i}" if name else "" for i, name in enumerate(read))
    outs = tuple(f"out{j}" for j in range(len(outputs)))
    canonical = Node("unit", head.op, positions, outs, head.attrs, opset=head.opset)
    return UnitOp(
        canonical,
        positions,
        canonical.outputs,
        tuple(types.get(name) if name else None for name in read),
        tuple(types[name] for name in outputs),
        tuple(bool(name) and name in graph.constants for name in read),
        epilogue,
    )


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


def _t(*shape: int) -> TensorType:
    return TensorType(F32, tuple(int(s) for s in shape))


def _ranges(total: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, total)) for start in range(0, total, size)]


def _window_geometry(op: UnitOp) -> tuple:
    """(kernel, strides, dilations, pads_begin, pads_end) over H and W of a rank-4 window op."""
    x, y = op.input_types[0], op.output_types[0]
    if op.work is WorkRule.CONV:
        kernel = tuple(op.node.attr("kernel_shape") or op.input_types[1].shape[2:])
    else:
        kernel = tuple(op.node.attr("kernel_shape"))
    win = window(op.instance(op.input_types, op.output_types), x.shape[2:], y.shape[2:], kernel)
    return win.kernel[-2:], win.strides[-2:], win.dilations[-2:], win.pads_begin[-2:], win.pads_end[-2:]


def has_residual(op: UnitOp) -> bool:
    """A Conv that adds a residual tensor (its fourth input, the output's shape) to its outputs."""
    return op.work is WorkRule.CONV and len(op.inputs) > 3 and bool(op.inputs[3])


def _window_tiles(op: UnitOp, rows: int, chans: int, channels_outer: bool) -> list[TileSpec]:
    """Conv or window pooling: output rows x output channels per tile, one batch item at a time."""
    x, y = op.input_types[0].shape, op.output_types[0].shape
    n_batch, c_in, height, width = x
    _, c_out, out_h, out_w = y
    (kh, _), (sh, _), (dh, _), (pt, pl), (_, pr) = _window_geometry(op)
    is_conv = op.work is WorkRule.CONV
    groups = int(op.node.attr("group", 1)) if is_conv else c_out
    cout_g, cin_g = c_out // groups, c_in // groups
    row_ranges, chan_ranges = _ranges(out_h, rows), _ranges(c_out, chans)
    order = (
        [(c, r) for c in chan_ranges for r in row_ranges]
        if channels_outer
        else [(c, r) for r in row_ranges for c in chan_ranges]
    )
    specs = []
    for n in range(n_batch):
        for (c0, c1), (r0, r1) in order:
            first, last = r0 * sh - pt, (r1 - 1) * sh - pt + (kh - 1) * dh
            lo, hi = max(first, 0), min(last, height - 1)
            pad_top, pad_bottom = lo - first, last - hi
            i0, i1 = (0, c_in) if groups == 1 else (c0 // cout_g * cin_g, c1 // cout_g * cin_g)
            slab = hi - lo + 1
            x_block = _block(op.inputs[0], ((n * c_in + i0) * height + lo) * width * 4, i1 - i0, slab * width * 4,
                             height * width * 4)  # fmt: skip
            y_block = _block(op.outputs[0], ((n * c_out + c0) * out_h + r0) * out_w * 4, c1 - c0,
                             (r1 - r0) * out_w * 4, out_h * out_w * 4)  # fmt: skip
            x_type, y_type = _t(1, i1 - i0, slab, width), _t(1, c1 - c0, r1 - r0, out_w)
            attrs = {"pads": (pad_top, pl, pad_bottom, pr), "auto_pad": None}
            if is_conv:
                w = op.input_types[1].shape
                per_channel = math.prod(w[1:]) * 4
                blocks = [x_block, _block(op.inputs[1], c0 * per_channel, 1, (c1 - c0) * per_channel, 0)]
                types = [x_type, _t(c1 - c0, *w[1:])]
                if len(op.inputs) > 2 and op.inputs[2]:
                    blocks.append(_block(op.inputs[2], c0 * 4, 1, (c1 - c0) * 4, 0))
                    types.append(_t(c1 - c0))
                elif has_residual(op):
                    blocks.append(None)
                    types.append(None)
                if has_residual(op):  # the residual's block is the output's: no halo
                    blocks.append(replace(y_block, tensor=op.inputs[3]))
                    types.append(y_type)
                attrs["group"] = 1 if groups == 1 else (c1 - c0) // cout_g
            else:
                blocks, types = [x_block], [x_type]
            specs.append(TileSpec(tuple(types), (y_type,), tuple(attrs.items()), tuple(blocks), (y_block,)))
    return specs


def _global_pool_tiles(op: UnitOp, chans: int) -> list[TileSpec]:
    n_batch, c, height, width = op.input_types[0].shape
    specs = []
    for n in range(n_batch):
        for c0, c1 in _ranges(c, chans):
            x_block = _block(op.inputs[0], (n * c + c0) * height * width * 4, 1, (c1 - c0) * height * width * 4, 0)
            y_block = _block(op.outputs[0], (n * c + c0) * 4, 1, (c1 - c0) * 4, 0)
            specs.append(
                TileSpec((_t(1, c1 - c0, height, width),), (_t(1, c1 - c0, 1, 1),), (), (x_block,), (y_block,))
            )
    return specs


def _matrix_view(op: UnitOp) -> tuple[int, int, int, int, bool] | None:
    """(batch, M, K, N, b_per_batch) of a MatMul or Gemm that tiles as a 2-D product, else None."""
    a, b = op.input_types[0].shape, op.input_types[1].shape
    if op.work is WorkRule.GEMM:
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
        return 1, math.prod(a[:-1]), a[-1], b[-1], False
    if a[:-2] == b[:-2]:
        return math.prod(a[:-2]), a[-2], a[-1], b[-1], True
    return None


def _matrix_tiles(op: UnitOp, rows: int, cols: int, rows_outer: bool) -> list[TileSpec]:
    batch, m, k, n, per_batch = _matrix_view(op)
    trans_b = op.work is WorkRule.GEMM and bool(op.node.attr("transB", 0))
    row_ranges, col_ranges = _ranges(m, rows), _ranges(n, cols)
    order = (
        [(r, c) for r in row_ranges for c in col_ranges]
        if rows_outer
        else [(r, c) for c in col_ranges for r in row_ranges]
    )
    specs = []
    for bi in range(batch):
        a_base, b_base, y_base = bi * m * k * 4, (bi * k * n * 4 if per_batch else 0), bi * m * n * 4
        for (m0, m1), (n0, n1) in order:
            a_block = _block(op.inputs[0], a_base + m0 * k * 4, 1, (m1 - m0) * k * 4, 0)
            if trans_b:
                b_block = _block(op.inputs[1], n0 * k * 4, 1, (n1 - n0) * k * 4, 0)
                b_type = _t(n1 - n0, k)
            else:
                b_block = _block(op.inputs[1], b_base + n0 * 4, k, (n1 - n0) * 4, n * 4)
                b_type = _t(k, n1 - n0)
            blocks, types = [a_block, b_block], [_t(m1 - m0, k), b_type]
            if op.work is WorkRule.GEMM and len(op.inputs) > 2 and op.inputs[2]:
                if op.input_types[2].size == 1:
                    blocks.append(_block(op.inputs[2], 0, 1, 4, 0))
                    types.append(_t(1))
                else:
                    blocks.append(_block(op.inputs[2], n0 * 4, 1, (n1 - n0) * 4, 0))
                    types.append(_t(n1 - n0))
            y_block = _block(op.outputs[0], y_base + (m0 * n + n0) * 4, m1 - m0, (n1 - n0) * 4, n * 4)
            specs.append(TileSpec(tuple(types), (_t(m1 - m0, n1 - n0),), (), tuple(blocks), (y_block,)))
    return specs


def _chunk_tiles(op: UnitOp, chunk: int) -> list[TileSpec]:
    total = op.output_types[0].size
    specs = []
    for e0, e1 in _ranges(total, chunk):
        blocks, types = [], []
        for name, typ in zip(op.inputs, op.input_types):
            if typ is None:  # an omitted optional input (Clip's min): no block, a NULL argument
                blocks.append(None)
                types.append(None)
            elif typ.size == 1:
                blocks.append(_block(name, 0, 1, 4, 0))
                types.append(_t(1))
            else:
                blocks.append(_block(name, e0 * 4, 1, (e1 - e0) * 4, 0))
                types.append(_t(e1 - e0))
        y_block = _block(op.outputs[0], e0 * 4, 1, (e1 - e0) * 4, 0)
        specs.append(TileSpec(tuple(types), (_t(e1 - e0),), (), tuple(blocks), (y_block,)))
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


def _window_candidates(op: UnitOp) -> list[Candidate]:
    x, y = op.input_types[0].shape, op.output_types[0].shape
    n_batch, c_in, height, width = x
    _, c_out, out_h, out_w = y
    (kh, _), (sh, _), (dh, _), (pt, _), _ = _window_geometry(op)
    is_conv = op.work is WorkRule.CONV
    groups = int(op.node.attr("group", 1)) if is_conv else c_out
    cout_g, cin_g = c_out // groups, c_in // groups
    per_channel = math.prod(op.input_types[1].shape[1:]) * 4 if is_conv else 0
    has_bias = is_conv and len(op.inputs) > 2 and bool(op.inputs[2])
    found = []
    for rows in _halvings(out_h):
        row_tiles = -(-out_h // rows)
        slab = min((rows - 1) * sh + (kh - 1) * dh + 1, height)
        rows_read = sum(  # input rows each row tile reads, its halo included
            min((r1 - 1) * sh - pt + (kh - 1) * dh, height - 1) - max(r0 * sh - pt, 0) + 1
            for r0, r1 in _ranges(out_h, rows)
        )
        for chans in _halvings(c_out, cout_g if groups > 1 else 1):
            if rows == out_h and chans == c_out and n_batch == 1:
                continue
            chan_tiles = -(-c_out // chans)
            in_ch = c_in if groups == 1 else chans // cout_g * cin_g
            split = "rows x channels" if rows < out_h and chans < c_out else ("rows" if chans == c_out else "channels")
            weights = c_out * per_channel + (c_out * 4 if has_bias else 0)
            out_bytes = c_out * out_h * out_w * 4
            one_pass = rows_read * width * 4  # one input channel, every row tile
            for outer in (True, False) if rows < out_h and chans < c_out else (True,):
                if outer:  # channels outer: a channel tile's weights stay; its inputs are read per row tile
                    in_total = one_pass * (c_in * chan_tiles if groups == 1 else c_in)
                    w_total, in_loads, w_loads = weights, row_tiles * chan_tiles, chan_tiles
                else:  # rows outer: a row tile's input stays (ungrouped); weights are re-loaded per tile
                    in_total = one_pass * c_in
                    in_loads = row_tiles if groups == 1 else row_tiles * chan_tiles
                    w_loads = row_tiles * chan_tiles if chan_tiles > 1 else 1
                    w_total = weights * (row_tiles if chan_tiles > 1 else 1)
                tiles = n_batch * row_tiles * chan_tiles
                blocks = [in_ch * slab * width * 4]
                loads = [n_batch * in_loads]
                residual = 0
                if is_conv:
                    blocks.append(chans * per_channel)
                    loads.append(n_batch * w_loads if n_batch == 1 else tiles)
                    if len(op.inputs) > 2:
                        blocks.append(chans * 4 if has_bias else 0)
                        loads.append(loads[-1] if has_bias else 0)
                    if has_residual(op):  # one block per tile, the output block's rows and channels
                        blocks.append(chans * rows * out_w * 4)
                        loads.append(tiles)
                        residual = n_batch * out_bytes
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
                        n_batch * (in_total + (w_total if n_batch == 1 else weights * tiles // max(1, n_batch)))
                        + n_batch * out_bytes
                        + residual,
                        tuple(blocks),
                        tuple(loads),
                        (chans * rows * out_w * 4,),
                        products,
                    )
                )
    return found


def _matrix_candidates(op: UnitOp) -> list[Candidate]:
    batch, m, k, n, per_batch = _matrix_view(op)
    has_c = op.work is WorkRule.GEMM and len(op.inputs) > 2 and bool(op.inputs[2])
    a_total, b_total = m * k * 4, k * n * 4
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
                blocks = [rows * k * 4, k * cols * 4] + ([cols * 4] if has_c else [])
                loads = [batch * a_loads, batch * b_loads if per_batch or batch == 1 else batch * b_loads]
                if has_c:
                    loads.append(loads[1])
                found.append(
                    Candidate(
                        split,
                        (rows, cols),
                        functools.partial(_matrix_tiles, op, rows, cols, outer),
                        batch * mt * nt,
                        batch * (a_moved + b_moved + m * n * 4),
                        tuple(blocks),
                        tuple(loads),
                        (rows * cols * 4,),
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
        tuple(tiles if t is not None else 0 for t in op.input_types),
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
    all_f32 = all(t is None or t.dtype is F32 for t in (*op.input_types, *op.output_types))
    if not all_f32 or len(op.output_types) != 1:
        return found
    x = op.input_types[0]
    if tiling is Tiling.WINDOW and x.rank == 4 and not op.node.attr("ceil_mode", 0):
        found += _window_candidates(op)
    elif tiling is Tiling.CHANNELS and x.rank == 4:
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
                    lambda t, chunk=chunk: min(chunk, t.size) * 4,
                )  # fmt: skip
            )
    return found
