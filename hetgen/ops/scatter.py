"""ScatterElements and ScatterND (reduction none/add/mul/max/min): the output starts as a copy of
the data, then each update lands where its run-time index says. Negative indices count from the
end; an index outside the axis is skipped (ONNX leaves it undefined)."""

from __future__ import annotations

import math

from hetgen.ir import DType
from hetgen.ops._common import (
    BITS_TYPE,
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    UNSIGNED,
    contiguous_strides,
    index_expr,
    loops_for,
    normalize_axis,
)
from hetgen.ops.base import InputRoles, Kernel, OpDef, OpInstance, Unsupported


def _combine(reduction: str, dtype: DType) -> tuple[str, str]:
    """(C type the elements move as, expression of the old value `a` and the update `u`)."""
    if reduction == "none":
        return BITS_TYPE[dtype.itemsize], "u"
    if dtype not in (*FLOAT_DTYPES, *INTEGER_DTYPES):
        raise Unsupported(f"scatter reduction {reduction!r} on {dtype.label}")
    wrap = UNSIGNED.get(dtype)
    expressions = {
        "add": "a + u" if dtype.is_float else f"({dtype.c_type})(({wrap})a + ({wrap})u)",
        "mul": "a * u" if dtype.is_float else f"({dtype.c_type})(({wrap})a * ({wrap})u)",
        "max": "u > a ? u : a",
        "min": "u < a ? u : a",
    }
    if reduction not in expressions:
        raise Unsupported(f"scatter reduction {reduction!r}; accepted: none, add, mul, max, min")
    return dtype.c_type, expressions[reduction]


def _index_ctype(op: OpInstance) -> str:
    dtype = op.input_types[1].dtype
    if dtype not in (DType.INT32, DType.INT64):
        raise Unsupported(f"{op.node.op} indices of type {dtype.label}; accepted: int32, int64")
    return dtype.c_type


def lower_scatter_elements(op: OpInstance) -> Kernel:
    data, indices, updates = op.input_types[:3]
    axis = normalize_axis(int(op.attr("axis", 0)), data.rank)
    ctype, combine = _combine(op.attr("reduction", "none"), data.dtype)
    loops = loops_for(indices.shape)
    data_strides = list(contiguous_strides(data.shape))
    axis_stride, data_strides[axis] = data_strides[axis], 0
    return Kernel(
        template="kernels/scatter_elements.c.j2",
        params={
            "ctype": ctype,
            "index_ctype": _index_ctype(op),
            "data_bytes": data.nbytes,
            "scatter": indices.size > 0,
            "loops": loops,
            "index": index_expr(loops, contiguous_strides(indices.shape)),
            "base": index_expr(loops, data_strides),
            "n": data.shape[axis],
            "axis_stride": axis_stride,
            "combine": combine,
        },
        bytes_accessed=2 * data.nbytes + updates.nbytes + indices.nbytes,
    )


def lower_scatter_nd(op: OpInstance) -> Kernel:
    data, indices, updates = op.input_types[:3]
    depth = indices.shape[-1]
    if depth > data.rank:
        raise Unsupported(f"ScatterND index depth {depth} exceeds rank {data.rank}")
    ctype, combine = _combine(op.attr("reduction", "none"), data.dtype)
    strides = contiguous_strides(data.shape)
    return Kernel(
        template="kernels/scatter_nd.c.j2",
        params={
            "ctype": ctype,
            "index_ctype": _index_ctype(op),
            "data_bytes": data.nbytes,
            "count": math.prod(indices.shape[:-1]) if data.size else 0,
            "depth": depth,
            "axes": [{"extent": data.shape[j], "stride": strides[j]} for j in range(depth)],
            "block": math.prod(data.shape[depth:]),
            "combine": combine,
            "replace": combine == "u",
            "block_bytes": math.prod(data.shape[depth:]) * data.dtype.itemsize,
        },
        bytes_accessed=2 * data.nbytes + updates.nbytes + indices.nbytes,
    )


INDEXED_BY_AXIS = InputRoles(indices=1, indexed_axis="axis")
DEFS = (
    OpDef("ScatterElements", lower_scatter_elements, input_roles=INDEXED_BY_AXIS),
    OpDef("ScatterND", lower_scatter_nd, input_roles=InputRoles(indices=1)),
    OpDef(
        "Scatter", lower_scatter_elements, input_roles=INDEXED_BY_AXIS
    ),  # opset 9-10; the frontend renames it ScatterElements
)
