"""The implicit-GEMM convolution's input as zero-padded phase planes (`conv_implicit_planes.c.j2`).

The implicit GEMM (hetgen/ops/conv.py) gathers each block of B, input tap p under output pixel j,
straight into the micro-kernel's panels. Read from the input as the model lays it out, every tap
row of every panel clips at the padding, and on 10 x 10 to 55 x 55 layers that clipping and its
index arithmetic made the packing about a third of the GEMM's time (DenseNet-121's 3x3 layers,
SqueezeNet's expand layers). Here the kernel first copies the group's input channels, once per
call, into `s_h x s_w` phase planes of the zero-padded input, as the depthwise plane kernel does:
phase (a, b) holds the padded rows a, a + s_h, ... and columns b, b + s_w, ..., each `wq` columns
wide. Tap (kh, kw) under output pixel (oh, ow) is then element (oh + d_h kh // s_h, ow + d_w kw // s_w)
of phase (d_h kh % s_h, d_w kw % s_w), for every stride and dilation, so a panel's pixels in one
output row are one contiguous run of one plane row: the packing copies runs, with no clipping and
no division per tap (measured on Zen 4, 128 channels: 10 x 10 from ~1.1 to ~0.33 ns a packed
float, 20 x 20 ~0.6 to ~0.19, 55 x 55 with 16 channels ~0.35 to ~0.17).

The planes cost a copy of the input (padded) in the workspace, so they hold one band of output
rows at a time, as many as one GEMM block of columns (`nc`) holds, each band a GEMM of its own:
a stem at 224 x 224 copies a few rows' worth, and a layer that `options.memory: lean` gives a
smaller `nc` (hetgen/partition/prepack.py: where its workspace would lift the activation peak)
gets smaller bands with it. The bands, of equal rows, are the worker pool's tasks
(conv.band_tasks): each builds its own planes in its thread's scratch and runs its GEMM there, so
no thread builds planes while the other waits, and a band's output stays with the core that wrote
it (SqueezeNet@224's stem, 13 bands: the caller's planes were 197 of its 579 us at two threads,
docs/kernels.md). A fused residual is read by the whole image's columns, so a Conv with one takes
planes of the whole image, and only where they take at most PLANES_PER_B_BUFFER times
the GEMM's own B buffer.
"""

from __future__ import annotations

from hetgen.ops._gemm_plan import PANEL_N, GemmBlocks, align
from hetgen.ops._spatial import Window

PLANES_PER_B_BUFFER = 8


def tap_offsets(win: Window, base: dict[tuple[int, int], int], wq: int) -> list[int]:
    """Each kernel tap's offset in one channel's phase planes, taps in order (kh, then kw): the tap
    reads phase plane (d_h kh mod s_h, d_w kw mod s_w), whose first float is at `base` of that
    phase, shifted by d_h kh div s_h rows of `wq` floats and d_w kw div s_w columns. The planes of
    the implicit GEMM (`planes`) and of the depthwise kernel (conv.depthwise_plane) both."""
    (kh_n, kw_n), (s_h, s_w), (d_h, d_w) = win.kernel[1:], win.strides[1:], win.dilations[1:]
    return [
        base[(d_h * kh % s_h, d_w * kw % s_w)] + (d_h * kh // s_h) * wq + d_w * kw // s_w
        for kh in range(kh_n)
        for kw in range(kw_n)
    ]


def planes(win: Window, cin_group: int, blocks: GemmBlocks, banded: bool = True) -> dict | None:
    """The phase planes' template variables, or None where the kernel packs from the input: a 3-D
    window, or planes past PLANES_PER_B_BUFFER times the GEMM's B packing buffer. `banded`: the
    planes of one band of output rows at a time, as many as one GEMM block of columns holds (each
    band is a GEMM of its own); else of the whole image (a fused residual is read by column)."""
    if win.kernel[0] != 1 or win.in_shape[0] != 1 or win.out_shape[0] != 1:
        return None
    (kh_n, kw_n), (s_h, s_w), (d_h, d_w) = win.kernel[1:], win.strides[1:], win.dilations[1:]
    in_w, (out_h, out_w), (pad_h, pad_w) = win.in_shape[2], win.out_shape[1:], win.pads_begin[1:]
    band_rows = max(1, min(out_h, blocks.nc // max(out_w, 1))) if banded else out_h
    bands = -(-out_h // band_rows)
    band_rows = -(-out_h // bands)  # bands of equal rows (the last one at most one short): the pool's tasks
    hq = band_rows + d_h * (kh_n - 1) // s_h
    wq = out_w + d_w * (kw_n - 1) // s_w
    used = sorted({(d_h * kh % s_h, d_w * kw % s_w) for kh in range(kh_n) for kw in range(kw_n)})
    plane_floats = hq * wq
    channel_floats = len(used) * plane_floats
    nbytes = align(4 * cin_group * channel_floats)
    k_dim = cin_group * kh_n * kw_n
    b_buffer = 4 * (min(win.out_size, blocks.nc) + PANEL_N) * min(k_dim, blocks.kc)
    if nbytes > PLANES_PER_B_BUFFER * b_buffer:
        return None
    phases = []
    for index, (a, b) in enumerate(used):
        # plane row i is input row s_h * i + a - pad_h, plane column j input column s_w * j + b - pad_w
        lo = min(wq, max(0, -(-(pad_w - b) // s_w)))
        hi = min(wq, max(lo, -(-(in_w + pad_w - b) // s_w)))
        phases.append(
            {
                "base": index * plane_floats,
                "row_off": a - pad_h,
                "src_off": b - pad_w,
                "col_lo": lo,
                "col_hi": hi,
                "zero_right": hi < wq,
            }
        )
    # stride 2 across: the input rows each phase row `a` reads, split in one pass into their even
    # and odd columns (the one or two column phases that read them), not once per phase
    splits = column_splits(used, phases) if s_w == 2 else None
    # each tap's offset in a channel's planes, in the order of the GEMM's k (kh, then kw)
    taps = tap_offsets(win, {ab: phase["base"] for ab, phase in zip(used, phases)}, wq)
    # every row of B, k after k, where whole panels can lie in one output row: the GEMM then reads
    # them in place where it would not repay packing (hg_kernels.h's b_rows)
    rows = [c * channel_floats + t for c in range(cin_group) for t in taps] if out_w >= PANEL_N else None
    return {
        "rows": rows,
        "band_rows": band_rows,
        "bands": bands,
        "hq": hq,
        "wq": wq,
        "plane_floats": plane_floats,
        "phases": phases,
        "splits": splits,
        "taps": taps,
        "channel_floats": channel_floats,
        "bytes": nbytes,
    }


def column_splits(used: list[tuple[int, int]], phases: list[dict]) -> list[dict]:
    """For a stride of 2 across: per row phase `a`, the column phases that read its input rows, as
    the phase of the row's even columns (input column 0 on) and of its odd ones (column 1 on), each
    with the offset of its first column from the input and their number (None: no phase takes
    them). A phase's first column from the input is input column 0 or 1 (col_lo is the first plane
    column inside the input), so each input row is one de-interleave into at most two plane rows."""
    splits: dict[int, dict] = {}
    for (a, _), phase in zip(used, phases):
        split = splits.setdefault(a, {"row_off": phase["row_off"], "phases": [], "even": None, "odd": None})
        split["phases"].append(phase)
        count = phase["col_hi"] - phase["col_lo"]
        if count:
            first = 2 * phase["col_lo"] + phase["src_off"]
            assert first in (0, 1), (first, phase)
            # `at`: the plane row's first column from the input, past the row phase's row start
            split["even" if first == 0 else "odd"] = {"at": phase["base"] + phase["col_lo"], "count": count}
    return list(splits.values())
