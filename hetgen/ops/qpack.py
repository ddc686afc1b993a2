"""The packed int8 convolution: weights in the micro-kernel's layout, made at generate time.

QLinearConv with constant int8 weights whose zero point is 0 (what onnxruntime's quantize_static
writes, per tensor or per channel) offers its weights as panels of PANEL_ROWS output channels by
groups of 4 consecutive reduction indices, `[groups][panels][ceil(K/4)][PANEL_ROWS][4]`, zero padded,
followed by each output channel's int32 weight sum (4 little-endian bytes). The kernel
(templates/kernels/qconv_packed.c.j2, micro-kernels in templates/runtime/hg_qgemm.h) packs the
input per call as `[pixel blocks][ceil(K/4)][BLOCK_PIXELS][4]` bytes (im2col through a tap table; a zero-point-padded
copy of the input where the convolution pads) and runs one block of PANEL_ROWS channels x
BLOCK_PIXELS output pixels at a time: vpdpbusd on AVX-512 VNNI / AVX-VNNI, exact int16 products on
AVX2, sdot by lane on aarch64 with the dot-product extension, widening NEON otherwise, plain C
elsewhere; the same C for all, the compiler's feature macros choose. The weights' sums fold the
input zero point (and the shift that makes activations of the path's signedness) and the bias into
one int32 constant per channel, and the requantisation is fused into the block's store.
"""

from __future__ import annotations

import math

import numpy as np

PANEL_ROWS = 8  # HG_QG_MR
BLOCK_PIXELS = 32  # HG_QG_NB
# bytes of packed activations per chunk of output rows: kept in L2
COL_CHUNK_BYTES = 256 * 1024
# rows of A a QLinearMatMul block holds (hg_qg_gemm_rows), where A has that many
GEMM_ROWS = 4
# bytes hg_qg_gemv may read past a row's last group of 4 (HG_QG_GEMV_SLACK)
GEMV_SLACK = 32
# the largest reduction an int32 sum of u8 x s8 products holds exactly (255 * 128 * K < 2^31)
MAX_K = (2**31 - 1) // (255 * 128)


def kgroups(k_dim: int) -> int:
    return -(-k_dim // 4)


def panels(cout_group: int) -> int:
    return -(-cout_group // PANEL_ROWS)


def packed_bytes(groups: int, cout_group: int, k_dim: int) -> int:
    return groups * panels(cout_group) * kgroups(k_dim) * PANEL_ROWS * 4 + 4 * groups * cout_group


def pack_weights(w: np.ndarray, groups: int, channel_quads: bool = False) -> np.ndarray:
    """int8 weights [M, C/groups, *kernel] -> the panels, then the channels' int32 sums as bytes.
    channel_quads: the reduction ordered as the gathered kernel reads it (plan_gather), groups of 4
    consecutive input channels at one tap, (channel quad, tap, channel % 4), channels zero padded."""
    w = np.asarray(w)
    out_channels = w.shape[0]
    if out_channels == 0:
        return np.zeros(0, np.int8)
    per_group = w.reshape(groups, out_channels // groups, -1).astype(np.int8)
    if channel_quads:
        cin_group = w.shape[1]
        quads = kgroups(cin_group)
        taps = per_group.reshape(groups, out_channels // groups, cin_group, -1)
        padded_c = np.zeros((*taps.shape[:2], quads * 4, taps.shape[3]), np.int8)
        padded_c[:, :, :cin_group] = taps
        # [g][m][quad][4][tap] -> [g][m][quad][tap][4]
        quad_major = padded_c.reshape(*taps.shape[:2], quads, 4, taps.shape[3]).transpose(0, 1, 2, 4, 3)
        per_group = quad_major.reshape(groups, out_channels // groups, -1)
    cout_group, k_dim = per_group.shape[1], per_group.shape[2]
    rows, depth = panels(cout_group) * PANEL_ROWS, kgroups(k_dim) * 4
    padded = np.zeros((groups, rows, depth), np.int8)
    padded[:, :cout_group, :k_dim] = per_group
    # [g][panel][row][kg][4] -> [g][panel][kg][row][4]
    blocks = padded.reshape(groups, rows // PANEL_ROWS, PANEL_ROWS, depth // 4, 4).transpose(0, 1, 3, 2, 4)
    sums = w.reshape(out_channels, -1).astype(np.int64).sum(axis=1).astype("<i4")
    return np.concatenate([blocks.reshape(-1), sums.view(np.int8)])


def tap_offsets(cin_group: int, kernel, dilations, plane) -> list[int]:
    """Per reduction index k = (c, kd, kh, kw), padded to a multiple of 4 by repeating the last (its
    weights are 0), the byte offset of its tap in the (padded) input planes from an output pixel's origin."""
    plane_d, plane_h, plane_w = plane
    offsets = [
        ((c * plane_d + kd * dilations[0]) * plane_h + kh * dilations[1]) * plane_w + kw * dilations[2]
        for c in range(cin_group)
        for kd in range(kernel[0])
        for kh in range(kernel[1])
        for kw in range(kernel[2])
    ]
    return offsets + offsets[-1:] * (kgroups(len(offsets)) * 4 - len(offsets))


def plan(cin_group: int, cout_group: int, groups: int, channels: int, win, padded, chunk_budget: int = COL_CHUNK_BYTES):
    """The packed kernel's parameters and workspace: (params, scratch bytes)."""
    k_dim = cin_group * win.kernel_size
    out_rows = win.out_shape[0] * win.out_shape[1]
    out_w = win.out_shape[2]
    row_bytes = kgroups(k_dim) * 4 * out_w
    chunk_rows = max(1, min(out_rows, chunk_budget // max(1, row_bytes)))
    chunk_px = chunk_rows * out_w
    chunk_px_pad = -(-chunk_px // BLOCK_PIXELS) * BLOCK_PIXELS
    needs_plane = tuple(padded) != tuple(win.in_shape)
    plane_size = math.prod(padded)
    plane_bytes = _align(channels * plane_size) if needs_plane else 0
    col_bytes = _align(kgroups(k_dim) * 4 * chunk_px_pad)
    out_channels = groups * cout_group
    # consecutive output pixels at consecutive input bytes, across rows (and depths) too: a 1x1
    # window of stride 1 on an unpadded plane, whose chunks pack as one run
    out_d, out_h = win.out_shape[0], win.out_shape[1]
    flat_rows = (
        win.kernel[2] == 1
        and win.strides[2] == 1
        and padded[2] == out_w
        and (out_h == 1 or win.strides[1] * padded[2] == out_w)
        and (out_d == 1 or win.strides[0] * padded[1] * padded[2] == out_h * out_w)
    )
    params = {
        "variant": "packed",
        "flat_rows": flat_rows,
        "out_rows": out_rows,
        "pad_plane_d": padded[0],
        "pad_plane_h": padded[1],
        "pad_plane_w": padded[2],
        "pad_plane_size": plane_size,
        "kgroups": kgroups(k_dim),
        "panels": panels(cout_group),
        "panel_bytes": kgroups(k_dim) * 4 * PANEL_ROWS,
        "group_w_bytes": panels(cout_group) * kgroups(k_dim) * 4 * PANEL_ROWS,
        "sums_offset": groups * panels(cout_group) * kgroups(k_dim) * 4 * PANEL_ROWS,
        "chunk_rows": chunk_rows,
        "block_bytes": kgroups(k_dim) * 4 * BLOCK_PIXELS,
        "needs_plane": needs_plane,
        "plane_stride_h": padded[2],
        "plane_stride_d": padded[1] * padded[2],
        "taps": tap_offsets(cin_group, win.kernel, win.dilations, padded),
        "plane_offset": 0,
        "col_offset": plane_bytes,
        "const_offset": plane_bytes + col_bytes,
        "scale_offset": plane_bytes + col_bytes + _align(4 * out_channels),
    }
    return params, plane_bytes + col_bytes + 2 * _align(4 * out_channels)


# the fewest input channels per group the gathered kernel takes (its padding to quads is <= 3/16 of the work)
GATHER_MIN_CHANNELS = 16


def plan_gather(cin_group: int, cout_group: int, groups: int, win, padded):
    """The gathered form of the packed kernel, for a 2-D convolution of at least GATHER_MIN_CHANNELS
    input channels per group and more than one tap (a 1x1's im2col is already one interleave), or None. Its input is interleaved once per call into quads of 4
    channels, [quads][padded rows][phases][phase width][4] bytes (stride s along the rows: s phases,
    the columns of one remainder mod s, so an output row's pixels read consecutive dwords at every
    tap), and a block of HG_QG_NB output pixels' activations are kgroups runs of dwords copied from
    it (one per output row the block holds), the reduction ordered (quad, kh, kw, channel % 4)
    (pack_weights(channel_quads=True)): no im2col. (params, scratch bytes)."""
    if cin_group < GATHER_MIN_CHANNELS or win.kernel_size == 1 or win.kernel[0] != 1 or padded[0] != 1:
        return None
    quads = kgroups(cin_group)
    _, kh_n, kw_n = win.kernel
    _, sh, sw = win.strides
    _, dh, dw = win.dilations
    _, out_h, out_w = win.out_shape
    _, in_h, in_w = win.in_shape
    _, pad_h, pad_w = win.pads_begin
    _, plane_h, plane_w = padded
    phase_w = -(-plane_w // sw)
    row_dw = sw * phase_w
    plane_dw = plane_h * row_dw
    taps = [
        4 * (q * plane_dw + kh * dh * row_dw + (kw * dw) % sw * phase_w + kw * dw // sw)
        for q in range(quads)
        for kh in range(kh_n)
        for kw in range(kw_n)
    ]
    k_dim = len(taps) * 4
    # per phase: the first packed column holding an input column, that input column, and how many
    phases = []
    for ph in range(sw):
        first = max(0, -(-(pad_w - ph) // sw))
        last = (pad_w + in_w - 1 - ph) // sw  # the last packed column whose input column is inside
        phases.append((first, first * sw + ph - pad_w, max(0, last - first + 1)))
    plane_bytes = _align(4 * quads * plane_dw)
    block_bytes = _align(k_dim * BLOCK_PIXELS)
    out_channels = groups * cout_group
    params = {
        "quads": quads,
        "k_dim": k_dim,
        "kgroups": len(taps),
        "taps": taps,
        "in_h": in_h,
        "in_w": in_w,
        "pad_h": pad_h,
        "plane_h": plane_h,
        "row_bytes": 4 * row_dw,
        "quad_bytes": 4 * plane_dw,
        "phases": [value for phase in phases for value in phase],
        "phase_count": sw,
        "phase_w": phase_w,
        "stride_w": sw,
        "out_row_bytes": 4 * sh * row_dw,
        # each half of a block of output pixels inside one output row: where the path has
        # hg_qg_block_taps, a whole block reads the plane in place instead of its copy
        "halves_in_rows": out_w % (BLOCK_PIXELS // 2) == 0,
        "panels": panels(cout_group),
        "panel_bytes": len(taps) * 4 * PANEL_ROWS,
        "group_w_bytes": panels(cout_group) * len(taps) * 4 * PANEL_ROWS,
        "sums_offset": groups * panels(cout_group) * len(taps) * 4 * PANEL_ROWS,
        "plane_bytes": plane_bytes,
        "plane_offset": 0,
        "block_offset": plane_bytes,
        "const_offset": plane_bytes + block_bytes,
        "scale_offset": plane_bytes + block_bytes + _align(4 * out_channels),
    }
    return params, plane_bytes + block_bytes + 2 * _align(4 * out_channels)


def _align(size: int, to: int = 64) -> int:
    return (size + to - 1) // to * to
