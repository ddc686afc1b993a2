"""ArgMax / ArgMin along one axis (keepdims, select_last_index), int64 indices out.

The input is viewed as (outer, n, inner); each output scans its n candidates at stride `inner`.
A NaN counts as the largest (and smallest) value, as numpy's argmax/argmin treat it.
"""

from __future__ import annotations

import math

from hetgen.ir import DType
from hetgen.ops._cexpr import FLOAT_DTYPES, INTEGER_DTYPES, require_dtype
from hetgen.ops._layout import normalize_axis
from hetgen.ops.base import Kernel, OpDef, OpInstance


def _better(name: str, last: bool, is_float: bool) -> str:
    """C condition under which candidate `v` replaces the current `best`."""
    compare = (">" if name == "ArgMax" else "<") + ("=" if last else "")
    if not is_float:
        return f"v {compare} best"
    if last:  # the last NaN wins
        return f"v {compare} best || v != v"
    return f"v {compare} best || (v != v && best == best)"  # the first NaN wins


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    dtype = require_dtype(x_type.dtype, (*FLOAT_DTYPES, *INTEGER_DTYPES, DType.BOOL), op.node.op)
    shape = x_type.shape
    axis = normalize_axis(int(op.attr("axis", 0)), len(shape))
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    last = bool(op.attr("select_last_index", 0))
    out_type = op.output_types[0]
    return Kernel(
        template="kernels/argmax.c.j2",
        params={
            "empty": out_type.size == 0,
            "ctype": dtype.c_type,
            "out_arg": len(op.node.inputs),
            "outer": outer,
            "n": n,
            "inner": inner,
            "better": _better(op.node.op, last, dtype.is_float),
        },
        flops=x_type.size,
        bytes_accessed=x_type.nbytes + out_type.nbytes,
    )


DEFS = (OpDef("ArgMax", lower), OpDef("ArgMin", lower))
