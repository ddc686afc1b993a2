"""Operators that only reinterpret the shape: Reshape, Flatten, Squeeze, Unsqueeze, Identity and
inference-mode Dropout. Their output holds the input's bytes unchanged, so the kernel is one
`memcpy` (a memory planner may alias the two buffers and skip the call).
"""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops._copy import Fill, copy_kernel, whole_copy
from hetgen.ops.base import CARRIES, Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    out_type = op.output_types[0]
    if out_type.size != x_type.size or out_type.dtype is not x_type.dtype:
        raise Unsupported(f"{op.node.op} from {x_type} to {out_type}")
    return copy_kernel([whole_copy(0, len(op.node.inputs), x_type.size)], x_type.dtype.itemsize)


def lower_dropout(op: OpInstance) -> Kernel:
    """Inference Dropout is the identity; its optional mask output is all true."""
    training = op.constant(2) if op.has_input(2) else None
    if op.has_input(2) and training is None:
        raise Unsupported("Dropout training_mode must be a compile-time constant")
    ratio = op.constant(1) if op.has_input(1) else None
    if training is not None and bool(training.reshape(-1)[0]):
        if ratio is None or float(ratio.reshape(-1)[0]) != 0.0:
            raise Unsupported("Dropout in training mode (random); accepted: inference, or ratio 0")
    if op.node.has_attr("is_test") and not op.attr("is_test"):
        raise Unsupported("Dropout in training mode (is_test=0)")
    x_type = op.input_types[0]
    out_arg = len(op.node.inputs)
    steps = [whole_copy(0, out_arg, x_type.size)]
    if len(op.node.outputs) > 1 and op.node.outputs[1]:
        mask = op.output_types[1]
        steps.append(Fill(out_arg + 1, (mask.size,), (1,), True, DType.BOOL))
    return copy_kernel(steps, x_type.dtype.itemsize)


DEFS = (
    OpDef("Reshape", lower, const_inputs=(1,), alias=True, input_roles=CARRIES, quantized_passthrough=True),
    OpDef("Flatten", lower, alias=True, input_roles=CARRIES, quantized_passthrough=True),
    OpDef("Squeeze", lower, const_inputs=(1,), alias=True, input_roles=CARRIES, quantized_passthrough=True),
    OpDef("Unsqueeze", lower, const_inputs=(1,), alias=True, input_roles=CARRIES, quantized_passthrough=True),
    OpDef("Identity", lower, alias=True, input_roles=CARRIES),
    OpDef("Dropout", lower_dropout, const_inputs=(1, 2)),
)
