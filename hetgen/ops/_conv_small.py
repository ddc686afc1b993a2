"""The direct convolution of small planes (`templates/kernels/conv_small.c.j2`): LeNet's and the
keyword spotters' first convolutions, whose whole layer is a few hundred thousand multiply-adds.

There the implicit GEMM spends more time packing than multiplying: its B panels (every tap under
every output pixel) are as large as the arithmetic, and its 8-row micro-kernel runs six or sixteen
output channels. This kernel copies each input channel once, zero-padded, into `stride_h x
stride_w` phase planes `wq` columns wide (as the depthwise plane kernel does, hetgen/ops/conv.py
`depthwise_plane`), so that tap (c, kh, kw) of output (oh, ow) lies at a fixed offset from the flat
index oh * wq + ow. Then `rows` output channels at a time, `blocks` vector registers of flat indices
at a time, it sums every tap into rows x blocks registers of accumulators: each vector of inputs is
loaded once for `rows` multiply-adds with a broadcast weight read from the model's own layout (no
packing, at run time or at generate time). The wq - out_w columns of each row past the output are
computed and dropped; `MIN_LANE_USE` keeps that waste small.

Where the layer is large enough to share (`sp_split`), the blocks of `rows` output channels are
the worker pool's tasks, all reading the phase planes the caller built; each block is computed by
the same code whichever thread holds it, so any thread count gives the same bits.

Taken on application cores (hetgen/ops/conv.py offers the weights as they are, `hosted_only`), for an
ungrouped 2-D convolution that is not pointwise, within `MAX_WORK` multiply-adds and
`MAX_BUFFER_FLOATS` of phase planes: beyond those the GEMM's packing pays for itself.

The blocking is sized for the register file of the CPU that runs it (hetgen/ops/registers.py):
rows x blocks accumulators take `ACCUMULATOR_SHARE` of the registers, the rest hold a block's inputs
and the broadcast weight. Sized for AVX-512 on NEON, the same loops kept 96 q registers of
accumulators: GCC spilled them, and ds_cnn's first convolution ran 1.45 instructions per
multiply-add under qemu-aarch64.
"""

from __future__ import annotations

from hetgen.ops import _parallel
from hetgen.ops.registers import VectorRegisters

# The share of the register file a block's accumulators (rows x blocks registers) take at most: 24 of
# 32, leaving the rest for the block's loaded inputs (at most 4 registers) and the weights
# (`registers_used`).
ACCUMULATOR_SHARE = 3 / 4
# The largest layer (multiply-adds) and phase planes (floats, within L1 and L2) it takes.
MAX_WORK = 1 << 20
MAX_BUFFER_FLOATS = 16384
# The least share of computed lanes that are outputs (out_h * out_w of the padded flat index).
MIN_LANE_USE = 0.6


def registers_used(rows: int, blocks: int) -> int:
    """The registers a block's tap loop needs live: rows x blocks accumulators, the `blocks` inputs and
    one weight (each row's loaded just before its FMAs). Counting a register per row's weight, as
    NEON's fmla by element would hold them all, gave fewer rows and measured worse: LeNet-5's second
    convolution 202k instructions instead of 176k under qemu-aarch64."""
    return rows * blocks + blocks + 1


def blocking(vectors: int, out_channels: int, registers: VectorRegisters) -> tuple[int, int]:
    """(blocks, rows): registers of flat indices and output channels a block of accumulators spans,
    rows x blocks within `ACCUMULATOR_SHARE` and all that `registers_used` counts below the register
    count (one spare: the bias).

    Where an FMA reads its broadcast weight from memory (`broadcast_fma`), a tap costs a block its
    inputs' loads and its FMAs: the fewest lanes computed wins (of equal counts, more registers to a
    block: each tap's weight reused more), with as many rows as fit. Elsewhere each row's weight is a
    load of its own, so the blocking with the fewest estimated instructions wins: a tap's loads of
    `blocks` inputs and `rows` weights and its rows x blocks FMAs, over every block of the flat
    index and every group of rows (the last group out_channels % rows rows, which fewer rows a
    group may even out)."""
    budget = int(registers.count * ACCUMULATOR_SHARE)

    def most_rows(blocks: int) -> int:
        rows = min(out_channels, budget // blocks)
        while rows > 1 and registers_used(rows, blocks) >= registers.count:
            rows -= 1
        return rows

    if registers.broadcast_fma:
        blocks = min((4, 3, 2, 1), key=lambda b: (-(-vectors // b) * b, -b))
        return blocks, most_rows(blocks)

    def instructions(blocks: int, rows: int) -> int:
        groups = [rows] * (out_channels // rows) + ([out_channels % rows] if out_channels % rows else [])
        return -(-vectors // blocks) * sum(blocks + r + r * blocks for r in groups)

    candidates = [(b, r) for b in (4, 3, 2, 1) for r in range(most_rows(b), 0, -1)]
    return min(candidates, key=lambda br: (instructions(*br), -br[0], -br[1]))


def plan(win, channels: int, out_channels: int, groups: int, has_bias: bool, registers: VectorRegisters) -> dict | None:
    """The template's view of the kernel blocked for `registers`, or None where it does not apply (module doc)."""
    if groups != 1 or win.kernel[0] != 1 or win.in_shape[0] != 1 or win.out_shape[0] != 1:
        return None
    if not channels or not out_channels or not win.out_size:
        return None  # an empty layer: no taps or no rows to block
    if win.kernel_size == 1 and set(win.strides) == {1} and not any(win.pads_begin + win.pads_end):
        return None  # pointwise: the NCHW input already is the GEMM's B, nothing to pack
    if out_channels * win.out_size * channels * win.kernel_size > MAX_WORK:
        return None
    (kh_n, kw_n), (s_h, s_w), (d_h, d_w) = win.kernel[1:], win.strides[1:], win.dilations[1:]
    (in_h, in_w), (out_h, out_w), (pad_h, pad_w) = win.in_shape[1:], win.out_shape[1:], win.pads_begin[1:]
    wq = out_w + d_w * (kw_n - 1) // s_w
    hq = out_h + d_h * (kh_n - 1) // s_h
    count = (out_h - 1) * wq + out_w  # the flat indices that reach the last output
    lanes = registers.lanes
    vectors = -(-count // lanes)
    blocks, rows = blocking(vectors, out_channels, registers)
    computed = -(-vectors // blocks) * blocks * lanes
    if out_h * out_w < MIN_LANE_USE * computed:
        return None
    used = sorted({(d_h * kh % s_h, d_w * kw % s_w) for kh in range(kh_n) for kw in range(kw_n)})
    plane = hq * wq
    planes = channels * len(used)
    phase_index = {ab: index for index, ab in enumerate(used)}
    taps = [
        (c * len(used) + phase_index[(d_h * kh % s_h, d_w * kw % s_w)]) * plane
        + (d_h * kh // s_h) * wq
        + d_w * kw // s_w
        for c in range(channels)
        for kh in range(kh_n)
        for kw in range(kw_n)
    ]
    # the last block reads up to `computed` lanes past its tap's offset: zeros past the planes
    buffer_floats = max(planes * plane, max(taps) + computed)
    if buffer_floats > MAX_BUFFER_FLOATS:
        return None
    phases = []
    for a, b in used:
        # phase rows r and columns q whose input row r * s_h + a - pad_h (column q * s_w + b - pad_w) exist
        row_lo = min(hq, max(0, -(-(pad_h - a) // s_h)))
        row_hi = min(hq, max(row_lo, -(-(in_h + pad_h - a) // s_h)))
        col_lo = min(wq, max(0, -(-(pad_w - b) // s_w)))
        col_hi = min(wq, max(col_lo, -(-(in_w + pad_w - b) // s_w)))
        phases.append(
            {
                "row_lo": row_lo,
                "row_hi": row_hi,
                "col_lo": col_lo,
                "col_hi": col_hi,
                "zero_right": col_hi < wq,
                "zero_bottom": row_hi < hq,
                "row_off": a - pad_h,
                "src_row": (a - pad_h) * in_w,  # the input offset of phase row 0 (before the input where padded)
                "col_off": b - pad_w,
            }
        )
    staging = rows * computed
    # whole blocks of `rows` output channels are the pool's units (the tail block, when there is one,
    # runs on the caller after them), each its own staging: a worker's scratch, else the workspace's
    full_blocks = out_channels // rows
    split = _parallel.split(full_blocks, rows * computed * len(taps))  # multiply-adds, a lane each
    return {
        "sp_split": split,
        "sp_staging_bytes": 4 * staging,
        "sp_bias_value": "bias[m0 + r]" if has_bias else "0.0f",
        "sp_wq": wq,
        "sp_hq": hq,
        "sp_plane": plane,
        "sp_phases": phases,
        "sp_taps": taps,
        "sp_lanes": lanes,
        "sp_blocks": blocks,
        "sp_block_floats": blocks * lanes,
        "sp_computed": computed,
        "sp_rows": rows,
        "sp_full_rows": out_channels - out_channels % rows,
        "sp_tail_rows": out_channels % rows,
        "sp_planes_floats": planes * plane,
        "sp_buffer_floats": buffer_floats,
        "sp_tail_floats": buffer_floats - planes * plane,
        "sp_staging_floats": staging,
        "sp_workspace_bytes": 4 * (buffer_floats + staging),
    }
