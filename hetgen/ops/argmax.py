"""ArgMax / ArgMin along one axis (keepdims, select_last_index), int64 indices out.

The input is viewed as (outer, n, inner). With inner == 1 each output scans its n contiguous
candidates; otherwise the n rows of `inner` elements are streamed in order, the best values so far
kept in the scratch buffer, so the loops are unit-stride. A NaN counts as the largest (and
smallest) value, as numpy's argmax/argmin treat it.
"""

from __future__ import annotations

import math

from hetgen.ir import DType
from hetgen.ops._common import FLOAT_DTYPES, INTEGER_DTYPES, normalize_axis, require_dtype
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def _better(name: str, last: bool, is_float: bool) -> str:
    """C condition (of `v` and `b`) under which candidate `v` replaces the best so far `b`."""
    compare = (">" if name == "ArgMax" else "<") + ("=" if last else "")
    if not is_float:
        return f"v {compare} b"
    if last:  # the last NaN wins
        return f"v {compare} b || v != v"
    return f"v {compare} b || (v != v && b == b)"  # the first NaN wins


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    dtype = require_dtype(x_type.dtype, (*FLOAT_DTYPES, *INTEGER_DTYPES, DType.BOOL), op.node.op)
    shape = x_type.shape
    axis = normalize_axis(int(op.attr("axis", 0)), len(shape))
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    last = bool(op.attr("select_last_index", 0))
    out_type = op.output_types[0]
    if n == 0 and out_type.size:
        raise Unsupported(f"{op.node.op} over an empty axis")
    return Kernel(
        template="kernels/argmax.c.j2",
        params={
            "empty": out_type.size == 0,
            "ctype": dtype.c_type,
            "out_arg": len(op.node.inputs),
            "outer": outer,
            "n": n,
            "inner": inner,
            "row_stride": n * inner,
            "better": _better(op.node.op, last, dtype.is_float),
            "scratch_arg": len(op.node.inputs) + 1,
        },
        scratch_bytes=inner * dtype.itemsize if inner > 1 else 0,
        flops=x_type.size,
        bytes_accessed=x_type.nbytes + out_type.nbytes,
    )


DEFS = (OpDef("ArgMax", lower), OpDef("ArgMin", lower))
