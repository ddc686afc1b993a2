"""CumSum and CumProd along a constant axis (exclusive, reverse): rows of the input, viewed as
(outer, n, inner), are added in order, so the inner loop is unit-stride."""

from __future__ import annotations

import math

from hetgen.ops._common import FLOAT_DTYPES, INTEGER_DTYPES, UNSIGNED, normalize_axis, require_dtype, scalar_value
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    name = op.node.op
    dtype = require_dtype(x_type.dtype, (*FLOAT_DTYPES, *INTEGER_DTYPES), name)
    axis_value = op.constant(1)
    if axis_value is None:
        raise Unsupported(f"{name} axis must be a compile-time constant")
    shape = x_type.shape
    axis = normalize_axis(int(scalar_value(axis_value, f"{name} axis")), len(shape))
    n = shape[axis]
    reverse = bool(op.attr("reverse", 0))
    sign = "*" if name == "CumProd" else "+"
    # integers wrap around, as numpy's, through the unsigned type (no undefined overflow)
    add = f"a {sign} b" if dtype.is_float else f"({dtype.c_type})(({UNSIGNED[dtype]})a {sign} ({UNSIGNED[dtype]})b)"
    return Kernel(
        template="kernels/cumsum.c.j2",
        params={
            "empty": x_type.size == 0,
            "ctype": dtype.c_type,
            "outer": math.prod(shape[:axis]),
            "n": n,
            "inner": math.prod(shape[axis + 1 :]),
            "exclusive": bool(op.attr("exclusive", 0)),
            # the row of step s, and of the step before it
            "row": f"({n - 1} - s)" if reverse else "s",
            "previous": f"({n} - s)" if reverse else "(s - 1)",
            "first": n - 1 if reverse else 0,
            "slab": n * math.prod(shape[axis + 1 :]),  # one outer index's elements
            "first_at": (n - 1 if reverse else 0) * math.prod(shape[axis + 1 :]),  # the first step's row
            "add": add,
            "identity": "1" if name == "CumProd" else "0",
            "out_arg": len(op.node.inputs),
        },
        flops=x_type.size,
        bytes_accessed=2 * x_type.nbytes,
    )


DEFS = (OpDef("CumSum", lower, const_inputs=(1,)), OpDef("CumProd", lower, const_inputs=(1,)))
