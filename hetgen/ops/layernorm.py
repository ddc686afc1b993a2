"""LayerNormalization: each row of X.shape[axis:] normalised, then scaled and shifted.

Y is required; the optional Mean and InvStdDev outputs are written when the node has them.
"""

from __future__ import annotations

import math

from hetgen.ops import _parallel
from hetgen.ops._common import input_arg_count, normalize_axis, present_outputs, require_float32, total_bytes
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def param_stride(op: OpInstance, index: int, inner: int) -> int:
    """1 when input `index` holds one value per normalised element, 0 when it is one scalar."""
    size = op.input_types[index].size
    if size == inner:
        return 1
    if size == 1:
        return 0
    raise Unsupported(
        f"LayerNormalization {op.node.inputs[index]!r} of shape {op.input_types[index].shape}; "
        f"accepted: the normalised shape ({inner} values) or a scalar"
    )


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    x_type = op.input_types[0]
    axis = normalize_axis(int(op.attr("axis", -1)), x_type.rank, op=op)
    outer, inner = math.prod(x_type.shape[:axis]), math.prod(x_type.shape[axis:])
    outputs = present_outputs(op)
    has_bias = op.has_input(2)
    out_index = input_arg_count(op)
    split = _parallel.split(outer, 4 * inner)  # rows; about four passes over each
    params = {
        "outer": outer,
        "inner": inner,
        "epsilon": float(op.attr("epsilon", 1e-5)),
        "scale_stride": param_stride(op, 1, inner),
        "has_bias": has_bias,
        "bias_stride": param_stride(op, 2, inner) if has_bias else 0,
        "out_index": out_index,
        "mean_index": out_index + 1 if len(outputs) > 1 and outputs[1] else None,
        "inv_std_index": out_index + 2 if len(outputs) > 2 and outputs[2] else None,
        "split": split,
    }
    return Kernel(
        template="kernels/layernorm.c.j2",
        params=params,
        flops=8 * x_type.size,
        bytes_accessed=total_bytes(*op.input_types, *op.output_types),
        helpers=(_parallel.HELPER,) if split else (),
        parallel=_parallel.tasks_of(split),
    )


DEFS = (OpDef("LayerNormalization", lower, optional_outputs_from=1),)
