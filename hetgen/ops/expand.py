"""Expand and Tile: the output reads the input through broadcast (stride 0) dimensions.

Tile splits each output dimension r*d into (r, d) with strides (0, stride), so repeats need no
index arithmetic; both take their sizes from the output type.
"""

from __future__ import annotations

import numpy as np

from hetgen.ops._common import element_view
from hetgen.ops._copy import copy_from_view, copy_kernel
from hetgen.ops.base import CARRIES, Kernel, OpDef, OpInstance, Unsupported


def lower_expand(op: OpInstance) -> Kernel:
    x_type, out_type = op.input_types[0], op.output_types[0]
    root = element_view(x_type.shape)
    try:
        view = np.broadcast_to(root, out_type.shape)
    except ValueError:
        raise Unsupported(f"Expand of {x_type.shape} to {out_type.shape}") from None
    return copy_kernel([copy_from_view(0, len(op.node.inputs), view, root)], x_type.dtype.itemsize)


def lower_tile(op: OpInstance) -> Kernel:
    x_type, out_type = op.input_types[0], op.output_types[0]
    if out_type.rank != x_type.rank:
        raise Unsupported(f"Tile of rank {x_type.rank} to rank {out_type.rank}")
    repeats = []
    for d, (extent, out_extent) in enumerate(zip(x_type.shape, out_type.shape)):
        if extent == 0 or out_extent % extent:
            if out_extent == 0:
                repeats.append(0)
                continue
            raise Unsupported(f"Tile output dimension {d} ({out_extent}) is not a multiple of {extent}")
        repeats.append(out_extent // extent)
    root = element_view(x_type.shape)
    split = root.reshape([v for extent in x_type.shape for v in (1, extent)])
    view = np.broadcast_to(split, [v for r, extent in zip(repeats, x_type.shape) for v in (r, extent)])
    return copy_kernel([copy_from_view(0, len(op.node.inputs), view, root)], x_type.dtype.itemsize)


DEFS = (
    OpDef("Expand", lower_expand, const_inputs=(1,), input_roles=CARRIES),
    OpDef("Tile", lower_tile, const_inputs=(1,), input_roles=CARRIES),
)
