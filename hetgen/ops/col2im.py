"""Col2Im: the inverse of im2col for any number of spatial dimensions: each column of input
(one sliding-block position) is added back into the image at its block's place (overlaps sum)."""

from __future__ import annotations

import math

from hetgen.ir import DType
from hetgen.ops._common import contiguous_strides
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    x = op.input_types[0]
    image, block = op.constant(1), op.constant(2)
    if image is None or block is None:
        raise Unsupported("Col2Im image_shape and block_shape must be compile-time constants")
    if x.dtype not in (DType.FLOAT32, DType.FLOAT64):
        raise Unsupported(f"Col2Im on {x.dtype.label}; accepted: float32, float64")
    image, block = [int(v) for v in image], [int(v) for v in block]
    rank = len(image)
    dilations = [int(v) for v in op.attr("dilations", None) or [1] * rank]
    strides = [int(v) for v in op.attr("strides", None) or [1] * rank]
    pads = [int(v) for v in op.attr("pads", None) or [0] * (2 * rank)]
    positions = [
        (image[d] + pads[d] + pads[rank + d] - (dilations[d] * (block[d] - 1) + 1)) // strides[d] + 1
        for d in range(rank)
    ]
    columns = math.prod(positions)
    if x.shape[2] != columns:
        raise Unsupported(f"Col2Im input has {x.shape[2]} columns; the shapes and attributes give {columns}")
    batch = x.shape[0]
    channels = x.shape[1] // math.prod(block)
    return Kernel(
        template="kernels/col2im.c.j2",
        params={
            "ctype": x.dtype.c_type,
            "rank": rank,
            "batch": batch,
            "channels": channels,
            "planes": batch * channels,
            "last_axis": rank - 1,
            "image": image,
            "image_strides": contiguous_strides(image),
            "image_size": math.prod(image),
            "block": block,
            "block_size": math.prod(block),
            "positions": positions,
            "columns": columns,
            "dilations": dilations,
            "strides": strides,
            "pads": pads[:rank],
            "out_size": op.output_types[0].size,
            "out_arg": len(op.node.inputs),
        },
        flops=x.size,
        bytes_accessed=x.nbytes + op.output_types[0].nbytes,
    )


DEFS = (OpDef("Col2Im", lower, const_inputs=(1, 2)),)
