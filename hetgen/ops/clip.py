"""Clip: bounds from attributes (opset < 11) or from the optional `min`/`max` inputs.

A constant bound is baked into the expression; a bound computed at run time is read as a
broadcast scalar. `min(max(x, lo), hi)` as numpy.clip: NaN passes through, and lo > hi gives hi.
"""

from __future__ import annotations

from hetgen.ops._activation import clip
from hetgen.ops._common import FLOAT_DTYPES, INTEGER_DTYPES, highest, literal, lowest, require_dtype, scalar_value
from hetgen.ops._elementwise import Operand, elementwise_kernel
from hetgen.ops.base import Kernel, OpDef, OpInstance, Tiling


def _bound(op: OpInstance, index: int, attr: str, default: str, operands: list, var: str) -> str | None:
    """The C spelling of one bound, or None when there is none."""
    dtype = op.input_types[0].dtype
    if op.has_input(index):
        value = op.constant(index)
        if value is None:
            operands.append(Operand(var, index, op.input_types[index]))
            return var
        return literal(scalar_value(value, f"Clip {attr}"), dtype)
    if op.node.has_attr(attr):
        return literal(float(op.attr(attr)), dtype)
    return None if default is None else default


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    dtype = require_dtype(x_type.dtype, (*FLOAT_DTYPES, *INTEGER_DTYPES), "Clip")
    operands = [Operand("x", 0, x_type)]
    lo = _bound(op, 1, "min", None, operands, "lo")
    hi = _bound(op, 2, "max", None, operands, "hi")
    # A bound at the dtype's limit changes nothing; the expression is the fused epilogue's.
    expression = clip("x", None if lo == lowest(dtype) else lo, None if hi == highest(dtype) else hi)
    return elementwise_kernel(
        operands, op.output_types[0], expression, out_arg=len(op.node.inputs), flops_per_element=2
    )


DEFS = (OpDef("Clip", lower, tiling=Tiling.CHUNKS),)
