"""OneHot, EyeLike and Hardmax: outputs that are mostly one value with another at computed places.

OneHot reads its indices and its (off, on) values at run time; the depth must be a constant.
EyeLike is a fill and a strided fill of its diagonal. Hardmax marks the first largest element along
its axis with 1.
"""

from __future__ import annotations

import math

import numpy as np

from hetgen.ops._common import (
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    element_view,
    normalize_axis,
    require_dtype,
    scalar_value,
    view_strides,
)
from hetgen.ops._copy import Fill, copy_kernel
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower_one_hot(op: OpInstance) -> Kernel:
    indices, out_type = op.input_types[0], op.output_types[0]
    depth_value = op.constant(1)
    if depth_value is None:
        raise Unsupported("OneHot depth must be a compile-time constant")
    depth = int(scalar_value(depth_value, "OneHot depth"))
    index_dtype = require_dtype(indices.dtype, (*FLOAT_DTYPES, *INTEGER_DTYPES), "OneHot indices")
    axis = normalize_axis(int(op.attr("axis", -1)), indices.rank + 1)
    return Kernel(
        template="kernels/one_hot.c.j2",
        params={
            "empty": out_type.size == 0,
            "ctype": out_type.dtype.c_type,
            "index_ctype": index_dtype.c_type,
            "index_is_float": index_dtype.is_float,
            "index_to_int": "hg_f2i64" if index_dtype.is_float else "(int64_t)",
            "outer": math.prod(indices.shape[:axis]),
            "depth": depth,
            "inner": math.prod(indices.shape[axis:]),
        },
        bytes_accessed=out_type.nbytes + indices.nbytes * depth,
    )


def lower_eye_like(op: OpInstance) -> Kernel:
    out_type = op.output_types[0]
    if out_type.rank != 2:
        raise Unsupported(f"EyeLike on rank {out_type.rank}; accepted: 2")
    root = element_view(out_type.shape)
    diagonal = np.diagonal(root, offset=int(op.attr("k", 0)))
    strides, offset = view_strides(diagonal, root)
    steps = [
        Fill(1, (out_type.size,), (1,), 0, out_type.dtype),
        Fill(1, diagonal.shape, strides, 1, out_type.dtype, dst_offset=offset),
    ]
    return copy_kernel(steps, out_type.dtype.itemsize)


def lower_hardmax(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    dtype = require_dtype(x_type.dtype, FLOAT_DTYPES, "Hardmax")
    axis = normalize_axis(int(op.attr("axis", -1)), x_type.rank)
    shape = x_type.shape
    return Kernel(
        template="kernels/hardmax.c.j2",
        params={
            "empty": x_type.size == 0 or shape[axis] == 0,
            "ctype": dtype.c_type,
            "outer": math.prod(shape[:axis]),
            "n": shape[axis],
            "inner": math.prod(shape[axis + 1 :]),
            "row_stride": math.prod(shape[axis:]),
        },
        flops=x_type.size,
        bytes_accessed=2 * x_type.nbytes,
    )


DEFS = (
    OpDef("OneHot", lower_one_hot, const_inputs=(1,)),
    OpDef("EyeLike", lower_eye_like),
    OpDef("Hardmax", lower_hardmax),
)
