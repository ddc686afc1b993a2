"""Concat: each input is copied into its slab of the output (rows of contiguous bytes when the axis
is not the innermost one, so the common channel concat is a handful of memcpy calls)."""

from __future__ import annotations

from hetgen.ops._common import element_view, normalize_axis
from hetgen.ops._copy import copy_into_view, copy_kernel
from hetgen.ops.base import InputRoles, Kernel, OpDef, OpInstance


def lower(op: OpInstance) -> Kernel:
    out_type = op.output_types[0]
    axis = normalize_axis(int(op.attr("axis", 0)), out_type.rank)
    root = element_view(out_type.shape)
    out_arg = len(op.node.inputs)
    copies = []
    start = 0
    for arg, x_type in enumerate(op.input_types):
        if x_type is None:
            continue
        length = x_type.shape[axis]
        view = root[(slice(None),) * axis + (slice(start, start + length),)]
        copies.append(copy_into_view(arg, out_arg, view, root))
        start += length
    return copy_kernel(copies, out_type.dtype.itemsize)


DEFS = (OpDef("Concat", lower, input_roles=InputRoles(carries="all"), quantized_passthrough=True),)
