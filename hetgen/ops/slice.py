"""Slice: starts/ends/axes/steps (inputs since opset 10, attributes before) must be constants; the
result is a strided view of the input (negative steps included), copied out row by row."""

from __future__ import annotations

import numpy as np

from hetgen.ops._common import element_view, normalize_axis
from hetgen.ops._copy import contiguous_offset, copy_from_view, copy_kernel
from hetgen.ops.base import CARRIES, Kernel, OpDef, OpInstance, Unsupported


def _values(op: OpInstance, index: int, attr: str) -> list[int] | None:
    if op.has_input(index):
        value = op.constant(index)
        if value is None:
            raise Unsupported(f"Slice {attr} must be a compile-time constant")
        return [int(v) for v in np.asarray(value).reshape(-1)]
    if index >= 1 and op.node.has_attr(attr) and len(op.node.inputs) == 1:
        return [int(v) for v in op.attr(attr)]
    return None


def slices(op: OpInstance, rank: int) -> tuple[slice, ...]:
    starts = _values(op, 1, "starts")
    ends = _values(op, 2, "ends")
    if starts is None or ends is None:
        raise Unsupported("Slice without starts/ends")
    axes = _values(op, 3, "axes") or list(range(len(starts)))
    steps = _values(op, 4, "steps") or [1] * len(starts)
    result = [slice(None)] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step == 0:
            raise Unsupported("Slice step 0")
        result[normalize_axis(axis, rank, "Slice axis")] = slice(start, end, step)
    return tuple(result)


def output_view(op: OpInstance) -> tuple[np.ndarray, np.ndarray]:
    """The input's element view and the output's view of it (hetgen/ops/_copy.py)."""
    x_type = op.input_types[0]
    root = element_view(x_type.shape)
    view = root[slices(op, x_type.rank)]
    if view.shape != op.output_types[0].shape:
        raise Unsupported(f"Slice gives shape {view.shape}, the model says {op.output_types[0].shape}")
    return root, view


def lower(op: OpInstance) -> Kernel:
    root, view = output_view(op)
    return copy_kernel([copy_from_view(0, len(op.node.inputs), view, root)], op.input_types[0].dtype.itemsize)


def ranges(op: OpInstance) -> tuple[int | None, ...]:
    root, view = output_view(op)
    return (contiguous_offset(view, root),)


DEFS = (
    OpDef("Slice", lower, const_inputs=(1, 2, 3, 4), input_roles=CARRIES, quantized_passthrough=True, ranges=ranges),
)
