"""Checks and small computations shared by the compute operator lowerings."""

from __future__ import annotations

from hetgen.ir import DType, TensorType
from hetgen.ops.base import OpInstance, Unsupported


def require_float32(op: OpInstance, *indices: int) -> None:
    """Raise Unsupported unless the given inputs (default: all present ones) are float32."""
    for index in indices or range(len(op.input_types)):
        tensor_type = op.input_types[index] if index < len(op.input_types) else None
        if tensor_type is not None and tensor_type.dtype is not DType.FLOAT32:
            name = op.node.inputs[index]
            raise Unsupported(f"{op.node.op} on {tensor_type.dtype.label} input '{name}'; accepted: float32")


def normalized_axis(op: OpInstance, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise Unsupported(f"{op.node.op} axis {axis} is out of range for a rank-{rank} input")
    return axis % rank


def input_arg_count(op: OpInstance) -> int:
    """Index of the first output in the kernel's `args` (one slot per node input)."""
    return len(op.node.inputs)


def present_outputs(op: OpInstance) -> tuple[bool, ...]:
    return tuple(bool(name) for name in op.node.outputs)


def total_bytes(*types: TensorType | None) -> int:
    return sum(t.nbytes for t in types if t is not None)


def channel_planes(op: OpInstance) -> dict:
    """The view-model of a per-(batch, channel) kernel over N x C x ... input 0 (the norms)."""
    x_type = op.input_types[0]
    batch, channels = x_type.shape[:2]
    return {
        "batch": batch,
        "channels": channels,
        "plane": x_type.size // (batch * channels) if batch * channels else 0,
        "epsilon": float(op.attr("epsilon", 1e-5)),
        "out_index": input_arg_count(op),
    }
