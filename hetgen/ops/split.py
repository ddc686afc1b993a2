"""Split: each output is a slab of the input along `axis`.

The slab sizes are read from the output types (static shapes), which the `split` input or
attribute, or `num_outputs`, determined during shape inference.
"""

from __future__ import annotations

import numpy as np

from hetgen.ops._common import element_view, normalize_axis
from hetgen.ops._copy import contiguous_offset, copy_from_view, copy_kernel
from hetgen.ops.base import CARRIES, Kernel, OpDef, OpInstance, Unsupported


def output_views(op: OpInstance) -> tuple[np.ndarray, list[np.ndarray]]:
    """The input's element view and each output's view of it (hetgen/ops/_copy.py)."""
    x_type = op.input_types[0]
    axis = normalize_axis(int(op.attr("axis", 0)), x_type.rank)
    root = element_view(x_type.shape)
    views = []
    start = 0
    for k, out_type in enumerate(op.output_types):
        length = out_type.shape[axis]
        view = root[(slice(None),) * axis + (slice(start, start + length),)]
        if view.shape != out_type.shape:
            raise Unsupported(f"Split output {k} of shape {out_type.shape} does not fit input {x_type.shape}")
        views.append(view)
        start += length
    if start != x_type.shape[axis]:
        raise Unsupported(f"Split outputs cover {start} of {x_type.shape[axis]} elements along axis {axis}")
    return root, views


def lower(op: OpInstance) -> Kernel:
    root, views = output_views(op)
    first_out = len(op.node.inputs)
    copies = [copy_from_view(0, first_out + k, view, root) for k, view in enumerate(views)]
    return copy_kernel(copies, op.input_types[0].dtype.itemsize)


def ranges(op: OpInstance) -> tuple[int | None, ...]:
    root, views = output_views(op)
    return tuple(contiguous_offset(view, root) for view in views)


DEFS = (OpDef("Split", lower, const_inputs=(1,), input_roles=CARRIES, ranges=ranges),)
