"""Shape, Size and ConstantOfShape: values known from static shapes and attributes. The frontend
usually folds them; the kernels exist so that a graph that keeps them still runs."""

from __future__ import annotations

import numpy as np

from hetgen.ir import DType
from hetgen.ops._copy import Data, Fill, copy_kernel
from hetgen.ops.base import Kernel, OpDef, OpInstance


def lower_shape(op: OpInstance) -> Kernel:
    shape = op.input_types[0].shape
    start = int(op.attr("start", 0))
    end = op.attr("end", None)
    values = shape[start : (len(shape) if end is None else int(end))]
    return copy_kernel([Data(1, tuple(values), DType.INT64)], 8)


def lower_size(op: OpInstance) -> Kernel:
    return copy_kernel([Data(1, (op.input_types[0].size,), DType.INT64)], 8)


def lower_constant_of_shape(op: OpInstance) -> Kernel:
    out_type = op.output_types[0]
    value = op.attr("value", None)
    scalar = 0 if value is None else np.asarray(value).reshape(-1)[0].item()
    return copy_kernel([Fill(1, (out_type.size,), (1,), scalar, out_type.dtype)], out_type.dtype.itemsize)


DEFS = (
    OpDef("Shape", lower_shape),
    OpDef("Size", lower_size),
    OpDef("ConstantOfShape", lower_constant_of_shape, const_inputs=(0,)),
)
