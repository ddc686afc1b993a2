"""Softmax and LogSoftmax.

Opset >= 13: along one axis. Opset < 13: the input is coerced to 2-D at `axis` and normalised
along the flattened trailing dimensions. One entry per meaning (`since`); the registry picks the
one for the node's opset (`Node.opset`), the opset-13 one when it is not known. The frontend
rewrites the older form into the newer (hetgen/frontend/normalize.py), so only a graph built
without it reaches `lower_coerced`. The view is (outer, length, inner): rows of `length` values
`inner` apart.
"""

from __future__ import annotations

import math

from hetgen.ops import _parallel
from hetgen.ops._common import input_arg_count, normalize_axis, require_float32, total_bytes
from hetgen.ops.base import Kernel, OpDef, OpInstance

AXIS_SEMANTICS_OPSET = 13


def lower(op: OpInstance) -> Kernel:
    return _lower(op, coerce_2d=False)


def lower_coerced(op: OpInstance) -> Kernel:
    return _lower(op, coerce_2d=True)


def _lower(op: OpInstance, coerce_2d: bool) -> Kernel:
    require_float32(op)
    shape = op.input_types[0].shape
    rank = max(len(shape), 1)
    axis = normalize_axis(int(op.attr("axis", 1 if coerce_2d else -1)), rank, op=op)
    if coerce_2d:
        outer, length, inner = math.prod(shape[:axis]), math.prod(shape[axis:]), 1
    else:
        outer, length, inner = math.prod(shape[:axis]), (shape[axis] if shape else 1), math.prod(shape[axis + 1 :])
    size = outer * length * inner
    # rows where they are contiguous; else runs of 16 inner columns (each has its own scratch slots)
    split = _parallel.split(outer, 4 * length) if inner == 1 else _parallel.split(inner, 4 * outer * length, 16)
    params = {
        "log": op.node.op == "LogSoftmax",
        "outer": outer,
        "length": length,
        "inner": inner,
        "row_stride": length * inner,
        "out_index": input_arg_count(op),
        "scratch_index": input_arg_count(op) + 1,
        "split": split,
    }
    return Kernel(
        template="kernels/softmax.c.j2",
        params=params,
        scratch_bytes=0 if inner == 1 else 8 * inner,
        flops=5 * size,
        bytes_accessed=total_bytes(*op.input_types, *op.output_types),
        helpers=(_parallel.HELPER,) if split else (),
        parallel=_parallel.tasks_of(split),
    )


DEFS = (
    OpDef("LogSoftmax", lower_coerced),
    OpDef("LogSoftmax", lower, since=AXIS_SEMANTICS_OPSET),
    OpDef("Softmax", lower_coerced),
    OpDef("Softmax", lower, since=AXIS_SEMANTICS_OPSET),
)
