"""Det: the determinant of each square matrix in the last two dimensions, by LU decomposition with
partial pivoting, computed in double (float32 inputs gain the headroom numpy's LAPACK call has)."""

from __future__ import annotations

import math

from hetgen.ir import DType
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    x = op.input_types[0]
    if x.dtype not in (DType.FLOAT32, DType.FLOAT64):
        raise Unsupported(f"Det on {x.dtype.label}; accepted: float32, float64")
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise Unsupported(f"Det of {x}: the last two dimensions must be square")
    n = x.shape[-1]
    return Kernel(
        template="kernels/det.c.j2",
        params={
            "ctype": x.dtype.c_type,
            "n": n,
            "matrix_size": n * n,
            "count": math.prod(x.shape[:-2]),
            "empty": n == 0,
        },
        scratch_bytes=8 * max(n * n, 1),
        flops=math.prod(x.shape[:-2]) * n**3,
        bytes_accessed=x.nbytes + op.output_types[0].nbytes,
    )


DEFS = (OpDef("Det", lower),)
