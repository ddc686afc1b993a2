"""Quantized Add, Mul, Concat and GlobalAveragePool: onnxruntime's com.microsoft QLinearAdd,
QLinearMul, QLinearConcat and QLinearGlobalAveragePool (channels first), which the QDQ rewrite makes
of DequantizeLinear → Add/Mul/Concat/GlobalAveragePool → QuantizeLinear islands
(hetgen/frontend/qdq.py). Concat copies inputs already at the output's scale and requantizes the
others per element as their float path does.

Add and Mul compute, per element, exactly what the island computes in float32: dequantize each
operand ((float)(q - zero_point) * scale), add or multiply, divide by the output scale, round half
to even, saturate; so they agree bit for bit with the float path while reading and writing int8,
and operands of different scales are requantized on the way. GlobalAveragePool sums the integers
exactly and requantizes the sum as onnxruntime's MLAS does: (sum - count * x_zero_point) *
(x_scale / (y_scale * count)). Scales and zero points must be compile-time constants (they are,
in every quantized model; the rewrite only fires then).
"""

from __future__ import annotations

import numpy as np

from hetgen.ops._activation import DEFAULTS, activation_c
from hetgen.ops._common import c_float, input_arg_count, total_bytes
from hetgen.ops._elementwise import Operand, elementwise_kernel
from hetgen.ops._qadd import constant_scalar as _constant_scalar
from hetgen.ops._qadd import dequantized, quantized_result
from hetgen.ops._spatial import window
from hetgen.ops.base import Epilogue, Kernel, OpDef, OpInstance, Prepacked, Tiling, Unsupported, WorkRule
from hetgen.ops.pool import axis_tables
from hetgen.ops.qlinear import output_clamp
from hetgen.ops.quantize import Q_RANGE, QUANTIZED


def lower_binary(op: OpInstance) -> Kernel:
    a_type, b_type, y_type = op.input_types[0], op.input_types[3], op.output_types[0]
    for tensor_type in (a_type, b_type, y_type):
        if tensor_type.dtype not in QUANTIZED:
            raise Unsupported(f"{op.node.op} on {tensor_type.dtype.label}; accepted: int8, uint8")
    symbol = "+" if op.node.op == "QLinearAdd" else "*"
    a, b = dequantized(op, "a", a_type, 1, 2, "A"), dequantized(op, "b", b_type, 4, 5, "B")
    expression = quantized_result(op, f"{a} {symbol} {b}", y_type, 6, 7, output_clamp(op, y_type.dtype))
    return elementwise_kernel(
        [Operand("a", 0, a_type), Operand("b", 3, b_type)],
        y_type,
        expression,
        out_arg=input_arg_count(op),
        flops_per_element=6,
    )


def lower_global_average_pool(op: OpInstance) -> Kernel:
    x_type, y_type = op.input_types[0], op.output_types[0]
    if int(op.attr("channels_last", 0)):
        raise Unsupported("QLinearGlobalAveragePool with channels_last=1; accepted: channels first (NCHW)")
    if x_type.dtype not in QUANTIZED or y_type.dtype not in QUANTIZED or x_type.rank < 3:
        raise Unsupported(f"QLinearGlobalAveragePool of {x_type} to {y_type}; accepted: int8/uint8 N x C x spatial")
    count = x_type.size // (x_type.shape[0] * x_type.shape[1])
    x_scale, y_scale = np.float32(_constant_scalar(op, 1, "input scale")), np.float32(_constant_scalar(op, 3, "scale"))
    x_zero_point = int(_constant_scalar(op, 2, "input zero point", x_type.dtype.numpy))
    y_zero_point = int(_constant_scalar(op, 4, "output zero point", y_type.dtype.numpy))
    qmin, qmax = output_clamp(op, y_type.dtype)
    params = {
        "planes": x_type.shape[0] * x_type.shape[1],
        "count": count,
        "x_ctype": x_type.dtype.c_type,
        "y_ctype": y_type.dtype.c_type,
        "bias": -x_zero_point * count,
        "scale": c_float(x_scale / (y_scale * np.float32(count))),
        "y_zero_point": y_zero_point,
        "qmin": qmin,
        "qmax": qmax,
        "out_index": input_arg_count(op),
    }
    return Kernel("kernels/qpool.c.j2", params, flops=x_type.size, bytes_accessed=total_bytes(x_type, y_type))


def lower_concat(op: OpInstance) -> Kernel:
    """QLinearConcat (Y_scale, Y_zero_point, then X, X_scale, X_zero_point per input): inputs of the
    output's scale are copied, the others requantized as their float path does (dequantize, then
    quantize to the output's scale)."""
    y_type = op.output_types[0]
    if y_type.dtype not in QUANTIZED:
        raise Unsupported(f"QLinearConcat to {y_type.dtype.label}; accepted: int8, uint8")
    axis = int(op.attr("axis", 0)) % y_type.rank
    y_scale = np.float32(_constant_scalar(op, 0, "output scale"))
    y_zero_point = int(_constant_scalar(op, 1, "output zero point", y_type.dtype.numpy))
    qmin, qmax = output_clamp(op, y_type.dtype)
    outer = int(np.prod(y_type.shape[:axis], dtype=np.int64))
    row = y_type.size // max(1, outer)
    pieces, offset = [], 0
    for arg in range(2, len(op.input_types), 3):
        x_type = op.input_types[arg]
        if x_type.dtype is not y_type.dtype:
            raise Unsupported(f"QLinearConcat of {x_type.dtype.label} into {y_type.dtype.label}; accepted: one type")
        scale = np.float32(_constant_scalar(op, arg + 1, "input scale"))
        zero_point = int(_constant_scalar(op, arg + 2, "input zero point", x_type.dtype.numpy))
        size = x_type.size // max(1, outer)
        same = scale == y_scale and zero_point == y_zero_point
        value = f"(float)((int32_t)x[j] - {zero_point}) * {c_float(scale)} / {c_float(y_scale)}"
        pieces.append({"arg": arg, "size": size, "offset": offset, "verbatim": bool(same), "value": value})
        offset += size
    params = {
        "pieces": pieces,
        "outer": outer,
        "row": row,
        "ctype": y_type.dtype.c_type,
        "y_zero_point": y_zero_point,
        "qmin": qmin,
        "qmax": qmax,
        "out_index": input_arg_count(op),
    }
    return Kernel("kernels/qconcat.c.j2", params, flops=y_type.size, bytes_accessed=2 * y_type.nbytes)


def lower_average_pool(op: OpInstance) -> Kernel:
    """QLinearAveragePool (channels first): exact integer window sums, then sum * (x_scale /
    y_scale) / count quantized. Where a float average would land within an ulp of a rounding tie,
    the exact sum decides it by the rule (half to even) instead of by the float summation order."""
    x_type, y_type = op.input_types[0], op.output_types[0]
    if int(op.attr("channels_last", 0)):
        raise Unsupported("QLinearAveragePool with channels_last=1; accepted: channels first (NCHW)")
    if x_type.dtype not in QUANTIZED or y_type.dtype not in QUANTIZED or x_type.rank < 3:
        raise Unsupported(f"QLinearAveragePool of {x_type} to {y_type}; accepted: int8/uint8 N x C x spatial")
    kernel = op.attr("kernel_shape")
    if kernel is None:
        raise Unsupported("QLinearAveragePool without kernel_shape")
    win = window(op, x_type.shape[2:], y_type.shape[2:], tuple(kernel))
    x_scale, y_scale = np.float32(_constant_scalar(op, 1, "input scale")), np.float32(_constant_scalar(op, 3, "scale"))
    qmin, qmax = output_clamp(op, y_type.dtype)
    params = {
        **win.view(),
        "axes": tuple(axis_tables(win, i, bool(op.attr("count_include_pad", 0))) for i in range(3)),
        "planes": x_type.shape[0] * x_type.shape[1],
        "x_ctype": x_type.dtype.c_type,
        "y_ctype": y_type.dtype.c_type,
        "x_zero_point": int(_constant_scalar(op, 2, "input zero point", x_type.dtype.numpy)),
        "y_zero_point": int(_constant_scalar(op, 4, "output zero point", y_type.dtype.numpy)),
        "ratio": c_float(x_scale / y_scale),
        "qmin": qmin,
        "qmax": qmax,
        "out_index": input_arg_count(op),
        "scratch_index": input_arg_count(op) + 1,
    }
    offers = ()
    whole = win.kernel == win.in_shape and win.out_size == 1 and not any(win.pads_begin + win.pads_end)
    if whole and win.in_size * 256 < 2**31:  # the sum fits an int32
        # a global average on an application core: each plane's values summed in one run (the window
        # tables' loops cost more than the sums on small planes); bare metal keeps the windowed
        # kernel. The offer changes the kernel, not the (input scale's) layout.
        global_params = {"zero_point_sum": win.in_size * params["x_zero_point"]}
        template = "kernels/qavgpool_global.c.j2"
        offers = (Prepacked(1, np.asarray, global_params, 0, template=template, hosted_only=True),)
    return Kernel(
        "kernels/qavgpool.c.j2",
        params,
        prepacked=offers,
        scratch_bytes=4 * win.out_shape[2],
        flops=y_type.size * win.kernel_size,
        bytes_accessed=total_bytes(x_type, y_type),
    )


def lower_lookup(op: OpInstance) -> Kernel:
    """QLinearSigmoid and QLinearLeakyRelu: a table over every input level, each entry the float
    path's result (the activation's C expression from hetgen/ops/_activation.py, as the float
    kernel computes it), so the table agrees with DequantizeLinear → activation → QuantizeLinear."""
    x_type, y_type = op.input_types[0], op.output_types[0]
    if x_type.dtype not in QUANTIZED or y_type.dtype not in QUANTIZED:
        raise Unsupported(f"{op.node.op} of {x_type.dtype.label} to {y_type.dtype.label}; accepted: int8, uint8")
    kind = op.node.op.removeprefix("QLinear")
    alpha = float(op.attr("alpha", DEFAULTS.get(kind, (0.0, 0.0))[0]))
    x_min, x_max = Q_RANGE[x_type.dtype]
    qmin, qmax = output_clamp(op, y_type.dtype)
    params = {
        "op": op.node.op,
        "activation": kind,
        "size": x_type.size,
        "levels": x_max - x_min + 1,
        "x_min": x_min,
        "x_max": x_max,
        "x_ctype": x_type.dtype.c_type,
        "y_ctype": y_type.dtype.c_type,
        "x_scale": c_float(np.float32(_constant_scalar(op, 1, "input scale"))),
        "x_zero_point": int(_constant_scalar(op, 2, "input zero point", x_type.dtype.numpy)),
        "y_scale": c_float(np.float32(_constant_scalar(op, 3, "output scale"))),
        "y_zero_point": int(_constant_scalar(op, 4, "output zero point", y_type.dtype.numpy)),
        "expression": activation_c(Epilogue(kind, alpha=alpha), "v"),
        "qmin": qmin,
        "qmax": qmax,
        "out_index": input_arg_count(op),
    }
    return Kernel("kernels/qlut.c.j2", params, flops=x_type.size, bytes_accessed=total_bytes(x_type, y_type))


CONTRIB = "com.microsoft"  # onnxruntime's contrib operators
DEFS = (
    OpDef(
        "QLinearAdd", lower_binary, fusable_epilogue=True, tiling=Tiling.CHUNKS, domain=CONTRIB, float16_boundary=False
    ),
    OpDef(
        "QLinearMul", lower_binary, fusable_epilogue=True, tiling=Tiling.CHUNKS, domain=CONTRIB, float16_boundary=False
    ),
    OpDef(
        "QLinearGlobalAveragePool",
        lower_global_average_pool,
        work=WorkRule.GLOBAL,
        tiling=Tiling.CHANNELS,
        domain=CONTRIB,
        float16_boundary=False,
    ),
    OpDef("QLinearConcat", lower_concat, domain=CONTRIB, float16_boundary=False),
    OpDef(
        "QLinearAveragePool",
        lower_average_pool,
        work=WorkRule.WINDOW,
        tiling=Tiling.WINDOW,
        domain=CONTRIB,
        float16_boundary=False,
    ),
    OpDef("QLinearSigmoid", lower_lookup, tiling=Tiling.CHUNKS, domain=CONTRIB, float16_boundary=False),
    OpDef("QLinearLeakyRelu", lower_lookup, tiling=Tiling.CHUNKS, domain=CONTRIB, float16_boundary=False),
)
