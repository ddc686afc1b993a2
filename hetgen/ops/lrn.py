"""LRN: y = x / (bias + alpha / size * sum of x^2 over neighbouring channels) ^ beta."""

from __future__ import annotations

from hetgen.ops._common import input_arg_count, require_float32, total_bytes
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    x_type = op.input_types[0]
    if x_type.rank < 3:
        raise Unsupported(f"LRN on {x_type}; accepted: N x C x spatial")
    size = int(op.attr("size"))
    batch, channels = x_type.shape[:2]
    params = {
        "batch": batch,
        "channels": channels,
        "last_channel": channels - 1,
        "image_size": channels * (x_type.size // (batch * channels) if batch * channels else 0),
        "plane": x_type.size // (batch * channels) if batch * channels else 0,
        "before": (size - 1) // 2,  # channels below c in its window
        "after": size - 1 - (size - 1) // 2,  # channels above c
        "alpha_over_size": float(op.attr("alpha", 1e-4)) / size,
        "beta": float(op.attr("beta", 0.75)),
        "bias": float(op.attr("bias", 1.0)),
        "out_index": input_arg_count(op),
    }
    return Kernel(
        template="kernels/lrn.c.j2",
        params=params,
        flops=(2 * size + 4) * x_type.size,
        bytes_accessed=total_bytes(x_type, *op.output_types),
    )


DEFS = (OpDef("LRN", lower),)
