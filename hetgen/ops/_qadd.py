"""The quantized Add's arithmetic as C, in one place: onnxruntime's QLinearAdd (and QLinearMul) kernel
(hetgen/ops/qelementwise.py) and a QLinearConv that does its residual QLinearAdd itself
(hetgen/ops/qlinear.py, the kernel table's residual unit: hetgen/spec/patterns.py) compute the same
expression, so the fused kernel is the two separate ones bit for bit.

Each operand is dequantized as DequantizeLinear does ((float)(q - zero_point) * scale), the two are
added (or multiplied) in float32, divided by the output scale, rounded half to even and saturated:
what a DQ → Add → Q island computes in float32. The scales and zero points are compile-time
constants (in every model onnxruntime's quantizer writes), baked into the expression.
"""

from __future__ import annotations

import numpy as np

from hetgen.ir import TensorType
from hetgen.ops._common import c_float
from hetgen.ops.base import OpInstance, Unsupported


def constant_scalar(op: OpInstance, index: int, what: str, dtype=None):
    """The one value of constant input `index` (an omitted zero point: 0 of `dtype`)."""
    value = op.constant(index) if op.has_input(index) else (np.zeros((), dtype) if dtype is not None else None)
    if value is None or value.size != 1:
        raise Unsupported(f"{op.node.op} {what} must be a compile-time constant scalar")
    return value.reshape(-1)[0]


def dequantized(op: OpInstance, var: str, tensor: TensorType, scale: int, zero_point: int, what: str) -> str:
    """The C expression of the integer `var` (of `tensor`'s type) dequantized by the constant inputs
    `scale` and `zero_point`."""
    scale_value = np.float32(constant_scalar(op, scale, f"{what} scale"))
    zero = int(constant_scalar(op, zero_point, f"{what} zero point", tensor.dtype.numpy))
    return f"(float)((int32_t){var} - {zero}) * {c_float(scale_value)}"


def quantized_result(
    op: OpInstance, value: str, y_type: TensorType, scale: int, zero_point: int, clamp: tuple[int, int]
) -> str:
    """`value` (a float C expression) quantized to `y_type` by the constant inputs `scale` and
    `zero_point`, saturated to `clamp` (the type's range, narrowed by fused activations)."""
    y_scale = np.float32(constant_scalar(op, scale, "output scale"))
    y_zero_point = int(constant_scalar(op, zero_point, "output zero point", y_type.dtype.numpy))
    qmin, qmax = clamp
    return f"({y_type.dtype.c_type})hg_quantize_scaled(({value}) / {c_float(y_scale)}, {y_zero_point}, {qmin}, {qmax})"
