"""Gather, GatherElements and GatherND, with indices read at run time (int32 or int64, negative ones count
from the end). An index outside the axis gives zeros rather than reading out of bounds (ONNX
leaves it undefined).
"""

from __future__ import annotations

import math

from hetgen.ir import DType
from hetgen.ops._common import BITS_TYPE, contiguous_strides, index_expr, loops_for, normalize_axis
from hetgen.ops.base import InputRoles, Kernel, OpDef, OpInstance, Unsupported


def _index_type(op: OpInstance) -> DType:
    dtype = op.input_types[1].dtype
    if dtype not in (DType.INT32, DType.INT64):
        raise Unsupported(f"{op.node.op} indices of type {dtype.label}; accepted: int32, int64")
    return dtype


def lower_gather(op: OpInstance) -> Kernel:
    data, indices = op.input_types[:2]
    out_type = op.output_types[0]
    axis = normalize_axis(int(op.attr("axis", 0)), data.rank)
    inner = math.prod(data.shape[axis + 1 :])
    return Kernel(
        template="kernels/gather.c.j2",
        params={
            "empty": out_type.size == 0,
            "ctype": BITS_TYPE[data.dtype.itemsize],
            "index_ctype": _index_type(op).c_type,
            "outer": math.prod(data.shape[:axis]),
            "n": data.shape[axis],
            "m": indices.size,
            "inner": inner,
            "row_bytes": inner * data.dtype.itemsize,
        },
        bytes_accessed=out_type.nbytes * 2 + indices.nbytes,
    )


def lower_gather_elements(op: OpInstance) -> Kernel:
    data, indices = op.input_types[:2]
    out_type = op.output_types[0]
    axis = normalize_axis(int(op.attr("axis", 0)), data.rank)
    loops = loops_for(indices.shape)
    data_strides = list(contiguous_strides(data.shape))
    axis_stride = data_strides[axis]
    data_strides[axis] = 0
    return Kernel(
        template="kernels/gather_elements.c.j2",
        params={
            "empty": out_type.size == 0,
            "ctype": BITS_TYPE[data.dtype.itemsize],
            "index_ctype": _index_type(op).c_type,
            "loops": loops,
            "n": data.shape[axis],
            "axis_stride": axis_stride,
            "index": index_expr(loops, contiguous_strides(indices.shape)),
            "base": index_expr(loops, data_strides),
        },
        bytes_accessed=out_type.nbytes * 2 + indices.nbytes,
    )


def lower_gather_nd(op: OpInstance) -> Kernel:
    data, indices = op.input_types[:2]
    out_type = op.output_types[0]
    batch_dims = int(op.attr("batch_dims", 0))
    depth = indices.shape[-1]
    if batch_dims + depth > data.rank:
        raise Unsupported(f"GatherND index depth {depth} with {batch_dims} batch dims exceeds rank {data.rank}")
    strides = contiguous_strides(data.shape)
    block = math.prod(data.shape[batch_dims + depth :])
    return Kernel(
        template="kernels/gather_nd.c.j2",
        params={
            "empty": out_type.size == 0,
            "ctype": BITS_TYPE[data.dtype.itemsize],
            "index_ctype": _index_type(op).c_type,
            "batches": math.prod(data.shape[:batch_dims]),
            "batch_stride": math.prod(data.shape[batch_dims:]),
            "count": math.prod(indices.shape[batch_dims:-1]),
            "depth": depth,
            "axes": [{"extent": data.shape[batch_dims + j], "stride": strides[batch_dims + j]} for j in range(depth)],
            "block": block,
            "block_bytes": block * data.dtype.itemsize,
        },
        bytes_accessed=out_type.nbytes * 2 + indices.nbytes,
    )


DEFS = (
    OpDef("Gather", lower_gather, input_roles=InputRoles("first", indices=1, indexed_axis="axis")),
    OpDef("GatherElements", lower_gather_elements, input_roles=InputRoles("first", indices=1, indexed_axis="axis")),
    OpDef("GatherND", lower_gather_nd, input_roles=InputRoles("first", indices=1)),
)
