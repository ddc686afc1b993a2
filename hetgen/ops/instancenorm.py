"""InstanceNormalization: each (batch, channel) plane normalised by its own mean and variance."""

from __future__ import annotations

from hetgen.ops._common import channel_planes, require_float32, total_bytes
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    x_type = op.input_types[0]
    if x_type.rank < 3:
        raise Unsupported(f"InstanceNormalization on {x_type}; accepted: N x C x spatial")
    params = channel_planes(op)
    return Kernel(
        template="kernels/instancenorm.c.j2",
        params=params,
        flops=6 * x_type.size,
        bytes_accessed=total_bytes(*op.input_types, *op.output_types),
    )


DEFS = (OpDef("InstanceNormalization", lower),)
