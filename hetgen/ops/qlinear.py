"""Integer convolution and matrix product: QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger.

Operands are int8 or uint8 (mixed is fine). The activations are widened to int16 with their zero
point subtracted, two columns (or one row of A) at a time in a small buffer -- a fully connected
layer's input vector, and on a microcontroller a row of A times a constant B (stored transposed),
in registers instead (`hg_qvec_*`: no buffer); the weights are read where they are stored (const,
in flash on a microcontroller) and widened in registers (`hg_qdot_*` in
templates/runtime/hg_quant.h: SXTB16 + SMLAD with the DSP extension, VLDRB + VMLADAVA with Helium);
a weight zero point that is not a constant zero is taken out of the exact int32 sum as
zp * sum(x). The sums are stored as int32 (the *Integer ops) or requantized as onnxruntime does:
(acc + bias) * ((x_scale * w_scale) / y_scale) in float32 (made at generate time when the scales
are constants), clamped, rounded half to even, plus the output zero point. Padding contributes nothing
(the padded value is the input's zero point, as onnxruntime pads). A following Relu or Clip on the
quantized output (the QDQ rewrite emits these) is fused as a narrower clamp of the stored integer.

That generic kernel is the one bare-metal targets take. Application cores take offers of their own
(`hosted_only`, hetgen/partition/prepack.py): a convolution with constant int8 weights of zero
point 0 reads them packed at generate time into dot-product panels (hetgen/ops/qpack.py,
templates/runtime/hg_qgemm.h: VNNI, AVX2, SDOT, NEON smull/smlal; a fully connected one as a GEMV over them; a
2-D one of 16 channels or more gathered from its input interleaved by quads of channels instead of
im2col, qconv_gather.c.j2), a depthwise one runs rows or whole planes of a byte plane (or, on
AVX-512 VNNI, the input in place) through hg_qgemm.h's vector kernels (qconv_direct.c.j2), and a
QLinearMatMul with a constant int8 B runs A's rows over B^T's panels by blocks of 4 rows (one GEMV a
row where A has fewer; qmatmul_packed.c.j2).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from hetgen.ir import DType, TensorType
from hetgen.ops import qpack
from hetgen.ops._common import input_arg_count, total_bytes
from hetgen.ops._qadd import dequantized, quantized_result
from hetgen.ops._spatial import conv_geometry
from hetgen.ops.base import IntegerMac, Kernel, OpDef, OpInstance, Prepacked, ResidualAdd, Tiling, Unsupported
from hetgen.ops.matmul import batch_strides, matmul_shapes
from hetgen.ops.quantize import Q_RANGE, QUANTIZED

# bytes hg_qg_dw_row may read past a depthwise plane's last tap (HG_QG_DW_SLACK)
DW_SLACK = 32


def align(size: int, to: int = 64) -> int:
    return (size + to - 1) // to * to


def _operand(op: OpInstance, index: int, what: str) -> TensorType:
    tensor_type = op.input_types[index]
    if tensor_type.dtype not in QUANTIZED:
        raise Unsupported(f"{op.node.op} {what} of {tensor_type.dtype.label}; accepted: int8, uint8")
    return tensor_type


def _vector_like(tensor_type: TensorType) -> bool:
    """A scalar, a 1-D tensor, or one whose dimensions are 1 but the last (onnxruntime's [1, N])."""
    return all(d == 1 for d in tensor_type.shape[:-1])


def _zero_point(op: OpInstance, index: int | None, sizes: tuple[int, ...], what: str) -> dict | None:
    """The view of an optional zero-point input: its arg slot, C type, and whether it varies."""
    if index is None or not op.has_input(index):
        return None
    zp_type = op.input_types[index]
    if zp_type.size not in sizes or not _vector_like(zp_type):
        accepted = " or ".join(f"{s} values" for s in sizes)
        raise Unsupported(f"{op.node.op} {what} zero point of shape {zp_type.shape}; accepted: {accepted}")
    if zp_type.dtype not in QUANTIZED:
        raise Unsupported(f"{op.node.op} {what} zero point of {zp_type.dtype.label}; accepted: int8, uint8")
    return {"arg": index, "ctype": zp_type.dtype.c_type, "per_item": zp_type.size > 1}


def _scale(op: OpInstance, index: int, sizes: tuple[int, ...], what: str) -> dict:
    scale_type = op.input_types[index]
    if scale_type.dtype is not DType.FLOAT32:
        raise Unsupported(f"{op.node.op} {what} scale of {scale_type.dtype.label}; accepted: float32")
    if scale_type.size not in sizes or not _vector_like(scale_type):
        accepted = " or ".join(f"{s} values" for s in sizes)
        raise Unsupported(f"{op.node.op} {what} scale of shape {scale_type.shape}; accepted: {accepted}")
    return {"arg": index, "per_item": scale_type.size > 1}


def output_clamp(op: OpInstance, dtype: DType) -> tuple[int, int]:
    """The stored integer's range: the type's, narrowed by fused Relu/Clip on the quantized output."""
    qmin, qmax = Q_RANGE[dtype]
    for epilogue in op.epilogue:
        if epilogue.kind == "Relu":
            qmin = max(qmin, 0)
        elif epilogue.kind == "Clip":
            qmin = max(qmin, math.ceil(epilogue.alpha)) if math.isfinite(epilogue.alpha) else qmin
            qmax = min(qmax, math.floor(epilogue.beta)) if math.isfinite(epilogue.beta) else qmax
        else:
            raise Unsupported(f"{op.node.op} with a fused {epilogue.kind}; accepted: Relu, Clip")
    return qmin, qmax  # lo > hi stores hi, as Clip does


def _requant(op: OpInstance, y_type: TensorType, x_scale: int, w_scale: int, y_scale: int, y_zp: int, count: int):
    """The requantisation view: scale inputs, the output zero point and the clamp range."""
    if y_type.dtype not in QUANTIZED:
        raise Unsupported(f"{op.node.op} output of {y_type.dtype.label}; accepted: int8, uint8")
    qmin, qmax = output_clamp(op, y_type.dtype)
    view = {
        "x_scale": _scale(op, x_scale, (1,), "input"),
        "w_scale": _scale(op, w_scale, (1, count), "weight"),
        "y_scale": _scale(op, y_scale, (1,), "output"),
        "y_zp": _zero_point(op, y_zp, (1,), "output"),
        "count": count,
        "per_channel": count > 1 and op.input_types[w_scale].size > 1,
        # a constant output zero point as a literal: the clamp bounds fold (hg_quantize_scaled)
        "yzp_value": _constant_zero_point(op, y_zp),
        "qmin": qmin,
        "qmax": qmax,
    }
    return view


def _constant_zero_point(op: OpInstance, index: int) -> int | None:
    if not op.has_input(index):
        return 0
    value = op.constant(index)
    return None if value is None else int(np.asarray(value).reshape(-1)[0])


def multiplier_offer(
    op: OpInstance, requant: dict, scale_bytes: int, scratch_bytes: int, bare_metal_only: bool = False
) -> tuple[Prepacked, ...]:
    """The requantisation multipliers (x_scale * w_scale) / y_scale made at generate time when the
    scales are constants: the weight scale's input replaced by them (its shape: per tensor or per
    channel, so no larger), read where they are linked (flash on a microcontroller) by a kernel
    that then needs no workspace for them. numpy's float32 operations round as the C ones do, so
    they are the bits the kernel would compute; kernels of the same shapes still share their code."""
    indices = (requant["x_scale"]["arg"], requant["w_scale"]["arg"], requant["y_scale"]["arg"])
    x_scale, w_scale, y_scale = (op.constant(index) for index in indices)
    if x_scale is None or w_scale is None or y_scale is None:
        return ()
    xs, ys = np.float32(np.asarray(x_scale).reshape(-1)[0]), np.float32(np.asarray(y_scale).reshape(-1)[0])

    def multipliers(ws: np.ndarray) -> np.ndarray:
        return ((xs * np.asarray(ws, np.float32)) / ys).astype(np.float32)

    params = {"multipliers_prepacked": True}
    return (Prepacked(indices[1], multipliers, params, scratch_bytes - scale_bytes, bare_metal_only=bare_metal_only),)


def _weight_correction(op: OpInstance, zp: dict | None, index: int | None) -> dict | None:
    """The weight zero point the sums are corrected by (sum((w - zp) x) = sum(w x) - zp sum(x)):
    None when it is absent or a constant zero (onnxruntime's int8 weights are symmetric)."""
    if zp is None:
        return None
    value = op.constant(index)
    if value is not None and not np.any(value):
        return None
    return zp


# -- convolution ---------------------------------------------------------------------------------


def padded_plane(win) -> tuple[int, int, int]:
    """(depth, height, width) of an input plane with its padding: every position a tap reads."""
    return tuple(
        max(size + begin + end, (out - 1) * stride + (k - 1) * dil + 1)
        for size, begin, end, out, stride, k, dil in zip(
            win.in_shape, win.pads_begin, win.pads_end, win.out_shape, win.strides, win.kernel, win.dilations
        )
    )


def lower_conv(op: OpInstance, x: int, w: int, x_zp: int | None, w_zp: int | None, requant: dict | None) -> Kernel:
    x_type, w_type = _operand(op, x, "input"), _operand(op, w, "weights")
    y_type = op.output_types[0]
    geometry = conv_geometry(op, x_type, w_type, y_type)
    batch, channels, out_channels, groups, win = geometry
    cin_group, cout_group = geometry.cin_group, geometry.cout_group
    k_dim = cin_group * win.kernel_size
    variant = "direct" if cin_group == 1 and groups > 1 else "gemm"
    if variant == "gemm" and win.out_size == win.in_size == win.kernel_size == 1:
        variant = "vector"  # a fully connected layer: its column is the input vector itself
    # the weights are read where they are; a convolution widens two output columns of unfolded input
    # to int16; a fully connected layer reads its input vector in place too (hg_qvec_*: widened in
    # registers) and requantises each pair of sums as it is made, so it needs no workspace (it kept
    # a widened chunk of 256 values and, for a longer input, an int32 sum per row: the autoencoder's
    # 640 -> 128 layer 1,024 bytes, its RAM 1.17x its activations' liveness bound)
    col_bytes = align(2 * 2 * k_dim, 8) if variant == "gemm" else 0
    scale_bytes = align(4 * out_channels, 8) if requant else 0
    bias = None
    if requant and op.has_input(8):
        b_type = op.input_types[8]
        if b_type.dtype is not DType.INT32 or tuple(b_type.shape) != (out_channels,):
            raise Unsupported(f"{op.node.op} bias of {b_type}; accepted: int32[{out_channels}]")
        bias = 8
    w_zero_point = _zero_point(op, w_zp, (1, out_channels), "weight")
    params = {
        **win.view(),
        "variant": variant,
        "is_gemm": variant == "gemm",
        "is_direct": variant == "direct",
        "is_vector": variant == "vector",
        "w_group_stride": cout_group * k_dim,  # one group's weights
        "scratch_index": input_arg_count(op) + 1,
        "batch": batch,
        "groups": groups,
        "in_channels": channels,
        "out_channels": out_channels,
        "cin_group": cin_group,
        "cout_group": cout_group,
        "k_dim": k_dim,
        "x_arg": x,
        "w_arg": w,
        "x_ctype": x_type.dtype.c_type,
        "w_ctype": w_type.dtype.c_type,
        "w_dot": "s8" if w_type.dtype is DType.INT8 else "u8",
        "x_dot": "s8" if x_type.dtype is DType.INT8 else "u8",
        "y_ctype": y_type.dtype.c_type,
        "x_zp": _zero_point(op, x_zp, (1,), "input"),
        "w_zp": w_zero_point,
        "w_correction": _weight_correction(op, w_zero_point, w_zp),
        "bias_arg": bias,
        "bias_term": "bias[m]" if bias is not None else "0",
        "requant": requant,
        "multipliers_prepacked": False,
        "scale_at": "m" if requant and requant["per_channel"] else "0",
        "title": "Quantized" if requant else "Integer",
        "col_offset": 0,
        "scale_offset": col_bytes,
        "out_index": input_arg_count(op),
        # the generic forms; a bare-metal target takes _mcu_offer's instead
        "requantize": "hg_quantize_scaled",
        "unfold_rows": False,
        "unfold_pairs": False,
        "rows_reordered": False,
        "dw_band": False,
        "tap_table": False,
    }
    scratch = col_bytes + scale_bytes
    # The generic kernel's multipliers made at generate time (bare metal, where it runs); the hosted
    # offers compute theirs per call, and offers on different inputs must not mix their workspaces.
    multipliers = multiplier_offer(op, requant, scale_bytes, scratch, bare_metal_only=True) if requant else ()
    offers = multipliers
    padded = padded_plane(win)
    if variant in ("gemm", "vector") and _packable(op, x_type, w, w_zp, requant, k_dim):
        gathered = qpack.plan_gather(cin_group, cout_group, groups, win, padded) if variant == "gemm" else None
        packed_params, packed_scratch = gathered or qpack.plan(cin_group, cout_group, groups, channels, win, padded)
        packed_params["x_signed"] = int(x_type.dtype is DType.INT8)
        packed_params.update(packed_kernels(op.constant(w)))
        packed = Prepacked(
            w,
            lambda value: qpack.pack_weights(value, groups, channel_quads=gathered is not None),
            packed_params,
            packed_scratch,
            template="kernels/qconv_gather.c.j2" if gathered else _PACKED_TEMPLATES[variant],
            hosted_only=True,
        )
        offers = (*offers, packed)
    elif variant == "direct" and op.constant(w) is not None:
        symmetric = op.input_types[w].dtype is DType.INT8 and _weight_correction(op, w_zero_point, w_zp) is None
        groups = dw_tap_groups(op.constant(w), win.kernel) if symmetric and x_type.dtype is DType.INT8 else None
        offers = (*offers, _depthwise_rows_offer(w, x_type, win, padded, out_channels, requant, symmetric, groups))
    if op.constant(w) is not None:
        # the depthwise band goes after the multipliers, or after the scales computed per call
        band_offset = col_bytes + (0 if multipliers else scale_bytes)
        offers = (*offers, _mcu_offer(w, win, variant, k_dim, padded, band_offset))
    return Kernel(
        template="kernels/qconv.c.j2",
        params=params,
        prepacked=offers,
        scratch_bytes=scratch,
        flops=2 * batch * out_channels * win.out_size * k_dim,
        bytes_accessed=total_bytes(*op.input_types, y_type),
    )


# The packed kernel of each variant: blocks of output pixels, or a fully connected layer's GEMV
# (hg_qg_gemv: the one pixel's activations broadcast against the panels' channels)
_PACKED_TEMPLATES = {"gemm": "kernels/qconv_packed.c.j2", "vector": "kernels/qgemv_packed.c.j2"}


def _mcu_offer(w: int, win, variant: str, k_dim: int, padded, band_offset: int) -> Prepacked:
    """The generic kernel as a Cortex-M runs it (the weights as they are; the offer changes the
    unfolding and the rounding): the rows of taps inside the input widened with no per-tap checks
    (four at a time by SXTB16 where a row is four contiguous taps or a multiple: then already in
    the dot product's order), a pointwise convolution's two columns made together from halfword
    loads, and the requantisation's rounding by VCVTR (hg_quant.h hg_requantize)."""
    pointwise = (
        variant == "gemm"
        and win.kernel_size == 1
        and win.in_shape == win.out_shape
        and not any(win.pads_begin)
        and all(stride == 1 for stride in win.strides)
    )
    params = {
        "requantize": "hg_requantize",
        "unfold_rows": variant == "gemm" and not pointwise,
        "unfold_pairs": pointwise,
        # rows of four contiguous taps or a multiple: each starts a group of four of the column
        "rows_reordered": win.dilations[2] == 1 and win.kernel[2] % 4 == 0,
        "w_span": (win.kernel[2] - 1) * win.dilations[2] + 1,
    }
    if params["unfold_rows"] and not params["rows_reordered"] and win.kernel[0] == win.in_shape[0] == 1:
        params.update(_tap_table(win, k_dim))
    scratch = None
    if variant == "direct" and win.kernel[0] == win.in_shape[0] == 1 and win.dilations[2] == 1:
        # depthwise: a band of the rows one output row reads, widened with their padding
        band_rows, band_w = (win.kernel[1] - 1) * win.dilations[1] + 1, padded[2]
        params.update(
            dw_band=True,
            band_rows=band_rows,
            band_w=band_w,
            band_offset=band_offset,
            dw_half=win.kernel[2] // 2,
            dw_pairs=max(1, win.kernel[1] * (win.kernel[2] // 2)),
        )
        scratch = band_offset + align(2 * band_rows * band_w, 8)
    return Prepacked(w, lambda value: value, params, scratch, bare_metal_only=True)


def _tap_table(win, k_dim: int) -> dict:
    """A 2-D convolution's taps as offsets from its window's corner in the input of one group
    (channel, row, column), in the column's order: natural, and with every whole group of four
    ordered (x0, x2, x1, x3) as the SMLAD dot product reads it (hg_q15_reorder)."""
    _, in_h, in_w = win.in_shape
    _, k_h, k_w = win.kernel
    _, dil_h, dil_w = win.dilations
    natural = [
        c * win.in_size + kh * dil_h * in_w + kw * dil_w
        for c in range(k_dim // win.kernel_size)
        for kh in range(k_h)
        for kw in range(k_w)
    ]
    reordered = list(natural)
    for p in range(0, k_dim - k_dim % 4, 4):
        reordered[p + 1], reordered[p + 2] = natural[p + 2], natural[p + 1]
    return {
        "tap_table": True,
        "taps_ctype": "uint16_t" if max(natural) < 1 << 16 else "uint32_t",
        "taps_natural": ", ".join(map(str, natural)),
        "taps_reordered": ", ".join(map(str, reordered)),
        "h_span": (k_h - 1) * dil_h + 1,
    }


def dw_tap_groups(weights: np.ndarray, kernel: tuple[int, ...]) -> list[int]:
    """How plain NEON's whole-plane depthwise kernel (hg_qg_dw_plane_q's `grouping`) sums each output
    channel's taps, decided from the constant weights (zero point 0) of a layer with int8 inputs
    (|x| <= 128): 3, three taps in int16 before widening (kernel rows, in tap order), where every three
    consecutive taps' |w| add up to 255 at most (128 * 255 < 2^15); 4, three by columns of a 3 x 3
    window where its rows do not; 2, two taps (any two fit while no weight is -128); 0, each product
    widened alone."""
    taps = math.prod(kernel)
    flat = np.abs(np.asarray(weights, np.int32).reshape(len(weights), taps))
    columns = flat.reshape(-1, 3, 3).transpose(0, 2, 1).reshape(-1, taps) if tuple(kernel[-2:]) == (3, 3) else None

    def triples(w: np.ndarray) -> bool:
        return taps % 3 == 0 and bool(np.all(w.reshape(-1, 3).sum(axis=1) <= 255))

    def group(m: int) -> int:
        if taps > 16 or flat[m].max() > 127:
            return 0
        if triples(flat[m]):
            return 3
        return 4 if columns is not None and triples(columns[m]) else 2

    return [group(m) for m in range(len(flat))]


def _shared_gap_plane(win, padded) -> tuple[tuple[int, int, int], int]:
    """The depthwise kernels' padded plane, (depth, height, width), and its bytes: one gap of padding
    between consecutive rows, the right padding of a row being the left padding of the next (a tap
    reads at most `begin` columns left of its row and `right` right of it, so a gap of the larger
    holds both), where the plane of padded_plane has both; the bytes run on past the last row by the
    right padding its taps read. A plane of stride 1 computes the gap's columns and drops them
    (hg_qg_dw_plane_q): ds_cnn's 5-wide rows take 6 of them a row instead of 7."""
    in_w, out_w, begin = win.in_shape[2], win.out_shape[2], win.pads_begin[2]
    spanned = (out_w - 1) * win.strides[2] + (win.kernel[2] - 1) * win.dilations[2] + 1
    right = max(0, spanned - begin - in_w)
    shape = (padded[0], padded[1], in_w + max(begin, right))
    return shape, math.prod(shape) + max(0, spanned - shape[2])


def _depthwise_rows_offer(
    w: int, x_type: TensorType, win, padded, out_channels: int, requant, symmetric: bool, groups: list[int] | None
) -> Prepacked:
    """Depthwise on an application core: each input plane once into a zero-point-padded byte
    plane, then output rows through hg_qgemm.h's vector row kernels (qconv_direct.c.j2); the
    weights as they are (the offer changes the kernel, not the layout)."""
    padded, plane_size = _shared_gap_plane(win, padded)
    plane_bytes = align(plane_size + DW_SLACK)  # the row kernel reads up to DW_SLACK past a row
    sums_bytes = align(4 * win.out_shape[2])  # one output row's int32 sums
    scale_bytes = align(4 * out_channels) if requant else 0
    # stride 1 along rows and columns, requantised: a whole output plane per call of
    # hg_qg_dw_plane_q, its taps one run each (their offsets in the padded plane), its results
    # first as bytes of the "virtual" plane whose rows are the padded plane's
    flat = requant is not None and tuple(win.strides[1:]) == (1, 1)
    out_h, out_w = win.out_shape[1], win.out_shape[2]
    virtual_bytes = align(-(-((out_h - 1) * padded[2] + out_w) // 64) * 64) if flat else 0
    # ... and where the rows keep the input's width (at most 64) in 2-D with int8 weights of zero
    # point 0, the AVX-512 VNNI path reads the input itself (hg_qg_dw_masked_q): each tap one run
    # of it, the lanes that fall in the padding masked to the zero point (bits made per call)
    two_d = win.in_shape[0] == win.out_shape[0] == win.kernel[0] == 1
    masked = flat and symmetric and two_d and win.in_shape[2] == out_w <= 64
    rows_h = [kh * win.dilations[1] - win.pads_begin[1] for kh in range(win.kernel[1]) for _ in range(win.kernel[2])]
    cols_w = [kw * win.dilations[2] - win.pads_begin[2] for _ in range(win.kernel[1]) for kw in range(win.kernel[2])]
    mask_bytes = align(8 * win.kernel_size * -(-win.out_size // 64)) if masked else 0
    params = {
        "pad_plane_d": padded[0],
        "pad_plane_h": padded[1],
        "pad_plane_w": padded[2],
        "pad_plane_size": plane_size,
        "masked": masked,
        "tap_rows": rows_h,
        "tap_cols": cols_w,
        "tap_offsets": [dh * out_w + dw for dh, dw in zip(rows_h, cols_w)],
        "mask_offset": plane_bytes + sums_bytes + virtual_bytes + scale_bytes,
        "plane_offset": 0,
        "acc_offset": plane_bytes,
        "virtual_offset": plane_bytes + sums_bytes,
        "scale_offset": plane_bytes + sums_bytes + virtual_bytes,
        "x_signed": int(x_type.dtype is DType.INT8),
        "flat": flat,
        "plane_taps": [
            (kd * win.dilations[0] * padded[1] + kh * win.dilations[1]) * padded[2] + kw * win.dilations[2]
            for kd in range(win.kernel[0])
            for kh in range(win.kernel[1])
            for kw in range(win.kernel[2])
        ],
        "slab_stride": win.strides[0] * padded[1] * padded[2],  # one output depth's plane
        "tap_groups": groups,
    }
    return Prepacked(
        w,
        np.asarray,
        params,
        plane_bytes + sums_bytes + virtual_bytes + scale_bytes + mask_bytes,
        template="kernels/qconv_direct.c.j2",
        hosted_only=True,
    )


def packed_kernels(weights: np.ndarray) -> dict:
    """Which hg_qgemm.h kernels the packed weights take: plain NEON sums two int8 products in int16
    (smull + smlal), exact only while no weight is -128 (2 * 128 * 127 < 2^15); weights that hold
    one take the *_w128 forms, which widen each product alone (every other path computes both alike)."""
    full_range = bool(np.any(np.asarray(weights) == -128))
    suffix = "_w128" if full_range else ""
    return {
        "block_fn": f"hg_qg_block{suffix}",
        "gemv_fn": f"hg_qg_gemv{suffix}",
        "gemm_rows_fn": f"hg_qg_gemm_rows{suffix}",
    }


def _packable(op: OpInstance, x_type: TensorType, w: int, w_zp: int | None, requant, k_dim: int) -> bool:
    """Whether the packed int8 kernel (hetgen/ops/qpack.py) computes this convolution: requantised
    int8 or uint8 output, constant int8 weights with zero point 0, a reduction an int32 holds."""
    if requant is None or op.constant(w) is None or op.input_types[w].dtype is not DType.INT8:
        return False
    if x_type.dtype not in QUANTIZED or op.output_types[0].dtype not in QUANTIZED or k_dim > qpack.MAX_K:
        return False
    if w_zp is not None and op.has_input(w_zp):
        zero_point = op.constant(w_zp)
        if zero_point is None or np.any(zero_point != 0):
            return False
    return True


def lower_qlinear_conv(op: OpInstance) -> Kernel:
    out_channels = op.input_types[3].shape[0]
    residual = op.has_input(QLINEAR_CONV_RESIDUAL.input)
    # with a residual QLinearAdd fused, the Add's activations clamp the sum, not the Conv's output
    conv = replace(op, epilogue=()) if residual else op
    requant = _requant(conv, op.output_types[0], 1, 4, 6, 7, out_channels)
    kernel = lower_conv(conv, 0, 3, 2, 5, requant)
    return with_quantized_residual(kernel, op) if residual else kernel


def with_quantized_residual(kernel: Kernel, op: OpInstance) -> Kernel:
    """The QLinearConv `kernel` doing its residual QLinearAdd too (hetgen/spec/patterns.py): after the
    convolution has stored its requantized outputs, each is added to the residual's element as the
    QLinearAdd kernel adds them (hetgen/ops/_qadd.py, the same expression) and stored in place, so
    the fused unit computes the two kernels' bits. Inputs from `QLINEAR_CONV_RESIDUAL.input`: the
    residual, its scale and zero point, the sum's scale and zero point."""
    r = QLINEAR_CONV_RESIDUAL.input
    y_type, r_type = op.output_types[0], op.input_types[r]
    if r_type.dtype is not y_type.dtype or tuple(r_type.shape) != tuple(y_type.shape):
        raise Unsupported(f"QLinearConv residual of {r_type}; accepted: {y_type}")
    a = dequantized(op, "a", y_type, 6, 7, "output")
    b = dequantized(op, "b", r_type, r + 1, r + 2, "residual")
    view = {
        "arg": r,
        "ctype": r_type.dtype.c_type,
        "count": y_type.size,
        "out_index": input_arg_count(op),
        "sum": quantized_result(op, f"{a} + {b}", y_type, r + 3, r + 4, output_clamp(op, y_type.dtype)),
    }
    return replace(
        kernel,
        params={**kernel.params, "quantized_residual": view, "wrapper_template": "kernels/qconv_residual.c.j2"},
        flops=kernel.flops + 6 * y_type.size,  # as QLinearAdd counts its elements
        bytes_accessed=kernel.bytes_accessed + r_type.nbytes,
    )


def lower_conv_integer(op: OpInstance) -> Kernel:
    if op.epilogue:
        raise Unsupported("ConvInteger with a fused activation")
    return lower_conv(op, 0, 1, 2, 3, None)


# -- matrix product ------------------------------------------------------------------------------


def lower_matmul(op: OpInstance, a: int, b: int, a_zp: int | None, b_zp: int | None, requant_at) -> Kernel:
    a_type, b_type = _operand(op, a, "A"), _operand(op, b, "B")
    y_type = op.output_types[0]
    m, n, k, a_batch, b_batch, out_batch = matmul_shapes(op.node.op, a_type.shape, b_type.shape)
    batches = math.prod(out_batch)
    requant = requant_at(n) if requant_at else None
    row_bytes = align(2 * k, 8)  # one row of A, int16 (B is read where it is)
    scale_bytes = align(4 * n, 8) if requant else 0
    b_zero_point = _zero_point(op, b_zp, (1, n), "B")
    params = {
        "m": m,
        "n": n,
        "k": k,
        "n4": n - n % 4,
        "batches": batches,
        "batch_dims": out_batch or (1,),
        "a_strides": batch_strides(a_batch, out_batch, m * k) or (0,),
        "b_strides": batch_strides(b_batch, out_batch, k * n) or (0,),
        "a_arg": a,
        "b_arg": b,
        "a_ctype": a_type.dtype.c_type,
        "b_ctype": b_type.dtype.c_type,
        "y_ctype": y_type.dtype.c_type,
        "a_zp": _zero_point(op, a_zp, (1, m), "A"),
        "b_zp": b_zero_point,
        "b_correction": _weight_correction(op, b_zero_point, b_zp),
        "requant": requant,
        "multipliers_prepacked": False,
        "scale_at": "j + c" if requant and requant["per_channel"] else "0",
        "row_offset": 0,
        "scale_offset": row_bytes,
        "out_index": input_arg_count(op),
        "scratch_index": input_arg_count(op) + 1,
        "matrix_size": m * n,
        "title": "Quantized" if requant else "Integer",
    }
    multipliers = multiplier_offer(op, requant, scale_bytes, row_bytes + scale_bytes) if requant else ()
    offers = multipliers
    if _matmul_packable(op, a_type, b, b_zp, requant, k, b_batch, a_zp):
        offers = (
            *offers,
            _packed_matmul_offer(b, op.constant(b), a_type, m * batches, n, k, requant["per_channel"]),
        )
    if op.constant(b) is not None and len(b_type.shape) == 2:
        # after the multipliers' offer: no workspace but the scales computed per call, if those are
        per_column = bool(requant and requant["per_channel"])
        offers = (*offers, _mcu_matmul_offer(b, a_type, b_type, per_column, 0 if multipliers else scale_bytes))
    return Kernel(
        template="kernels/qmatmul.c.j2",
        params=params,
        prepacked=offers,
        scratch_bytes=row_bytes + scale_bytes,
        flops=2 * batches * m * n * k,
        bytes_accessed=total_bytes(*op.input_types, y_type),
    )


def _mcu_matmul_offer(
    b: int, a_type: TensorType, b_type: TensorType, per_column: bool, scratch_bytes: int
) -> Prepacked:
    """A matrix product with a constant B (one matrix) on a microcontroller: B transposed at generate
    time (the same bytes, in flash), so that a row of A times two columns is two dot products of
    contiguous rows read in place (hg_qvec_*, as a fully connected layer's): no widened row of A in
    the workspace, and SMLAD's two multiply-adds a step where the column-strided loop took one."""
    params = {
        "a_dot": "s8" if a_type.dtype is DType.INT8 else "u8",
        "b_dot": "s8" if b_type.dtype is DType.INT8 else "u8",
        "scale_offset": 0,
        "scale_at": "col" if per_column else "0",  # the multiplier of output column `col`
    }

    def transposed(value: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(value).T)

    return Prepacked(
        b, transposed, params, scratch_bytes, template="kernels/qmatmul_columns.c.j2", bare_metal_only=True
    )


def _matmul_packable(op: OpInstance, a_type: TensorType, b: int, b_zp, requant, k: int, b_batch, a_zp) -> bool:
    """Whether the packed GEMV computes this matrix product: the convolution's conditions on B (as
    its weights), one B for every batch (a matrix: A's rows are then one run), one A zero point."""
    if len(op.input_types[b].shape) < 2 or math.prod(b_batch) != 1:
        return False
    if a_zp is not None and op.has_input(a_zp) and op.input_types[a_zp].size != 1:
        return False
    return _packable(op, a_type, b, b_zp, requant, k)


def _packed_matmul_offer(
    b: int, b_value: np.ndarray, a_type: TensorType, rows: int, n: int, k: int, per_column: bool
) -> Prepacked:
    """A matrix product with a constant int8 B on an application core: B^T packed as the
    convolution's weight panels ([n] channels of [k]: hetgen/ops/qpack.py), A's rows by blocks of
    qpack.GEMM_ROWS (hg_qg_gemm_rows: each panel's weights loaded once for the block's rows), or one
    GEMV a row where A has fewer (templates/kernels/qmatmul_packed.c.j2); a row's n outputs one
    contiguous run."""
    kg = qpack.kgroups(k)
    row_bytes = align(4 * kg + qpack.GEMV_SLACK)
    # rows of A at a time: a block of GEMM_ROWS (hg_qg_gemm_rows) where A has that many
    block = qpack.GEMM_ROWS if rows >= qpack.GEMM_ROWS else 1
    params = {
        **packed_kernels(b_value),
        "rows": rows,
        "row_block": block,
        "row_bytes": row_bytes,
        "kgroups": kg,
        "sums_offset": qpack.packed_bytes(1, n, k) - 4 * n,
        "a_signed": int(a_type.dtype is DType.INT8),
        "row_offset": 0,
        "const_offset": block * row_bytes,
        "scale_offset": block * row_bytes + align(4 * n),
        "column_scales_offset": block * row_bytes + 2 * align(4 * n),
        "column_scale": "j" if per_column else "0",  # the multiplier of column j
    }

    def layout(value: np.ndarray) -> np.ndarray:
        return qpack.pack_weights(np.asarray(value).reshape(k, n).T, 1)

    scratch = block * row_bytes + 3 * align(4 * n)
    return Prepacked(b, layout, params, scratch, template="kernels/qmatmul_packed.c.j2", hosted_only=True)


def lower_qlinear_matmul(op: OpInstance) -> Kernel:
    return lower_matmul(op, 0, 3, 2, 5, lambda n: _requant(op, op.output_types[0], 1, 4, 6, 7, n))


def lower_matmul_integer(op: OpInstance) -> Kernel:
    if op.epilogue:
        raise Unsupported("MatMulInteger with a fused activation")
    return lower_matmul(op, 0, 1, 2, 3, None)


# How the int8 products tile on an accelerator's SRAM (hetgen/spec/tile_shapes.py), as their float
# operators do: a convolution by output rows (with halos) and channels, a matrix product by rows and
# columns; the inputs that follow the output channels (columns) or rows are sliced with them.
QLINEAR_CONV_MAC = IntegerMac("Conv", 0, 3, per_channel=(4, 5, 8))  # w_scale, w_zero_point, bias
CONV_INTEGER_MAC = IntegerMac("Conv", 0, 1, per_channel=(3,))  # w_zero_point
QLINEAR_MATMUL_MAC = IntegerMac("MatMul", 0, 3, per_channel=(4, 5), per_row=(2,))  # b_scale, b_zp; a_zp
MATMUL_INTEGER_MAC = IntegerMac("MatMul", 0, 1, per_channel=(3,), per_row=(2,))  # b_zp; a_zp
QLINEAR_CONV_RESIDUAL = ResidualAdd("QLinearAdd", 9)  # its 9 inputs, then the residual's 5

DEFS = (
    OpDef(
        "QLinearConv",
        lower_qlinear_conv,
        fusable_epilogue=True,
        weight_input=3,
        integer_mac=QLINEAR_CONV_MAC,
        tiling=Tiling.WINDOW,
        float16_boundary=False,
        residual=QLINEAR_CONV_RESIDUAL,
    ),
    OpDef(
        "ConvInteger",
        lower_conv_integer,
        weight_input=1,
        integer_mac=CONV_INTEGER_MAC,
        tiling=Tiling.WINDOW,
        float16_boundary=False,
    ),
    OpDef(
        "QLinearMatMul",
        lower_qlinear_matmul,
        fusable_epilogue=True,
        integer_mac=QLINEAR_MATMUL_MAC,
        tiling=Tiling.MATRIX,
        float16_boundary=False,
    ),
    OpDef(
        "MatMulInteger",
        lower_matmul_integer,
        integer_mac=MATMUL_INTEGER_MAC,
        tiling=Tiling.MATRIX,
        float16_boundary=False,
    ),
)
