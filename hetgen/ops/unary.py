"""Elementwise unary operators: one template, the C expression chosen per operator."""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported

# op -> C expression of `x` (float32)
FLOAT_EXPRESSIONS = {
    "Relu": "x > 0.0f ? x : 0.0f",
}


def lower(op: OpInstance) -> Kernel:
    (x_type,) = op.input_types[:1]
    if x_type.dtype is not DType.FLOAT32:
        raise Unsupported(f"{op.node.op} on {x_type.dtype.label}; accepted: float32")
    size = x_type.size
    return Kernel(
        template="kernels/unary.c.j2",
        params={"expression": FLOAT_EXPRESSIONS[op.node.op], "size": size, "ctype": "float"},
        flops=size,
        bytes_accessed=2 * x_type.nbytes,
    )


DEFS = tuple(OpDef(op, lower) for op in sorted(FLOAT_EXPRESSIONS))
