"""Where: pick from X or Y by a boolean condition, all three broadcast (numpy rules); any dtype."""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops._elementwise import Operand, elementwise_kernel
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    cond, x, y = op.input_types[:3]
    if cond.dtype is not DType.BOOL:
        raise Unsupported(f"Where condition of type {cond.dtype.label}; accepted: bool")
    if x.dtype is not y.dtype:
        raise Unsupported("Where on mixed value types")
    operands = [Operand("c", 0, cond), Operand("x", 1, x), Operand("y", 2, y)]
    return elementwise_kernel(operands, op.output_types[0], "c ? x : y", out_arg=3)


DEFS = (OpDef("Where", lower),)
