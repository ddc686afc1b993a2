"""Small data-movement operators: BitCast (the same bytes, another type), ReverseSequence (each
batch row's first `sequence_lens` steps reversed), MaxUnpool (values scattered back to the indices
MaxPool took them from), TensorScatter (a KV-cache update: rows written at each batch's index).

Each is one short loop nest in a template of its own (`templates/kernels/<kind>.c.j2`); run-time
inputs (lengths, indices) are read at run time and clamped into the tensor, so a bad index cannot
write outside it.
"""

from __future__ import annotations

import math

from hetgen.ops._common import BITS_TYPE, contiguous_strides, normalize_axis
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def _kernel(op: OpInstance, **params) -> Kernel:
    moved = sum(t.nbytes for t in op.input_types if t) + sum(t.nbytes for t in op.output_types)
    return Kernel(template=f"kernels/{params['kind']}.c.j2", params=params, bytes_accessed=moved)


def bit_cast(op: OpInstance) -> Kernel:
    x, y = op.input_types[0], op.output_types[0]
    if x.nbytes != y.nbytes:
        raise Unsupported(f"BitCast from {x} to {y}: the element sizes differ; accepted: equal sizes")
    return _kernel(op, kind="bitcast", nbytes=x.nbytes, out_arg=1)


def reverse_sequence(op: OpInstance) -> Kernel:
    x = op.input_types[0]
    batch_axis, time_axis = int(op.attr("batch_axis", 1)), int(op.attr("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise Unsupported(f"ReverseSequence batch_axis={batch_axis}, time_axis={time_axis}; accepted: 0 and 1")
    inner = math.prod(x.shape[2:])
    steps, batch = (x.shape[0], x.shape[1]) if time_axis == 0 else (x.shape[1], x.shape[0])
    # element strides of a (time, batch) position
    time_stride, batch_stride = (batch * inner, inner) if time_axis == 0 else (inner, steps * inner)
    return _kernel(
        op,
        kind="reverse_sequence",
        ctype=BITS_TYPE[x.dtype.itemsize],
        steps=steps,
        batch=batch,
        inner=inner,
        time_stride=time_stride,
        batch_stride=batch_stride,
        size=x.size,
        out_arg=2,
    )


def max_unpool(op: OpInstance) -> Kernel:
    """As the ONNX reference: indices are flat into the unpooled shape the attributes give, and that
    block lands in the corner of a larger `output_shape`."""
    x, y = op.input_types[0], op.output_types[0]
    kernel = [int(k) for k in op.attr("kernel_shape")]
    spatial = len(kernel)
    strides = [int(s) for s in op.attr("strides", None) or [1] * spatial]
    pads = [int(p) for p in op.attr("pads", None) or [0] * (2 * spatial)]
    unpooled = list(x.shape[:2]) + [
        (x.shape[2 + d] - 1) * strides[d] - (pads[d] + pads[spatial + d]) + kernel[d] for d in range(spatial)
    ]
    if any(u > o for u, o in zip(unpooled, y.shape)):
        raise Unsupported(f"MaxUnpool output_shape {y.shape} smaller than the unpooled shape {tuple(unpooled)}")
    return _kernel(
        op,
        kind="max_unpool",
        ctype=BITS_TYPE[x.dtype.itemsize],
        count=x.size,
        unpooled=unpooled,
        unpooled_size=math.prod(unpooled),
        out_strides=contiguous_strides(y.shape),
        rank=len(unpooled),
        out_size=y.size,
        out_arg=len(op.node.inputs),
    )


def tensor_scatter(op: OpInstance) -> Kernel:
    cache, update = op.input_types[0], op.input_types[1]
    axis = normalize_axis(int(op.attr("axis", -2)), cache.rank)
    if axis == 0:
        raise Unsupported("TensorScatter axis 0 (the batch axis); accepted: a later axis")
    mode = op.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("linear", "circular"):
        raise Unsupported(f"TensorScatter mode {mode!r}; accepted: linear, circular")
    return _kernel(
        op,
        kind="tensor_scatter",
        ctype=BITS_TYPE[cache.dtype.itemsize],
        size=cache.size,
        batch=cache.shape[0],
        middle=math.prod(cache.shape[1:axis]),  # the dimensions between batch and sequence
        max_length=cache.shape[axis],
        length=update.shape[axis],
        inner=math.prod(cache.shape[axis + 1 :]),
        circular=mode == "circular",
        has_indices=op.has_input(2),
        start="write_indices[b]" if op.has_input(2) else "0",
        out_arg=len(op.node.inputs),
    )


DEFS = (
    OpDef("BitCast", bit_cast),
    OpDef("MaxUnpool", max_unpool),
    OpDef("ReverseSequence", reverse_sequence),
    OpDef("TensorScatter", tensor_scatter),
)
