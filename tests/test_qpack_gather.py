"""The gathered packed convolution's plan (hetgen/ops/qpack.py plan_gather) and its weight order
(pack_weights(channel_quads=True)), without a compiler: numpy does what qconv_gather.c.j2 does (the
input interleaved by quads of channels into phases of padded rows, each block's groups of 4 k read at
origin + taps[g], dotted with the packed panels) and must give the integer convolution's sums, for
strides, dilations, asymmetric padding, groups and channel counts short of a quad."""

from __future__ import annotations

import numpy as np
import pytest

from hetgen.ops import qpack
from hetgen.ops._spatial import Window
from hetgen.ops.qlinear import padded_plane

RNG = np.random.default_rng(7)


def window(in_hw, kernel, strides, dilations, pads_begin, pads_end) -> Window:
    out = tuple(
        (size + b + e - (k - 1) * d - 1) // s + 1
        for size, k, s, d, b, e in zip(in_hw, kernel, strides, dilations, pads_begin, pads_end)
    )
    return Window(
        (1, *in_hw), (1, *out), (1, *kernel), (1, *strides), (1, *dilations), (0, *pads_begin), (0, *pads_end)
    )


def reference(x, w, win: Window, groups: int) -> np.ndarray:
    """The convolution's int64 sums, [M, out_h, out_w], of x [C, H, W] (zero padded) and w [M, C/g, kh, kw]."""
    (_, pb_h, pb_w), (_, pe_h, pe_w) = win.pads_begin, win.pads_end
    padded = np.pad(x.astype(np.int64), ((0, 0), (pb_h, pe_h), (pb_w, pe_w)))
    (_, out_h, out_w), (_, sh, sw), (_, dh, dw) = win.out_shape, win.strides, win.dilations
    out_channels, cin_group, kh_n, kw_n = w.shape
    cout_group = out_channels // groups
    y = np.zeros((out_channels, out_h, out_w), np.int64)
    for m in range(out_channels):
        g = m // cout_group
        for kh in range(kh_n):
            for kw in range(kw_n):
                rows = padded[g * cin_group : (g + 1) * cin_group, kh * dh :: sh, kw * dw :: sw][:, :out_h, :out_w]
                y[m] += np.tensordot(w[m, :, kh, kw].astype(np.int64), rows, axes=1)
    return y


def gathered(x, w, win: Window, groups: int) -> np.ndarray:
    """qconv_gather.c.j2 in numpy, for a zero point of 0 (the padding then adds nothing)."""
    out_channels, cin_group = w.shape[:2]
    cout_group = out_channels // groups
    params, scratch = qpack.plan_gather(cin_group, cout_group, groups, win, padded_plane(win))
    assert scratch >= params["scale_offset"] + 4 * out_channels
    packed = qpack.pack_weights(w, groups, channel_quads=True)
    kg, quads, phase_w = params["kgroups"], params["quads"], params["phase_w"]
    assert len(params["taps"]) == kg and params["k_dim"] == 4 * kg
    _, out_h, out_w = win.out_shape
    in_h = params["in_h"]
    y = np.zeros((out_channels, out_h, out_w), np.int64)
    for g in range(groups):
        plane = np.zeros(params["plane_bytes"], np.uint8)
        xg = x[g * cin_group : (g + 1) * cin_group].astype(np.uint8)
        for q in range(quads):
            # a quad's channels past the group's repeat its last
            channels = [min(4 * q + j, cin_group - 1) for j in range(4)]
            for ih in range(in_h):
                row = q * params["quad_bytes"] + (ih + params["pad_h"]) * params["row_bytes"]
                for ph in range(params["phase_count"]):
                    first, column, count = params["phases"][3 * ph : 3 * ph + 3]
                    for i in range(count):
                        at = row + 4 * (ph * phase_w + first + i)
                        plane[at : at + 4] = xg[channels, ih, column + i * params["stride_w"]]
        panels = packed[: params["sums_offset"]].reshape(groups, params["panels"], kg, qpack.PANEL_ROWS, 4)[g]
        for oh in range(out_h):
            for ow in range(out_w):
                origin = oh * params["out_row_bytes"] + 4 * ow
                acts = np.stack([plane[origin + t : origin + t + 4] for t in params["taps"]]).view(np.int8)
                sums = np.einsum("pgrk,gk->pr", panels.astype(np.int64), acts.astype(np.int64)).reshape(-1)
                y[g * cout_group : (g + 1) * cout_group, oh, ow] = sums[:cout_group]
    return y


CASES = {
    # name: (channels, in (h, w), out channels, kernel, strides, dilations, pads begin, pads end, groups)
    "3x3_pad": (16, (6, 9), 11, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    "short_quad_strided_dilated": (19, (13, 15), 9, (3, 3), (2, 2), (2, 1), (2, 1), (1, 2), 1),
    "grouped_stride3": (34, (9, 11), 10, (3, 5), (1, 3), (1, 1), (0, 2), (1, 0), 2),
    "row_only": (17, (1, 20), 5, (1, 3), (1, 2), (1, 1), (0, 1), (0, 0), 1),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_gathered_plan_computes_the_convolution(case):
    channels, in_hw, out_channels, kernel, strides, dilations, pb, pe, groups = CASES[case]
    win = window(in_hw, kernel, strides, dilations, pb, pe)
    # activations below 128 and weights of either sign: the int8 view above reads them as they are
    x = RNG.integers(0, 128, (channels, *in_hw))
    w = RNG.integers(-128, 128, (out_channels, channels // groups, *kernel)).astype(np.int8)
    want = reference(x, w, win, groups)
    assert np.abs(want).max() > 1000  # the comparison means something
    np.testing.assert_array_equal(gathered(x, w, win, groups), want)


def test_channel_quads_keep_the_sums_and_order_the_reduction():
    w = RNG.integers(-128, 128, (10, 9, 3, 3)).astype(np.int8)
    plain, quads = qpack.pack_weights(w, 2), qpack.pack_weights(w, 2, channel_quads=True)
    # 9 channels a group: 3 quads (the last zero padded) x 9 taps = 27 groups of 4 (against 21)
    assert quads.size == qpack.packed_bytes(2, 5, 3 * 9 * 4)
    assert (quads[-40:] == plain[-40:]).all()  # the channels' int32 sums
    # group 0, panel 0, k group (quad 1, tap 4), channel row 2: channels 4-7 of output channel 2 at tap (1, 1)
    panel = quads[: 2 * 27 * 32].reshape(2, 1, 27, 8, 4)
    np.testing.assert_array_equal(panel[0, 0, 9 + 4, 2], w[2, 4:8, 1, 1])
    np.testing.assert_array_equal(panel[1, 0, 18 + 4, 2], [w[7, 8, 1, 1], 0, 0, 0])


def test_gathered_only_where_it_pays():
    win = window((8, 8), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0))
    assert qpack.plan_gather(64, 64, 1, win, padded_plane(win)) is None  # a 1x1: its im2col is one interleave
    win = window((8, 8), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    assert qpack.plan_gather(qpack.GATHER_MIN_CHANNELS - 1, 8, 1, win, padded_plane(win)) is None
    assert qpack.plan_gather(qpack.GATHER_MIN_CHANNELS, 8, 1, win, padded_plane(win)) is not None


@pytest.mark.parametrize(
    "in_hw, strides, in_place",
    [((6, 32), (1, 1), True), ((5, 32), (1, 2), True), ((4, 64), (2, 1), True), ((6, 24), (1, 1), False)],
)
def test_whole_blocks_read_the_plane_in_place_where_each_half_lies_in_one_row(in_hw, strides, in_place):
    """hg_qg_block_taps (AVX-512 VNNI) reads a whole block's 16-pixel halves at half origin + taps[g]:
    where the plan allows it, those 64 bytes are the 16 pixels' dwords the copy would take, inside the plane."""
    win = window(in_hw, (3, 3), strides, (1, 1), (1, 1), (1, 1))
    params, _ = qpack.plan_gather(16, 8, 1, win, padded_plane(win))
    _, out_h, out_w = win.out_shape
    assert params["halves_in_rows"] is in_place
    if not in_place:
        return
    half = qpack.BLOCK_PIXELS // 2

    def origin(p):  # where the copy reads output pixel p's dword at tap 0 (qconv_gather.c.j2)
        return p // out_w * params["out_row_bytes"] + 4 * (p % out_w)

    for p0 in range(0, out_h * out_w - qpack.BLOCK_PIXELS + 1, qpack.BLOCK_PIXELS):
        for at in (p0, p0 + half):
            assert [origin(at + i) for i in range(half)] == [origin(at) + 4 * i for i in range(half)]
            assert origin(at) + max(params["taps"]) + 4 * half <= params["plane_bytes"]
