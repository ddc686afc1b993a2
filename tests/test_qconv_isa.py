"""The packed int8 convolution (hetgen/ops/qpack.py, templates/runtime/hg_qgemm.h) on every x86 path
this machine can run, against onnxruntime (graph optimisations off) bit for bit: the same generated C
built natively (-march=native: AVX-512 VNNI where the CPU has it), without VNNI (-mno-avx512vnni
-mno-avxvnni: the AVX2 blocks beside AVX-512 rows), for an AVX2 machine (-march=haswell), and without -march=native (SSE2 only: the plain C path); AVX-VNNI is
built warning-free (it cannot run here without the instructions); and (external tier) built for
aarch64 boards, the cortex-a55 kind (SDOT) and the plain aarch64 kind (NEON), run under qemu-aarch64. One model holds every case, each
its own QLinearConv: odd reductions, output channels not a multiple of the panel, pixels not a
multiple of the block, strides, dilations, asymmetric padding, groups, 1-D and 3-D, 1x1 without
padding (no plane), fully connected 1x1s (the GEMV: odd groups of 4 k, channels past a chunk of 64,
groups), depthwise (the direct kernel), int8 and uint8 inputs; plain NEON's int16 pair sums at their
bound (weights of +-127, activations of -128) and weights holding -128 (the *_w128 kernels);
QLinearMatMul with a constant B (blocks of 4 rows of A, hg_qg_gemm_rows; the GEMV per row of A where
fewer: one row, batched rows); the gathered convolution (hg_qg_gather: >= 16 channels, strides,
dilation, groups, blocks across output rows);
and int8/uint8 MaxPool (hg_qg_max_row: strides 1, 2 and 3, padding, dilation).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.reference import ort_session

pytestmark = pytest.mark.cc

RNG = np.random.default_rng(20)

# name: (x dtype, x shape, w shape, attributes, per-channel weight scale, bias)
CASES = {
    "odd_k_strided": (np.int8, (1, 5, 9, 11), (13, 5, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 1]), True, True),
    "grouped_dilated": (
        np.uint8,
        (2, 8, 7, 7),
        (12, 4, 3, 3),
        dict(group=2, dilations=[2, 2], pads=[2, 1, 2, 1]),
        True,
        True,
    ),
    "pointwise": (np.int8, (1, 16, 10, 10), (20, 16, 1, 1), {}, True, False),
    # consecutive pixels at consecutive bytes across rows (and depths): chunks packed as one run
    "column_kernel": (np.int8, (1, 4, 9, 6), (7, 4, 3, 1), dict(pads=[1, 0, 1, 0]), True, True),
    "pointwise_3d": (np.uint8, (1, 5, 3, 4, 5), (6, 5, 1, 1, 1), {}, True, True),
    "asymmetric_pads": (np.uint8, (1, 3, 17, 17), (8, 3, 5, 5), dict(strides=[3, 3], pads=[2, 2, 0, 0]), False, True),
    "conv1d": (np.int8, (1, 6, 37), (9, 6, 4), dict(pads=[1, 2]), True, True),
    "conv3d": (np.uint8, (1, 3, 4, 6, 6), (5, 3, 2, 3, 3), dict(pads=[0, 1, 1, 1, 1, 0]), True, True),
    "wide": (np.int8, (1, 64, 8, 8), (70, 64, 3, 3), dict(pads=[1, 1, 1, 1]), True, True),
    # the gathered kernel (qpack.plan_gather: >= 16 channels a group, more than one tap): the input
    # interleaved by quads of channels, runs of output rows copied per block of pixels; a quad short
    # of channels (19, 17), blocks that hold several output rows (widths 7, 9, 11) and a last short
    # one, stride 2 along both axes (two phases a row), stride 3 along the rows, dilation, asymmetric
    # padding, groups, 1-D
    "gather_strided_dilated_u8": (
        np.uint8,
        (1, 19, 13, 15),
        (21, 19, 3, 3),
        dict(strides=[2, 2], dilations=[2, 1], pads=[2, 1, 1, 2]),
        True,
        True,
    ),
    "gather_grouped": (np.int8, (2, 34, 9, 11), (18, 17, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True, True),
    "gather_stride3_u8": (
        np.uint8,
        (1, 16, 10, 23),
        (9, 16, 5, 3),
        dict(strides=[1, 3], pads=[2, 0, 2, 1]),
        False,
        True,
    ),
    "gather_conv1d": (np.int8, (1, 20, 50), (12, 20, 3), dict(strides=[2], pads=[1, 0]), True, False),
    # blocks inside one output row (width 32), and a last block of 16 pixels (5 rows of 16, stride 2 along the
    # rows): on AVX-512 VNNI the whole blocks read the plane in place (hg_qg_block_taps), the last one copied
    "gather_rows_32": (np.int8, (1, 16, 6, 32), (11, 16, 3, 3), dict(pads=[1, 1, 1, 1]), True, True),
    "gather_rows_16_u8": (np.uint8, (1, 20, 5, 32), (9, 20, 3, 3), dict(strides=[1, 2], pads=[1, 1, 1, 0]), True, True),
    "fully_connected": (np.int8, (2, 40, 1, 1), (10, 40, 1, 1), {}, True, True),
    # the GEMV (hg_qg_gemv): an odd number of groups of 4 k, a second chunk of 8 panels that is short
    "fc_odd_k_wide": (np.int8, (1, 41, 1, 1), (70, 41, 1, 1), {}, False, True),
    "fc_grouped_u8": (np.uint8, (2, 26, 1, 1), (18, 13, 1, 1), dict(group=2), True, False),
    "depthwise": (np.int8, (1, 6, 10, 10), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1]), True, True),
    # whole planes at once (hg_qg_dw_plane_q): several chunks of 64 with the rows' gaps, a multiplier
    # of 2, 5 taps (a short group of 4); a 3-D one strided in depth only
    "depthwise_wide_u8": (np.uint8, (1, 3, 5, 70), (6, 1, 3, 5), dict(group=3, pads=[1, 2, 1, 2]), True, True),
    # the input read in place on AVX-512 VNNI (hg_qg_dw_masked_q): rows that straddle 64-bit mask words, dilation
    "depthwise_masked_u8": (
        np.uint8,
        (1, 4, 13, 11),
        (8, 1, 3, 3),
        dict(group=4, dilations=[2, 2], pads=[2] * 4),
        True,
        True,
    ),
    "depthwise_3d": (
        np.int8,
        (1, 2, 5, 5, 6),
        (2, 1, 2, 3, 3),
        dict(group=2, strides=[2, 1, 1], pads=[0, 1, 1, 1, 1, 1]),
        True,
        False,
    ),
    "depthwise_strided_u8": (
        np.uint8,
        (2, 4, 11, 9),
        (8, 1, 3, 3),
        dict(group=4, strides=[2, 2], pads=[1, 0, 1, 1]),
        True,
        True,
    ),
    # plain NEON's int16 pair sums at their bound: weights of +-127 against activations of -128 and 127
    "extreme_pairs": (np.int8, (1, 16, 6, 6), (9, 16, 3, 3), dict(pads=[1, 1, 1, 1]), True, True),
    # the same bound on aarch64's depthwise (hg_qg_dw_plane_q; hg_qg_dw_row strided: blocks of 16 and 8
    # outputs, 6 taps), the first channel's weights holding -128 (that channel's taps widened alone)
    "depthwise_pairs": (np.int8, (1, 4, 7, 50), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1]), True, True),
    "depthwise_pairs_strided": (
        np.int8,
        (1, 4, 9, 48),
        (4, 1, 3, 2),
        dict(group=4, strides=[2, 2], pads=[1, 0, 1, 0]),
        True,
        True,
    ),
    # three taps summed in int16 on plain NEON (hg_qg_dw_triples) at their bound, 128 * 255: a channel
    # whose kernel rows' |w| add up to 255, one whose columns' do (its rows do not), one whose rows add up
    # to 256 (pairs) and one holding -128 (each product widened alone), against activations of -128 and 127
    "depthwise_triples": (np.int8, (1, 4, 6, 21), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1]), True, True),
    # plain NEON's pointwise tiles (hg_qg_mlal_tile: 4 channels x 8 pixels, ld1 of two registers, the
    # weights broadcast by ld2r) at the pair bound: +-127 against -128 and 127, 13 channels (a panel
    # and a short one, a tile of one channel), k = 35 (9 groups of 4: an odd last one, zero padded),
    # 35 pixels (a block of 32 and one of 3); the same with a -128 in every channel (the w128 forms)
    "pointwise_extreme": (np.int8, (1, 35, 5, 7), (13, 35, 1, 1), {}, True, True),
    "pointwise_extreme_w128": (np.int8, (1, 35, 5, 7), (13, 35, 1, 1), {}, True, True),
    # aarch64's depthwise planes copied out by rows of 8 and 16 bytes (hg_qg_dw_rows_out: each row's
    # store runs into the next row's, rewritten after; the last row exactly): widths 5 and 13
    "depthwise_rows_of_5": (np.int8, (1, 3, 25, 5), (3, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1]), True, True),
    "depthwise_rows_of_13": (np.uint8, (1, 2, 11, 13), (2, 1, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True, True),
    # rows of a whole number of AVX2 vectors (hg_qg_dw_row's 8 outputs a loop, no tail): where GCC 12 at
    # -O3 -march=haswell warned of the scalar tail's iteration 2^62 (HG_QG_WHOLE in hg_qgemm.h)
    "depthwise_rows_of_48": (np.int8, (1, 2, 5, 48), (2, 1, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True, True),
    # weights holding -128 (the *_w128 kernels, each product widened alone on plain NEON) against
    # activations that are -128 on the path (uint8 0, flipped): a pair of them would not fit int16
    "w128_u8": (np.uint8, (1, 8, 7, 7), (10, 8, 3, 3), dict(pads=[1, 1, 1, 1]), True, True),
    "fc_w128": (np.int8, (1, 40, 1, 1), (12, 40, 1, 1), {}, True, True),
    # the same through the gathered kernel (16 channels, 3x3)
    "gather_w128": (np.uint8, (1, 16, 7, 7), (10, 16, 3, 3), dict(pads=[1, 1, 1, 1]), True, True),
    # the requantisation's bounds (aarch64: saturating narrows, then the bounds where narrower): a fused
    # Clip on int8 and on uint8 (past 127), and outputs saturated at both ends of the type; blocks of
    # 32 pixels, last ones of 17, 15, 1 and 23 (aarch64: the last 16 or 8 overlapped, a scalar one)
    "clipped_s8": (np.int8, (1, 8, 23, 23), (11, 8, 3, 3), dict(pads=[1, 1, 1, 1]), True, True),
    "clipped_u8": (np.uint8, (1, 8, 9, 23), (10, 8, 1, 1), {}, True, True),
    "saturated_s8": (np.int8, (1, 6, 7, 23), (9, 6, 3, 1), dict(pads=[1, 0, 1, 0]), True, True),
    "saturated_u8": (np.uint8, (1, 6, 5, 11), (9, 6, 1, 3), dict(pads=[0, 1, 0, 1]), False, True),
    # stride 2 along rows (aarch64 im2col: rows of 8 pixels by two loads and a tbl; rows of 19, the
    # last 8 from the odd bytes, and the pieces of rows that blocks of 32 pixels cut)
    "strided_rows_of_8": (np.int8, (1, 6, 9, 16), (10, 6, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True, True),
    "strided_rows_u8": (np.uint8, (1, 4, 7, 37), (9, 4, 3, 3), dict(strides=[1, 2], pads=[0, 1, 0, 1]), True, True),
    # rows that blocks of 32 pixels cut into pieces of 2-7 pixels (aarch64 im2col: 4 or 2 pixels by
    # zips, the first and the last overlapping): rows of 10 (pieces of 2, 4, 6), of 7 (4 and 3, uint8)
    "im2col_rows_of_10": (np.int8, (1, 6, 12, 12), (9, 6, 3, 3), {}, True, True),
    "im2col_rows_of_7_u8": (np.uint8, (1, 3, 9, 9), (6, 3, 3, 3), {}, True, True),
}
# a Clip fused on the quantized output: (min, max) as stored integers
CLIPS = {"clipped_s8": (-20, 30), "clipped_u8": (100, 200)}
# an output scale 12 times finer: many results past the type's range at both ends
SATURATED = ("saturated_s8", "saturated_u8")
# the cases whose weights hold -128; the others' are in [-127, 127], as onnxruntime's symmetric ones
W128_CASES = ("w128_u8", "fc_w128", "gather_w128")
# activations of -128 and 127 against weights of +-127: int16 pair sums at their bound
EXTREME_CASES = (
    "extreme_pairs",
    "depthwise_pairs",
    "depthwise_pairs_strided",
    "depthwise_triples",
    "pointwise_extreme",
    "pointwise_extreme_w128",
)
# depthwise_triples' channels (above): rows at the bound, columns at the bound, rows one past it (three
# -128 bytes make 32768: pairs), a -128
TRIPLES = np.array([127, 127, 1, -127, -127, -1, 127, -1, -127], np.int8).reshape(3, 3)
PAST_TRIPLES = np.array([[-127, -127, -2]] * 3, np.int8)

# int8/uint8 MaxPool (hg_qg_max_row): name: (x dtype, x shape, attributes)
POOL_CASES = {
    "maxpool_strided_padded": (np.int8, (1, 3, 33, 47), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "maxpool_u8": (np.uint8, (2, 2, 9, 70), dict(kernel_shape=[2, 3], strides=[1, 1], pads=[0, 1, 1, 0])),
    "maxpool_dilated": (np.int8, (1, 2, 12, 12), dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[1, 2])),
    "maxpool_1d_stride3": (np.uint8, (1, 4, 40), dict(kernel_shape=[3], strides=[3], pads=[1, 1])),
    # aarch64: stride 2's last 8 outputs read from the odd bytes (15 outputs of 32 columns, no padding)
    "maxpool_s2_odd_tail": (np.int8, (1, 3, 32, 32), dict(kernel_shape=[3, 3], strides=[2, 2])),
    # the left edge in the first 8 lanes (tbx), the fewest columns that allow it, a right edge after
    "maxpool_s2_edges_u8": (np.uint8, (1, 2, 5, 22), dict(kernel_shape=[1, 5], strides=[1, 2], pads=[0, 2, 0, 2])),
    "maxpool_s1_wide_pad": (np.int8, (1, 2, 3, 20), dict(kernel_shape=[2, 7], strides=[1, 1], pads=[0, 3, 1, 3])),
    # aarch64's 2 x 2 stride 2 rows (hg_qg_max2x2): rows of 5 outputs (an odd column and row left over),
    # 14 (uint8: two overlapping halves of 8), 37 (two vectors of 16, the last 16 overlapping)
    "maxpool_2x2_rows_of_5": (np.int8, (1, 3, 7, 11), dict(kernel_shape=[2, 2], strides=[2, 2])),
    "maxpool_2x2_rows_of_14_u8": (np.uint8, (1, 2, 4, 28), dict(kernel_shape=[2, 2], strides=[2, 2])),
    "maxpool_2x2_rows_of_37": (np.int8, (1, 2, 4, 75), dict(kernel_shape=[2, 2], strides=[2, 2])),
}

# QLinearMatMul with a constant int8 B (the packed GEMV per row of A): name: (A dtype, A shape, B shape, per-column scale)
MATMUL_CASES = {
    "matmul_row_odd_k": (np.int8, (1, 41), (41, 21), True),
    "matmul_batched_u8": (np.uint8, (2, 3, 24), (24, 70), False),
    # blocks of 4 rows (hg_qg_gemm_rows): 3 blocks and a short one of 2, an odd number of groups of 4 k,
    # 3 chunks of 4 panels, the last short (and its last panel part filled); 2 x 4 rows of uint8
    "matmul_rows_odd_k": (np.int8, (14, 37), (37, 77), True),
    "matmul_rows_u8": (np.uint8, (2, 4, 48), (48, 40), False),
}

# how each path is asked for: (extra cflags, -march=native, can run here)
PATHS = {
    "native": ((), True),
    "avx512_without_vnni": (("-mno-avx512vnni", "-mno-avxvnni"), True),  # AVX2 blocks, AVX-512 rows
    "avx2": (("-march=haswell",), False),  # an AVX2 machine: AVX2 alone, and GCC's tuning for one
    "scalar": ((), False),
}


def q_random(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def case_weights(name, shape):
    """int8 weights in [-127, 127]; -128 in every channel's first taps for the W128 cases; +-127 only for
    EXTREME_CASES (the depthwise ones' first channel with a -128)."""
    if name == "depthwise_triples":
        w = RNG.choice([-127, 127], shape).astype(np.int8)
        w[0, 0], w[1, 0], w[2, 0], w[3, 0, 1, 1] = TRIPLES, TRIPLES.T, PAST_TRIPLES, -128
        return w
    if name in EXTREME_CASES:
        w = RNG.choice([-127, 127], shape).astype(np.int8)
        if name.startswith("depthwise"):
            w[0, 0, 0] = -128
        if name == "pointwise_extreme_w128":
            w[:, 0] = -128
        return w
    w = RNG.integers(-127, 128, shape).astype(np.int8)
    if name in W128_CASES:
        w.reshape(shape[0], -1)[:, :12] = -128
    return w


def case_input(name, shape, dtype):
    if name in EXTREME_CASES:
        return RNG.choice(np.array([-128, 127, -128, 5], np.int8), shape)
    x = q_random(shape, dtype)
    if name in W128_CASES:  # half the activations the path's -128
        x.reshape(-1)[::2] = 0 if dtype is np.uint8 else -128
    return x


def model_and_feeds():
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for name, (x_dtype, x_shape, w_shape, attrs, per_channel, with_bias) in CASES.items():
        channels, k = w_shape[0], int(np.prod(w_shape[1:]))
        x_scale, w_scales = 0.05, (RNG.random(channels if per_channel else 1) * 0.01 + 0.002).astype(np.float32)
        # an output scale that spreads the results over ~80 steps: neither saturated nor all one value
        y_scale = x_scale * float(w_scales.mean()) * 74 * 74 * np.sqrt(k) / 40 / (12 if name in SATURATED else 1)
        xz = np.array(3 if x_dtype is np.int8 else 131, x_dtype)
        yz = np.array(-7 if x_dtype is np.int8 else 120, x_dtype)
        constants = {
            "xs": np.array(x_scale, np.float32),
            "xz": xz,
            "w": case_weights(name, w_shape),
            "ws": w_scales if per_channel else w_scales.reshape(()),
            "wz": np.zeros(channels if per_channel else (), np.int8),
            "ys": np.array(y_scale, np.float32),
            "yz": yz,
            "b": RNG.integers(-3000, 3000, channels).astype(np.int32),
        }
        names = [f"{name}_{key}" for key in ("x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b")]
        if not with_bias:
            names = names[:-1]
        conv_y = f"{name}_conv" if name in CLIPS else f"{name}_y"
        nodes.append(helper.make_node("QLinearConv", names, [conv_y], name=name, **attrs))
        if name in CLIPS:
            bounds = [np.array(b, x_dtype) for b in CLIPS[name]]
            inits += [numpy_helper.from_array(b, f"{name}_clip{i}") for i, b in enumerate(bounds)]
            nodes.append(helper.make_node("Clip", [conv_y, f"{name}_clip0", f"{name}_clip1"], [f"{name}_y"]))
        for key, value in constants.items():
            if f"{name}_{key}" in names:
                inits.append(numpy_helper.from_array(value, f"{name}_{key}"))
        inputs.append(
            helper.make_tensor_value_info(f"{name}_x", helper.np_dtype_to_tensor_dtype(np.dtype(x_dtype)), x_shape)
        )
        outputs.append(helper.make_tensor_value_info(f"{name}_y", TensorProto.UNDEFINED, None))
        feeds[f"{name}_x"] = case_input(name, x_shape, x_dtype)
    for name, (a_dtype, a_shape, b_shape, per_column) in MATMUL_CASES.items():
        k, n = b_shape
        a_scale, b_scales = 0.05, (RNG.random(n if per_column else 1) * 0.01 + 0.002).astype(np.float32)
        constants = {
            "as": np.array(a_scale, np.float32),
            "az": np.array(-9 if a_dtype is np.int8 else 140, a_dtype),
            "b": RNG.integers(-127, 128, b_shape).astype(np.int8),
            "bs": b_scales if per_column else b_scales.reshape(()),
            "bz": np.zeros(n if per_column else (), np.int8),
            "ys": np.array(a_scale * float(b_scales.mean()) * 74 * 74 * np.sqrt(k) / 40, np.float32),
            "yz": np.array(5 if a_dtype is np.int8 else 118, a_dtype),
        }
        names = [f"{name}_{key}" for key in ("a", "as", "az", "b", "bs", "bz", "ys", "yz")]
        nodes.append(helper.make_node("QLinearMatMul", names, [f"{name}_y"], name=name))
        inits += [numpy_helper.from_array(value, f"{name}_{key}") for key, value in constants.items()]
        inputs.append(
            helper.make_tensor_value_info(f"{name}_a", helper.np_dtype_to_tensor_dtype(np.dtype(a_dtype)), a_shape)
        )
        outputs.append(helper.make_tensor_value_info(f"{name}_y", TensorProto.UNDEFINED, None))
        feeds[f"{name}_a"] = q_random(a_shape, a_dtype)
    for name, (x_dtype, x_shape, attrs) in POOL_CASES.items():
        nodes.append(helper.make_node("MaxPool", [f"{name}_x"], [f"{name}_y"], name=name, **attrs))
        inputs.append(
            helper.make_tensor_value_info(f"{name}_x", helper.np_dtype_to_tensor_dtype(np.dtype(x_dtype)), x_shape)
        )
        outputs.append(helper.make_tensor_value_info(f"{name}_y", TensorProto.UNDEFINED, None))
        feeds[f"{name}_x"] = q_random(x_shape, x_dtype)
    graph = helper.make_graph(nodes, "qconv_cases", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return onnx.shape_inference.infer_shapes(model), feeds


@pytest.fixture(scope="module")
def case_model():
    model, feeds = model_and_feeds()
    expected = dict(zip([o.name for o in model.graph.output], ort_session(model.SerializeToString()).run(None, feeds)))
    return model, feeds, expected


def qgemm_path(project: Path) -> str:
    """Which hg_qgemm.h path the project's kernels were built with: its compile command, preprocessed."""
    commands = json.loads((project / "compile_commands.json").read_text())
    command = next(c for c in commands if "/kernels/" in c["file"])
    argv = list(command["arguments"])
    for flag in ("-c", "-o"):  # the source and the object: the probe reads stdin, writes stdout
        at = argv.index(flag)
        del argv[at : at + 2]
    probe = subprocess.run(
        [*argv, "-dM", "-E", "-x", "c", "-"],
        input='#include "hg_qgemm.h"\n',
        capture_output=True,
        text=True,
        cwd=command["directory"],
        check=True,
    ).stdout
    return next(line.split()[1] for line in probe.splitlines() if line.startswith("#define HG_QG_PATH_"))


def cpu_has(flag: str) -> bool:
    try:
        return f" {flag}" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("path", PATHS, ids=list(PATHS))
def test_packed_qconv_matches_onnxruntime_on_each_path(tmp_path, case_model, path):
    model, feeds, expected = case_model
    cflags, native = PATHS[path]
    project = hetgen.compile(
        "host", model, out=tmp_path / "p", native_only=True, extra_cflags=("-Werror", *cflags), native_tuning=native
    )
    built = qgemm_path(project)
    wanted = {"native": "HG_QG_PATH_AVX512VNNI", "scalar": "HG_QG_PATH_SCALAR"}.get(path, "HG_QG_PATH_AVX2")
    if path in ("scalar", "avx2") or cpu_has("avx512_vnni"):  # elsewhere -march=native picks what the CPU has
        assert built == wanted
    kernels = "".join(p.read_text() for p in (project / "host" / "kernels").glob("*.c"))
    # the gathered convolutions; the matrix products with 4 rows or more by blocks of 4 rows
    gathered = sum(1 for name in CASES if name.startswith("gather")) + 2  # + "wide", "extreme_pairs"
    assert kernels.count("hg_qg_gather(") == gathered
    # whole blocks read in place where each half lies in one output row (widths 32 and 16; on VNNI)
    assert kernels.count("hg_qg_block_taps(") == 2  # gather_rows_32, gather_rows_16_u8
    assert kernels.count("hg_qg_gemm_rows(") == len(MATMUL_CASES)
    assert kernels.count("i0 += 4u") == sum(1 for case in MATMUL_CASES.values() if np.prod(case[1][:-1]) >= 4)
    # the packed kernels: blocks of pixels, or the fully connected layers' GEMV; the depthwise ones direct
    fully_connected = sum(1 for case in CASES.values() if np.prod(case[1][2:]) == 1)  # a 1x1 input
    assert kernels.count("hg_qg_gemv(") == fully_connected - 1
    assert kernels.count("hg_qg_gemv_w128(") == 1  # fc_w128
    depthwise = sum(1 for name in CASES if name.startswith("depthwise"))
    assert kernels.count("hg_qg_block(") == len(CASES) - depthwise - fully_connected - 3
    assert kernels.count("hg_qg_block_w128(") == 3  # w128_u8, gather_w128, pointwise_extreme_w128
    # the depthwise ones: the direct kernel, whole planes where the plane's strides are 1, else rows
    strided = ("depthwise_strided_u8", "depthwise_pairs_strided")
    assert kernels.count("hg_qg_dw_plane_q(") == depthwise - len(strided)
    assert kernels.count("hg_qg_dw_row_q(") == len(strided)
    # 2-D, the input's width (<= 64), int8 weights (+ depthwise_pairs, _triples, _rows_of_5, _13 and _48)
    assert kernels.count("hg_qg_dw_masked_q(") == 7
    # plain NEON's int16 grouping of depthwise_triples' channels, decided at generate time: rows, columns,
    # pairs (its rows add up to 256), each product alone (a -128)
    assert "_groups[4] = { 3, 4, 2, 0 };" in kernels
    got = hetgen.load(project).run(feeds)
    for name, want in expected.items():
        np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on the {built} path")
        assert len(np.unique(want)) > min(8, want.size // 2), name  # the comparison means something


def test_avxvnni_path_builds_warning_free(tmp_path, case_model):
    model, _, _ = case_model
    project = hetgen.compile(
        "host",
        model,
        out=tmp_path / "p",
        native_only=True,
        extra_cflags=("-Werror", "-mno-avx512vnni", "-mavxvnni"),
    )
    assert qgemm_path(project) == "HG_QG_PATH_AVXVNNI"


# aarch64 kinds: (kind, the path its -mcpu gives, whether its program holds sdot)
ARM_KINDS = {"cortex-a55": ("HG_QG_PATH_SDOT", True), "aarch64": ("HG_QG_PATH_NEON", False)}


@pytest.mark.external
@pytest.mark.parametrize("kind", ARM_KINDS, ids=list(ARM_KINDS))
def test_packed_qconv_matches_onnxruntime_on_aarch64(tmp_path, case_model, kind):
    """The same cases built for an aarch64 board (cortex-a55: SDOT; the plain kind: NEON), run under
    qemu-aarch64, bit for bit with onnxruntime."""
    model, feeds, expected = case_model
    wanted, has_sdot = ARM_KINDS[kind]
    platform = tmp_path / "board.yaml"
    platform.write_text(f"name: board\ntarget: {kind}\n")
    project = hetgen.compile(platform, model, out=tmp_path / "p", extra_cflags=("-Werror",))
    board = json.loads((project / "hetgen.json").read_text())["board"]["programs"][0]["path"]
    listing = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", str(project / board)], capture_output=True, text=True, check=True
    ).stdout
    assert ("\tsdot\t" in listing) is has_sdot
    # plain NEON: the mlal blocks (smull + smlal into int16, sadalp into int32); SDOT never takes them
    assert ("<hg_qg_mlal_tile" in listing) is not has_sdot
    if not has_sdot:
        assert all(f"\t{op}\t" in listing for op in ("smull", "smlal", "smlal2", "sadalp"))
    probe = subprocess.run(
        [
            "aarch64-linux-gnu-gcc",
            f"-mcpu={kind}" if kind != "aarch64" else "-march=armv8-a",
            "-dM",
            "-E",
            "-x",
            "c",
            "-",
        ],
        input='#include "hg_qgemm.h"\n',
        capture_output=True,
        text=True,
        cwd=project / "runtime",
        check=True,
    ).stdout
    assert f"#define {wanted} 1" in probe
    got = EmulatedModel(project).run(feeds)
    for name, want in expected.items():
        np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {kind}")
