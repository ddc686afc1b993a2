"""TopK along a constant axis, k a compile-time constant: the k largest (or smallest) of each slice,
in order, ties to the lower index (as ONNX asks). Selection by k passes over the slice: O(n k),
which suits the small k of classifiers' heads and detection post-processing."""

from __future__ import annotations

import math

from hetgen.ops._common import FLOAT_DTYPES, INTEGER_DTYPES, normalize_axis, require_dtype, scalar_value
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    dtype = require_dtype(x_type.dtype, (*FLOAT_DTYPES, *INTEGER_DTYPES), "TopK")
    k_value = op.constant(1)
    if k_value is None:
        raise Unsupported("TopK k must be a compile-time constant")
    shape = x_type.shape
    axis = normalize_axis(int(op.attr("axis", -1)), len(shape))
    n, k = shape[axis], int(scalar_value(k_value, "TopK k"))
    if not 0 <= k <= n:
        raise Unsupported(f"TopK k={k} for an axis of {n} elements; accepted: 0 to {n}")
    inputs = len(op.node.inputs)
    return Kernel(
        template="kernels/topk.c.j2",
        params={
            "ctype": dtype.c_type,
            "outer": math.prod(shape[:axis]),
            "inner": math.prod(shape[axis + 1 :]),
            "n": n,
            "k": k,
            "row_stride": math.prod(shape[axis:]),
            "better": ">" if int(op.attr("largest", 1)) else "<",
            "values_arg": inputs if op.node.outputs[0] else None,
            "indices_arg": inputs + 1 if len(op.node.outputs) > 1 and op.node.outputs[1] else None,
            "scratch_arg": inputs + len(op.node.outputs),
        },
        scratch_bytes=max(n, 1),
        flops=x_type.size * max(k, 1),
        bytes_accessed=x_type.nbytes + sum(t.nbytes for t in op.output_types),
    )


DEFS = (OpDef("TopK", lower, const_inputs=(1,)),)
