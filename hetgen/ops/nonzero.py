"""NonZero on run-time values: the indices of the non-zero elements, [rank, count] with count known
only at run time, written compactly into a buffer of its bound [rank, size] (hetgen/bounded.py).

With a constant input the frontend folds the node instead, and its output has a static shape.
"""

from __future__ import annotations

from hetgen.ir import DType, TensorType
from hetgen.ops._common import contiguous_strides
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def infer(op: OpInstance) -> tuple[TensorType, ...]:
    """The bound: every element non-zero."""
    x = op.input_types[0]
    return (TensorType(DType.INT64, (len(x.shape), x.size)),)


def lower(op: OpInstance) -> Kernel:
    x = op.input_types[0]
    if len(op.output_types) != 2:
        raise Unsupported("NonZero whose output another operator reads: its length is known only at run time")
    rank = len(x.shape)
    return Kernel(
        template="kernels/nonzero.c.j2",
        params={
            "ctype": x.dtype.c_type,
            "size": x.size,
            "rank": rank,
            "shape": x.shape,
            "strides": contiguous_strides(x.shape),
        },
        flops=2 * x.size,
        bytes_accessed=x.nbytes + 8 * max(rank, 1) * x.size,
    )


DEFS = (OpDef("NonZero", lower, infer=infer, bounded=True),)
