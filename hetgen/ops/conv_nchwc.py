"""Conv on blocked channels (NCHW[V]c) and the reorders at the edges of a blocked run.

hetgen/lower/blocked_layout.py decides which Conv units run blocked; this module lowers them:

- a blocked tensor of C channels is [N][ceil(C / V)][H][W][V], the channels past C zero where a
  reorder wrote them (a Conv's padded output channels hold its epilogue of zero, which no reader
  uses: every blocked Conv's weights for those input channels are zero, and the reorder back drops
  them);
- the Conv is a direct convolution (templates/kernels/conv_nchwc.c.j2): per output row, register
  tiles of several output columns x one, two or four output-channel blocks, each accumulating over
  every input block and tap with a broadcast input value times a vector of V output channels' weights.
  No im2col, no workspace. The weights are packed here, at generate time, as
  [oc block][ic block][kh][kw][ic][oc] (zero-padded), the bias as ceil(C_out / V) * V floats;
- columns whose taps all lie inside the input row run unchecked tiles; the border columns (and
  rows too short for a full tile) run checked tiles, which first copy the input columns under them
  into a row with zeros for the padding (rows of taps in the padding are skipped).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetgen.ops import _parallel
from hetgen.ops._common import require_float32, total_bytes
from hetgen.ops._spatial import conv_geometry
from hetgen.ops.base import Kernel, OpInstance, Unsupported
from hetgen.ops.conv import interior_columns

# Vector registers per block width (the ISA whose vector is one block): AVX-512 has 32 zmm, AVX2 16
# ymm, NEON 32 q; a tile keeps its accumulators, one weight vector per output block and the
# broadcast input in them. Other ISAs build the same tiles through vector extensions.
REGISTERS = {16: 32, 8: 16, 4: 32}
# Below this many accumulators the FMAs of a tile wait on each other (latency x pipes).
MIN_ACCUMULATORS = 8
# Every tile of a row re-reads its output blocks' weights: four blocks' are taken only while they
# fit half of a 1 MiB L2 (512 channels' 3x3 weights for four blocks would stream from L3).
WEIGHTS_IN_L2 = 512 * 1024
# The worker pool (templates/runtime/hg_threads.h) takes a layer in tasks of about this many
# multiply-adds (the GEMM's split threshold: below it waking a worker costs more than it saves), at
# most MAX_TASKS of them. The tasks are fixed here, not by the thread count, and every output is
# computed by one task the same way, so 1 and N threads give bit-identical results; the caller and
# the workers claim tasks one at a time, so many small tasks balance an uneven split.
TASK_MACS = 1 << 18
MAX_TASKS = 64
# A reorder is a copy: a task moves at least this many bytes (read + written).
REORDER_TASK_BYTES = 1 << 17
POOL_HELPER = "hg_threads.c"


@dataclass(frozen=True)
class Segment:
    """Output columns [start, stop) of every row, computed `width` at a time."""

    start: int
    stop: int
    width: int
    checked: bool

    @property
    def suffix(self) -> str:
        """The tile function's name after its width: checked tiles are `_checked`."""
        return "_checked" if self.checked else ""


@dataclass(frozen=True)
class Tile:
    """One register tile function: `width` columns, each `floats` apart in the input row."""

    width: int
    checked: bool
    span: int  # input columns under the tile (its taps included)
    v: int

    @property
    def suffix(self) -> str:
        return "_checked" if self.checked else ""

    @property
    def columns(self) -> range:
        return range(self.width)

    @property
    def span_floats(self) -> int:
        return self.span * self.v

    @property
    def floats(self) -> int:
        return self.width * self.v

    @property
    def store_offsets(self) -> tuple[int, ...]:
        """Each column's first float in an output block's row."""
        return tuple(r * self.v for r in range(self.width))


def tile_of(width: int, checked: bool, win, v: int) -> Tile:
    stride_w, dil_w, k_w = win.strides[2], win.dilations[2], win.kernel[2]
    return Tile(width, checked, (width - 1) * stride_w + (k_w - 1) * dil_w + 1, v)


def blocks(channels: int, v: int) -> int:
    return -(-channels // v)


def blocked_shape(shape: tuple[int, ...], v: int) -> tuple[int, ...]:
    """The blocked tensor's shape [N, C / V, H, W, V] for an NCHW `shape`."""
    batch, channels, *spatial = shape
    return (batch, blocks(channels, v), *spatial, v)


def segments(win, register_width: int) -> tuple[Segment, ...]:
    """How each output row is cut into tiles: unchecked tiles of `register_width` columns (and one
    remainder) over the interior, checked tiles over the borders; a row with no interior, or less
    interior than a tile, is checked tiles throughout."""
    out_w = win.out_shape[2]
    lo, hi, _ = interior_columns(win)
    if hi - lo < min(register_width, out_w):
        count = -(-out_w // register_width)
        width = -(-out_w // count)
        full = out_w // width * width
        parts = [Segment(0, full, width, True)]
        if full < out_w:
            parts.append(Segment(full, out_w, out_w - full, True))
        return tuple(parts)
    parts = [Segment(0, lo, lo, True)] if lo else []
    full = lo + (hi - lo) // register_width * register_width
    parts.append(Segment(lo, full, register_width, False))
    if full < hi:
        parts.append(Segment(full, hi, hi - full, False))
    if hi < out_w:
        parts.append(Segment(hi, out_w, out_w - hi, True))
    return tuple(parts)


def register_tile(out_blocks: int, out_w: int, v: int, block_weight_bytes: int) -> tuple[int, int]:
    """(output-channel blocks, columns) of a register tile: two blocks where they pair up (each
    broadcast input feeds two FMAs), four where a row is too short to give two blocks enough
    independent accumulators; as many columns as the registers left allow."""
    registers = REGISTERS.get(v, 16)
    ocr = 2 if out_blocks % 2 == 0 else 1
    short = 2 * min(out_w, (registers - 3) // 2) < 2 * MIN_ACCUMULATORS
    if out_blocks % 4 == 0 and short and 4 * block_weight_bytes <= WEIGHTS_IN_L2:
        ocr = 4
    return ocr, max(1, (registers - ocr - 1) // ocr)


def lower(op: OpInstance, v: int) -> Kernel:
    """The blocked Conv of `op` (its tensors NCHW[v]c, its weights and bias packed by `pack_weights`
    and `pack_bias`): refused unless 2-D, ungrouped, float32."""
    require_float32(op)
    x_type, w_type, y_type = op.input_types[0], op.input_types[1], op.output_types[0]
    if x_type.rank != 4:
        raise Unsupported(f"blocked Conv on a rank-{x_type.rank} input; accepted: rank 4 (2-D)")
    geometry = conv_geometry(op, x_type, w_type, y_type)
    if geometry.groups != 1:
        raise Unsupported(f"blocked Conv with group={geometry.groups}; accepted: 1")
    win = geometry.window
    in_blocks, out_blocks = blocks(geometry.channels, v), blocks(geometry.out_channels, v)
    weight_block_floats = in_blocks * win.kernel_size * v * v
    ocr, width = register_tile(out_blocks, win.out_shape[2], v, 4 * weight_block_floats)
    cut = segments(win, width)
    tiles = tuple(dict.fromkeys(tile_of(s.width, s.checked, win, v) for s in cut if s.stop > s.start))
    residual = op.has_input(3)
    rows = geometry.batch * (out_blocks // ocr) * win.out_shape[1]
    macs = geometry.batch * geometry.out_channels * win.out_size * geometry.channels * win.kernel_size
    tasks = task_count(rows, macs // TASK_MACS)
    params = {
        **win.view(),
        "V": v,
        "batch": geometry.batch,
        "in_channels": geometry.channels,
        "out_channels": geometry.out_channels,
        "in_blocks": in_blocks,
        "out_blocks": out_blocks,
        "weight_block_floats": weight_block_floats,
        "ocr": ocr,
        "tiles": tiles,
        # every offset and size the tiles and the row loop print, in floats (bytes: vector_bytes)
        "x_offsets": tuple(r * win.strides[2] * v for r in range(max(t.width for t in tiles))) if tiles else (),
        "bias_offsets": tuple(o * v for o in range(ocr)),
        "weight_offsets": tuple(o * weight_block_floats for o in range(ocr)),
        "out_offsets": tuple(o * win.out_shape[1] * win.out_shape[2] * v for o in range(ocr)),
        "dil_h_less_1": win.dilations[1] - 1,
        "in_plane_floats": win.in_shape[1] * win.in_shape[2] * v,
        "in_row_floats": win.in_shape[2] * v,
        "in_image_floats": in_blocks * win.in_shape[1] * win.in_shape[2] * v,
        "w_block_floats": win.kernel[1] * win.kernel[2] * v * v,
        "vector_bytes": 4 * v,
        "dil_w_floats": win.dilations[2] * v,
        "vv": v * v,
        "block_groups": out_blocks // ocr,
        "rows_per_image": win.out_shape[1] * (out_blocks // ocr),
        "out_plane_floats": win.out_shape[1] * win.out_shape[2] * v,
        "segments": tuple(s for s in cut if s.stop > s.start),
        "has_bias": op.has_input(2),
        "residual": residual,
        "out_index": 4 if residual else (3 if op.has_input(2) else 2),
        "epilogue": op.epilogue,
        "rows": rows,
        "tasks": tasks,
    }
    return Kernel(
        template="kernels/conv_nchwc.c.j2",
        params=params,
        flops=2 * macs,
        bytes_accessed=total_bytes(*(t for t in op.input_types if t is not None), y_type),
        helpers=(POOL_HELPER,) if tasks > 1 else (),
        parallel=_parallel.tasks_of(tasks),
    )


def task_count(units: int, wanted: int) -> int:
    """How many tasks the worker pool gets for `units` independent pieces of work: `wanted` (the
    work over a task's worth), at least 1, at most MAX_TASKS and never more than the pieces."""
    return max(1, min(units, wanted, MAX_TASKS))


def pack_weights(w: np.ndarray, v: int) -> np.ndarray:
    """OIHW weights as [O / v][I / v][kh][kw][i][o], zero past the model's channels."""
    out_channels, in_channels, k_h, k_w = w.shape
    ob, ib = blocks(out_channels, v), blocks(in_channels, v)
    padded = np.zeros((ob * v, ib * v, k_h, k_w), np.float32)
    padded[:out_channels, :in_channels] = w
    return np.ascontiguousarray(padded.reshape(ob, v, ib, v, k_h, k_w).transpose(0, 2, 4, 5, 3, 1)).reshape(-1)


def pack_bias(b: np.ndarray, v: int) -> np.ndarray:
    padded = np.zeros(blocks(b.shape[0], v) * v, np.float32)
    padded[: b.shape[0]] = b
    return padded


def reorder(shape: tuple[int, ...], v: int, to_blocked: bool) -> Kernel:
    """The kernel that reorders an NCHW float32 tensor of `shape` to NCHW[v]c (or back)."""
    batch, channels, *spatial = shape
    size = int(np.prod(spatial, dtype=np.int64))
    nbytes = 4 * batch * (channels + blocks(channels, v) * v) * size
    units, wanted = batch * blocks(channels, v), nbytes // REORDER_TASK_BYTES
    parts = max(1, min(size, -(-wanted // units)))
    tasks = task_count(units * parts, wanted)
    params = {
        "V": v,
        "to_blocked": to_blocked,
        "batch": batch,
        "channels": channels,
        "blocks": blocks(channels, v),
        "size": size,
        "block_floats": size * v,  # one channel block of one image
        "zero_channels": blocks(channels, v) * v - channels,  # the last block's padding
    }
    return Kernel(
        template="kernels/nchwc_reorder.c.j2",
        params={**params, "parts": parts, "pieces": units * parts, "tasks": tasks},
        bytes_accessed=nbytes,
        helpers=(POOL_HELPER,) if tasks > 1 else (),
        parallel=_parallel.tasks_of(tasks),
    )
