"""InstanceNormalization: each (batch, channel) plane normalised by its own mean and variance."""

from __future__ import annotations

from hetgen.ops._common import input_arg_count, require_float32, total_bytes
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    x_type = op.input_types[0]
    if x_type.rank < 3:
        raise Unsupported(f"InstanceNormalization on {x_type}; accepted: N x C x spatial")
    batch, channels = x_type.shape[:2]
    params = {
        "batch": batch,
        "channels": channels,
        "plane": x_type.size // (batch * channels) if batch * channels else 0,
        "epsilon": float(op.attr("epsilon", 1e-5)),
        "out_index": input_arg_count(op),
    }
    return Kernel(
        template="kernels/instancenorm.c.j2",
        params=params,
        flops=6 * x_type.size,
        bytes_accessed=total_bytes(*op.input_types, *op.output_types),
    )


DEFS = (OpDef("InstanceNormalization", lower),)
