"""Range: out[i] = start + i * delta, from scalar inputs read at run time (the output length is the
static shape). Floats are computed in double and rounded once, as numpy.arange does."""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops._common import require_dtype
from hetgen.ops.base import Kernel, OpDef, OpInstance


def lower(op: OpInstance) -> Kernel:
    out_type = op.output_types[0]
    dtype = require_dtype(
        out_type.dtype, (DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64, DType.INT8, DType.UINT8), "Range"
    )
    wide = "double" if dtype.is_float else "int64_t"
    return Kernel(
        template="kernels/range.c.j2",
        params={"ctype": dtype.c_type, "wide": wide, "size": out_type.size},
        flops=2 * out_type.size,
        bytes_accessed=out_type.nbytes,
    )


DEFS = (OpDef("Range", lower, const_inputs=(0, 1, 2)),)
