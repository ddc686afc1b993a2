"""Trilu: keep the upper (or lower) triangle of the last two axes from diagonal k; each row is one
copied run and one zeroed run, any dtype."""

from __future__ import annotations

import math

from hetgen.ops._common import scalar_value
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    if x_type.rank < 2:
        raise Unsupported(f"Trilu on rank {x_type.rank}; accepted: 2 or more")
    k = 0
    if op.has_input(1):
        value = op.constant(1)
        if value is None:
            raise Unsupported("Trilu k must be a compile-time constant")
        k = int(scalar_value(value, "Trilu k"))
    *batch, rows, cols = x_type.shape
    return Kernel(
        template="kernels/trilu.c.j2",
        params={
            "empty": x_type.size == 0,
            "batch": math.prod(batch),
            "rows": rows,
            "cols": cols,
            "matrices_rows": math.prod(batch) * rows,
            "row_bytes": cols * x_type.dtype.itemsize,
            "upper": bool(op.attr("upper", 1)),
            # upper: a row keeps columns [i + k, cols); lower: [0, i + k + 1)
            "cut": k if op.attr("upper", 1) else k + 1,
            "itemsize": x_type.dtype.itemsize,
            "out_arg": len(op.node.inputs),
        },
        bytes_accessed=2 * x_type.nbytes,
    )


DEFS = (OpDef("Trilu", lower, const_inputs=(1,)),)
