"""Tiling: how an accelerator with a small local memory (SRAM) runs a kernel unit.

An accelerator's tensors live in its device memory (the co-processor's DRAM it reaches by DMA); its
engines compute only from SRAM. Each kernel unit (an operator and the activations fused into it)
is cut into tiles whose buffers fit the SRAM: output rows (with the input rows their windows reach,
the halo, for convolutions and pooling), output channels (with their slice of the weights), or
both; rows and columns of a matrix product; chunks of an elementwise operator. Each tile is a DMA
of its input blocks into SRAM (a block the previous tile left in SRAM is not loaded again), one
kernel call on the SRAM buffers, and a DMA of its output block back. When two tiles' buffers fit,
they are double-buffered: the next tile's loads and the previous tile's store overlap the compute.

`unit_plan` is the one function that decides. Its `TilePlan` is read by the `fits_memory`
predicate (a unit fits when a plan exists), the cost model (`plan_us`: the plan's commands timed
with the platform's figures), lowering (the command list the device runs) and the simulator's work
descriptors. A unit no plan fits is refused with the numbers; nothing falls back later.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hetgen.ir import DType, Graph, Node, TensorType
from hetgen.ops.base import Epilogue, Kernel, OpInstance, Unsupported
from hetgen.ops.registry import op_def

ALIGNMENT = 64
# The simulator remembers when the last RING commands finished; a command waits for one of them.
RING = 64
F32 = DType.FLOAT32
ELEMENTWISE = frozenset(
    {"Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish"}
)
WINDOW_POOLS = frozenset({"MaxPool", "AveragePool"})
GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool"})


def _aligned(value: int) -> int:
    return (value + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


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
class Tile:
    kernel: int  # index into TilePlan.kernels
    inputs: tuple[Block | None, ...]  # one per kernel input (None: an omitted optional input)
    outputs: tuple[Block, ...]
    flops: int


class Action(enum.Enum):
    LOAD = "load"  # DMA a block of an input from device memory (or the weights) into SRAM
    COMPUTE = "compute"  # run the tile's kernel on SRAM buffers
    STORE = "store"  # DMA an output block from SRAM to device memory


@dataclass(frozen=True)
class Buffer:
    """An SRAM buffer: input or output `operand`'s slot, or the kernels' scratch (operand -1)."""

    role: str  # "input" | "output" | "scratch"
    operand: int
    slot: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Command:
    action: Action
    tile: int
    operand: int  # LOAD: input index; STORE: output index; COMPUTE: -1
    buffer: int  # index into TilePlan.buffers (COMPUTE: -1; its buffers are in `reads`/`writes`)
    reads: tuple[int, ...]  # buffers read
    writes: tuple[int, ...]  # buffers written
    after: int  # how many commands back the command this one waits for is (0: none); < RING

    @property
    def is_dma(self) -> bool:
        return self.action is not Action.COMPUTE


@dataclass(frozen=True)
class TileKernel:
    instance: OpInstance  # the operator on one tile's shapes
    kernel: Kernel


@dataclass(frozen=True)
class TilePlan:
    op: str
    split: str  # "whole" | "rows" | "channels" | "rows x channels" | "columns" | "chunks" ...
    tile_shape: tuple[int, ...]  # the output block of a full tile
    kernels: tuple[TileKernel, ...]
    tiles: tuple[Tile, ...]
    buffers: tuple[Buffer, ...]
    commands: tuple[Command, ...]
    double_buffered: bool
    sram_bytes: int  # the tile buffers
    scratch_bytes: int = 0  # the emulating C kernels' workspace, outside SRAM (build_plan)

    @property
    def count(self) -> int:
        return len(self.tiles)

    def moved(self, action: Action) -> int:
        """Bytes the DMA moves for `action` (LOAD or STORE), every tile included."""
        total = 0
        for command in self.commands:
            if command.action is action:
                tile = self.tiles[command.tile]
                block = tile.inputs[command.operand] if action is Action.LOAD else tile.outputs[command.operand]
                total += block.nbytes
        return total

    @property
    def dma_bytes(self) -> int:
        return self.moved(Action.LOAD) + self.moved(Action.STORE)

    def block_of(self, command: Command) -> Block:
        tile = self.tiles[command.tile]
        return tile.inputs[command.operand] if command.action is Action.LOAD else tile.outputs[command.operand]

    def describe(self) -> str:
        shape = "x".join(map(str, self.tile_shape))
        buffering = "double-buffered" if self.double_buffered else "single-buffered"
        return (
            f"{self.split}: {self.count} tile{'s' if self.count != 1 else ''} of {shape}, "
            f"DMA {self.dma_bytes} bytes, {buffering}, SRAM {self.sram_bytes} bytes"
        )


@dataclass(frozen=True)
class Unfit:
    """Why no plan fits: the smallest footprint any tiling reached, and what it holds."""

    reason: str


# ---------------------------------------------------------------------------------------------
# The unit's operator and what one tile of it computes


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

    def instance(self, input_types, output_types, attrs: dict | None = None) -> OpInstance:
        node = self.node
        if attrs is not None:
            kept = tuple((k, v) for k, v in node.attrs if k not in attrs)
            node = replace(node, attrs=kept + tuple((k, v) for k, v in attrs.items() if v is not None))
        return OpInstance(node, tuple(input_types), tuple(output_types), (None,) * len(input_types), self.epilogue)


def unit_op(nodes: Sequence[Node], graph: Graph, epilogue: tuple[Epilogue, ...]) -> UnitOp:
    """The unit with its tensors named by position (`in0`, `out0`, ...) and its node named `unit`,
    so that every unit of the same operator, attributes and shapes shares one plan; a plan's
    blocks name tensors that way (`tensor_names` maps them back)."""
    head, last = nodes[0], nodes[-1]
    types = graph.types
    outputs = tuple(name for name in last.outputs if name)
    inputs = tuple(f"in{i}" if name else "" for i, name in enumerate(head.inputs))
    canonical = Node("unit", head.op, inputs, tuple(f"out{j}" for j in range(len(outputs))), head.attrs)
    return UnitOp(
        canonical,
        inputs,
        canonical.outputs,
        tuple(types.get(name) if name else None for name in head.inputs),
        tuple(types[name] for name in outputs),
        tuple(bool(name) and name in graph.constants for name in head.inputs),
        epilogue,
    )


def tensor_names(nodes: Sequence[Node]) -> dict[str, str]:
    """A unit's position names (`in0`, `out0`, ...: what its plan's blocks say) -> its tensors."""
    names = {f"in{i}": name for i, name in enumerate(nodes[0].inputs) if name}
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
    from hetgen.ops._spatial import window

    x, y = op.input_types[0], op.output_types[0]
    if op.node.op == "Conv":
        kernel = tuple(op.node.attr("kernel_shape") or op.input_types[1].shape[2:])
    else:
        kernel = tuple(op.node.attr("kernel_shape"))
    win = window(op.instance(op.input_types, op.output_types), x.shape[2:], y.shape[2:], kernel)
    return win.kernel[-2:], win.strides[-2:], win.dilations[-2:], win.pads_begin[-2:], win.pads_end[-2:]


def _window_tiles(op: UnitOp, rows: int, chans: int, channels_outer: bool) -> list[TileSpec]:
    """Conv or window pooling: output rows x output channels per tile, one batch item at a time."""
    x, y = op.input_types[0].shape, op.output_types[0].shape
    n_batch, c_in, height, width = x
    _, c_out, out_h, out_w = y
    (kh, _), (sh, _), (dh, _), (pt, pl), (_, pr) = _window_geometry(op)
    is_conv = op.node.op == "Conv"
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
    if op.node.op == "Gemm":
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
    trans_b = op.node.op == "Gemm" and bool(op.node.attr("transB", 0))
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
            if op.node.op == "Gemm" and len(op.inputs) > 2 and op.inputs[2]:
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
            if typ.size == 1:
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


def _window_candidates(op: UnitOp) -> list[Candidate]:
    x, y = op.input_types[0].shape, op.output_types[0].shape
    n_batch, c_in, height, width = x
    _, c_out, out_h, out_w = y
    (kh, _), (sh, _), (dh, _), _, _ = _window_geometry(op)
    is_conv = op.node.op == "Conv"
    groups = int(op.node.attr("group", 1)) if is_conv else c_out
    cout_g, cin_g = c_out // groups, c_in // groups
    per_channel = math.prod(op.input_types[1].shape[1:]) * 4 if is_conv else 0
    has_bias = is_conv and len(op.inputs) > 2 and bool(op.inputs[2])
    found = []
    for rows in _halvings(out_h):
        row_tiles = -(-out_h // rows)
        slab = min((rows - 1) * sh + (kh - 1) * dh + 1, height)
        rows_read = sum(
            min((r1 - 1) * sh + (kh - 1) * dh, height - 1 + 0) - max(r0 * sh, 0) + 1 for r0, r1 in _ranges(out_h, rows)
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
                if is_conv:
                    blocks.append(chans * per_channel)
                    loads.append(n_batch * w_loads if n_batch == 1 else tiles)
                    if len(op.inputs) > 2:
                        blocks.append(chans * 4 if has_bias else 0)
                        loads.append(loads[-1] if has_bias else 0)
                found.append(
                    Candidate(
                        split,
                        (1, chans, rows, out_w),
                        functools.partial(_window_tiles, op, rows, chans, outer),
                        tiles,
                        n_batch * (in_total + (w_total if n_batch == 1 else weights * tiles // max(1, n_batch)))
                        + n_batch * out_bytes,
                        tuple(blocks),
                        tuple(loads),
                        (chans * rows * out_w * 4,),
                    )
                )
    return found


def _matrix_candidates(op: UnitOp) -> list[Candidate]:
    batch, m, k, n, per_batch = _matrix_view(op)
    has_c = op.node.op == "Gemm" and len(op.inputs) > 2 and bool(op.inputs[2])
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
                    )
                )
    return found


def _simple_candidate(op: UnitOp, split: str, shape, make: Callable[[], list[TileSpec]], tiles: int, chunk_bytes):
    inputs = tuple(
        t.nbytes if t is not None and (t.size == 1 or split == "whole") else chunk_bytes(t) for t in op.input_types
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
    )


def candidates(op: UnitOp) -> list[Candidate]:
    """Every tiling worth trying for `op`. The whole operator as one tile comes first; the others
    only where the operator's shapes allow."""
    whole = _simple_candidate(
        op, "whole", op.output_types[0].shape if op.output_types else (), functools.partial(_whole_tile, op), 1,
        lambda t: t.nbytes if t is not None else 0,
    )  # fmt: skip
    found = [whole]
    name = op.node.op
    all_f32 = all(t is None or t.dtype is F32 for t in (*op.input_types, *op.output_types))
    if not all_f32 or len(op.output_types) != 1:
        return found
    x = op.input_types[0]
    if name in ("Conv", *WINDOW_POOLS) and x.rank == 4 and not op.node.attr("ceil_mode", 0):
        found += _window_candidates(op)
    elif name in GLOBAL_POOLS and x.rank == 4:
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
    elif name in ("MatMul", "Gemm") and _matrix_view(op) is not None:
        found += _matrix_candidates(op)
    elif name in ELEMENTWISE and all(
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


# ---------------------------------------------------------------------------------------------
# From tiles to a plan: kernels, SRAM buffers, the command list


@functools.lru_cache(maxsize=4096)
def _lowered(instance: OpInstance) -> Kernel:
    definition = op_def(instance.node.op)
    return definition.lower(instance)


def _kernel_of(op: UnitOp, spec: TileSpec, whole: bool) -> OpInstance:
    if whole:
        return op.instance(op.input_types, op.output_types)
    return op.instance(spec.input_types, spec.output_types, dict(spec.attrs))


def build_plan(op: UnitOp, split: str, shape, specs: list[TileSpec], capacity: int, double: bool) -> TilePlan | None:
    """The plan for these tiles, or None when its SRAM buffers exceed `capacity`."""
    whole = split == "whole"
    instances: dict[tuple, int] = {}
    kernels: list[TileKernel] = []
    tiles: list[Tile] = []
    for spec in specs:
        key = (spec.input_types, spec.output_types, spec.attrs)
        if key not in instances:
            instance = _kernel_of(op, spec, whole)
            try:
                kernel = _lowered(instance)
            except Unsupported:
                return None
            instances[key] = len(kernels)
            kernels.append(TileKernel(instance, kernel))
        index = instances[key]
        tiles.append(Tile(index, spec.inputs, spec.outputs, kernels[index].kernel.flops))
    n_in, n_out = len(op.inputs), len(op.outputs)
    # Which tiles load which input: a block still resident from the previous load is reused.
    loads: list[list[int]] = [[] for _ in range(n_in)]  # per input: the tile of each load
    resident: list[Block | None] = [None] * n_in
    load_at: dict[tuple[int, int], int] = {}  # (tile, input) -> load number of that input
    for t, tile in enumerate(tiles):
        for i, block in enumerate(tile.inputs):
            if block is None:
                continue
            if block != resident[i]:
                loads[i].append(t)
                resident[i] = block
            load_at[(t, i)] = len(loads[i]) - 1
    slots_in = [min(2 if double else 1, max(len(loads[i]), 1)) for i in range(n_in)]
    slots_out = [min(2 if double else 1, len(tiles)) for _ in range(n_out)]
    buffers: list[Buffer] = []
    offset = 0
    in_buffer: dict[tuple[int, int], int] = {}
    for i in range(n_in):
        size = max((tile.inputs[i].nbytes for tile in tiles if tile.inputs[i] is not None), default=0)
        if size == 0:
            continue
        for slot in range(slots_in[i]):
            in_buffer[(i, slot)] = len(buffers)
            buffers.append(Buffer("input", i, slot, offset, size))
            offset += _aligned(size)
    out_buffer: dict[tuple[int, int], int] = {}
    for j in range(n_out):
        size = max(tile.outputs[j].nbytes for tile in tiles)
        for slot in range(slots_out[j]):
            out_buffer[(j, slot)] = len(buffers)
            buffers.append(Buffer("output", j, slot, offset, size))
            offset += _aligned(size)
    # The host C kernel's workspace (im2col, GEMM packing) emulates how the MAC array streams its
    # operands; it is the emulator's, not the device's, so it lies outside SRAM (offset 0 of its own).
    scratch = max(k.kernel.scratch_bytes for k in kernels)
    scratch_buffer = -1
    if scratch:
        scratch_buffer = len(buffers)
        buffers.append(Buffer("scratch", -1, 0, 0, scratch))
    if offset > capacity:
        return None

    def load_cmd(t: int) -> list[tuple]:
        out = []
        for i, block in enumerate(tiles[t].inputs):
            if block is not None and loads[i][load_at[(t, i)]] == t:
                buf = in_buffer[(i, load_at[(t, i)] % slots_in[i])]
                out.append((Action.LOAD, t, i, buf, (), (buf,)))
        return out

    def compute_cmd(t: int) -> tuple:
        reads = tuple(in_buffer[(i, load_at[(t, i)] % slots_in[i])] for i, b in enumerate(tiles[t].inputs) if b)
        writes = tuple(out_buffer[(j, t % slots_out[j])] for j in range(n_out))
        extra = (scratch_buffer,) if scratch_buffer >= 0 else ()
        return (Action.COMPUTE, t, -1, -1, reads + extra, writes + extra)

    def store_cmd(t: int) -> list[tuple]:
        return [
            (Action.STORE, t, j, out_buffer[(j, t % slots_out[j])], (out_buffer[(j, t % slots_out[j])],), ())
            for j in range(n_out)
        ]

    raw: list[tuple] = []
    if double and len(tiles) > 1:  # software pipeline: the next tile's loads before this tile's compute
        raw += load_cmd(0)
        for t in range(len(tiles)):
            if t + 1 < len(tiles):
                raw += load_cmd(t + 1)
            raw.append(compute_cmd(t))
            raw += store_cmd(t)
    else:
        for t in range(len(tiles)):
            raw += load_cmd(t)
            raw.append(compute_cmd(t))
            raw += store_cmd(t)
    commands = _with_waits(raw)
    return TilePlan(
        op.node.op,
        split,
        tuple(shape),
        tuple(kernels),
        tuple(tiles),
        tuple(buffers),
        commands,
        double and len(tiles) > 1,
        offset,
        scratch,
    )


def _with_waits(raw: list[tuple]) -> tuple[Command, ...]:
    """Each command waits for the latest earlier command of the other engine (DMA or compute) that
    touches one of its buffers; commands of one engine run in order, so that one suffices."""
    commands: list[Command] = []
    last_write: dict[int, int] = {}
    last_read: dict[int, int] = {}
    for index, (action, t, operand, buf, reads, writes) in enumerate(raw):
        dma = action is not Action.COMPUTE
        conflicts = [last_write.get(b, -1) for b in reads + writes] + [last_read.get(b, -1) for b in writes]
        other = [c for c in conflicts if c >= 0 and commands[c].is_dma != dma]
        wait = max(other, default=-1)
        if wait >= 0 and index - wait >= RING:
            # Too far back for the simulator's memory: wait instead for the oldest command of that
            # engine it still remembers, which finishes later (engines run in order).
            wait = next((c for c in range(index - RING + 1, index) if commands[c].is_dma != dma), -1)
            if wait < 0:
                from hetgen.errors import InternalError

                raise InternalError(f"tiling: command {index} has no command of the other engine within {RING}")
        for b in reads:
            last_read[b] = index
        for b in writes:
            last_write[b] = index
        commands.append(Command(action, t, operand, buf, reads, writes, index - wait if wait >= 0 else 0))
    return tuple(commands)


# ---------------------------------------------------------------------------------------------
# Timing a plan and choosing one


@dataclass(frozen=True)
class Rates:
    """What a plan's commands take: us per flop of compute, per byte of DMA, per command."""

    us_per_flop: float
    us_per_byte: float
    command_us: float = 0.0


def plan_us(plan: TilePlan, rates: Rates) -> float:
    """The plan's time on two engines that run in order and wait as its commands say."""
    finish: list[float] = []
    free = {True: 0.0, False: 0.0}
    end = 0.0
    for index, command in enumerate(plan.commands):
        if command.is_dma:
            took = plan.block_of(command).nbytes * rates.us_per_byte
        else:
            took = plan.tiles[command.tile].flops * rates.us_per_flop
        ready = finish[index - command.after] if command.after else 0.0
        done = max(free[command.is_dma], ready) + took + rates.command_us
        free[command.is_dma] = done
        finish.append(done)
        end = max(end, done)
    return end


# Tile counts past this make command lists no device would be given.
MAX_TILES = 4096


def estimate_us(candidate: Candidate, flops: int, rates: Rates, double: bool) -> float:
    """What choosing among tilings assumes a candidate takes: DMA and compute, overlapped but for
    one tile's worth when double-buffered, and each command's overhead."""
    dma, compute = candidate.dma_bytes * rates.us_per_byte, flops * rates.us_per_flop
    commands = candidate.tiles * 2 + sum(candidate.input_loads)
    if double and candidate.tiles > 1:
        return max(dma, compute) + (dma + compute) / candidate.tiles + commands * rates.command_us
    return dma + compute + commands * rates.command_us


def footprint(candidate: Candidate, double: bool) -> int:
    """The SRAM a candidate's buffers take (the kernels' emulation workspace is not SRAM)."""
    slots = [
        _aligned(size) * (min(2, loads) if double else 1)
        for size, loads in zip(candidate.input_blocks, candidate.input_loads)
        if size
    ]
    outs = [_aligned(size) * (2 if double and candidate.tiles > 1 else 1) for size in candidate.output_blocks]
    return sum(slots) + sum(outs)


@functools.lru_cache(maxsize=2048)
def _best_plan(op: UnitOp, capacity: int, rates: Rates) -> TilePlan | Unfit:
    try:
        flops = _lowered(op.instance(op.input_types, op.output_types)).flops
    except Unsupported as exc:
        return Unfit(f"{op.node.op} cannot be lowered: {exc}")
    ranked = []
    smallest: tuple[int, str] | None = None
    for candidate in candidates(op):
        if candidate.tiles > MAX_TILES:
            continue
        for double in (True, False):
            size = footprint(candidate, double)
            if size <= capacity:
                ranked.append(
                    (estimate_us(candidate, flops, rates, double), candidate.tiles, len(ranked), candidate, double)
                )
            elif smallest is None or size < smallest[0]:
                smallest = (size, f"{candidate.split} {'x'.join(map(str, candidate.tile_shape))}")
    # Split no finer than pays: the fewest tiles within 1 % of the fastest estimate go first.
    fastest = min((item[0] for item in ranked), default=0.0)
    order = sorted(ranked, key=lambda item: (item[0] > fastest * 1.01, item[1], item[0], item[2]))
    for *_, candidate, double in order:
        plan = build_plan(op, candidate.split, candidate.tile_shape, candidate.specs(), capacity, double)
        if plan is not None:
            return plan
    detail = f"; the smallest tiling needs {smallest[0]} bytes ({smallest[1]})" if smallest else ""
    return Unfit(f"no tiling of {op.node.op} fits {capacity} bytes of local memory{detail}")


def unit_plan(nodes: Sequence[Node], graph: Graph, epilogue: tuple[Epilogue, ...], capacity: int, rates: Rates):
    """The tiling of the kernel unit `nodes` (its head, then the activations fused into it) on a
    device with `capacity` bytes of SRAM: a TilePlan, or an Unfit that says why none fits."""
    return _best_plan(unit_op(nodes, graph, epilogue), capacity, rates)
