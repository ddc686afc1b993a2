"""BatchNormalization in inference mode: y = (x - mean) / sqrt(var + epsilon) * scale + B.

Per channel the lowering's template folds the four parameter vectors into one multiply-add. A
following activation runs in the same pass (`fusable_epilogue`): a pre-activation network
(DenseNet's BN-ReLU-Conv after every concatenation) otherwise writes and reads its largest
tensors once more per layer.
"""

from __future__ import annotations

from hetgen.ops._common import channel_planes, require_float32, total_bytes
from hetgen.ops._elementwise import check_epilogue
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    x_type = op.input_types[0]
    if int(op.attr("training_mode", 0)) or len([o for o in op.node.outputs if o]) > 1:
        raise Unsupported("BatchNormalization in training mode; accepted: inference (training_mode=0, one output)")
    if not int(op.attr("spatial", 1)):
        raise Unsupported("BatchNormalization with spatial=0; accepted: spatial=1")
    if x_type.rank < 2:
        raise Unsupported(f"BatchNormalization on {x_type}; accepted: N x C x ...")
    check_epilogue(op.epilogue, op.output_types[0].dtype, op.node.op)
    params = {**channel_planes(op), "epilogue": op.epilogue}
    return Kernel(
        template="kernels/batchnorm.c.j2",
        params=params,
        flops=2 * x_type.size,
        bytes_accessed=total_bytes(*op.input_types, *op.output_types),
    )


DEFS = (OpDef("BatchNormalization", lower, optional_outputs_from=1, fusable_epilogue=True),)
