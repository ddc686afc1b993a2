"""float16 tensors: stored as float16, computed in float32, converted at the kernel's boundary.

Targets without float16 arithmetic (all of hetgen's today) keep float16 tensors as their bits
(`uint16_t`) in memory, and every operator's float32 kernel works on them unchanged: the boundary
kernel widens each float16 input into a float32 buffer in its workspace, calls the float32 kernel,
and rounds each float32 output to float16 (round to nearest even). This is what onnxruntime's CPU
provider and numpy do for most float16 operators (compute wider, round the result), so results
agree to the last float16 bit on elementwise operators and within float16 resolution elsewhere.

Operators declared `float16_boundary=False` handle float16 themselves (Cast, where the conversion
is the point) or have no float16 instances (the quantized ones).

Native float16 arithmetic. On a CPU kind with `fp16: true` (aarch64: ARMv8.2-A FP16, built with
`-march=armv8.2-a+fp16`) the template renders, from the same kernel, code that computes in
`_Float16`, decided at render time from the target's attributes (lowering never sees the target):
- elementwise operators (`elementwise.c.j2`: arithmetic, comparisons, activations, Where...) load,
  compute and store `_Float16` directly, with no float32 buffers. One IEEE operation on two float16
  values rounds once either way, so Add/Sub/Mul/Div/Sqrt/Min/Max agree with onnxruntime bit for bit;
  functions without a half form (expf, tanhf) promote to float and round once, as before; an
  expression of several operations rounds after each one (Mean, Sum of 3: within one ulp).
- every other operator (MatMul, Gemm, Conv, pooling, reductions, Softmax...) keeps float32
  accumulation, as onnxruntime's CPU kernels do for float16 (its MatMul widens to float32 and
  rounds the result once: a float16 accumulator would lose ~1 in 2^11 per add), and converts at its
  boundary with the hardware's conversions instead of the portable bit-twiddling ones.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from hetgen.ir import DType, TensorType
from hetgen.ops.base import Kernel, OpDef, OpInstance

TEMPLATE = "kernels/float16_boundary.c.j2"
ELEMENTWISE = "kernels/elementwise.c.j2"  # kernels that may compute in native float16
HALF_CTYPE = "_Float16"  # C's interchange half type (ISO/IEC TS 18661-3), on aarch64 and x86 gcc/clang
ALIGN = 64  # each widened buffer starts on a cache line (and a vector register's alignment)


def _aligned(size: int) -> int:
    return (size + ALIGN - 1) // ALIGN * ALIGN


def _is_half(tensor: TensorType | None) -> bool:
    return tensor is not None and tensor.dtype is DType.FLOAT16


def _widened(tensor: TensorType | None) -> TensorType | None:
    return TensorType(DType.FLOAT32, tensor.shape) if _is_half(tensor) else tensor


def _widened_constant(value: np.ndarray | None) -> np.ndarray | None:
    return value.astype(np.float32) if value is not None and value.dtype == np.float16 else value


def with_float16_boundary(definition: OpDef) -> OpDef:
    """`definition`, lowering float16 instances through its float32 kernel."""
    if not definition.float16_boundary:
        return definition
    return replace(definition, lower=functools.partial(lower_at_float32, definition.lower))


def lower_at_float32(lower, op: OpInstance) -> Kernel:
    if not any(_is_half(t) for t in (*op.input_types, *op.output_types)):
        return lower(op)
    inner = lower(
        replace(
            op,
            input_types=tuple(_widened(t) for t in op.input_types),
            output_types=tuple(_widened(t) for t in op.output_types),
            constants=tuple(_widened_constant(c) for c in op.constants),
        )
    )
    offset = _aligned(inner.scratch_bytes)
    slots, widen, narrow = [], [], []
    tensors = [(i, t, widen) for i, t in enumerate(op.input_types)]
    # one args slot per node output (NULL for an omitted one); output_types has the present ones
    present = iter(op.output_types)
    outputs = op.node.outputs if len(op.node.outputs) >= len(op.output_types) else op.output_types
    tensors += [(len(op.node.inputs) + j, next(present) if name else None, narrow) for j, name in enumerate(outputs)]
    for arg, tensor, conversions in tensors:
        if _is_half(tensor):
            conversions.append({"arg": arg, "offset": offset, "count": tensor.size})
            slots.append(f"scratch + {offset}")
            offset += _aligned(4 * tensor.size)
        else:
            slots.append(f"args[{arg}]")
    if inner.scratch_bytes:
        slots.append("scratch")
    converted = sum(c["count"] for c in (*widen, *narrow))
    half_args = {c["arg"] for c in (*widen, *narrow)}
    return Kernel(
        template=TEMPLATE,
        params={
            "inner_kernel": inner,
            "slots": slots,
            "widen": widen,
            "narrow": narrow,
            "scratch_arg": len(op.node.inputs) + len(outputs),
            "native": native_elementwise(inner, half_args),
        },
        scratch_bytes=offset,
        flops=inner.flops + converted,
        bytes_accessed=inner.bytes_accessed + 6 * converted,
        helpers=inner.helpers,
        parallel=inner.parallel,  # the float32 kernel inside splits as it would alone
    )


def native_elementwise(inner: Kernel, half_args: set[int]) -> dict | None:
    """The elementwise kernel's view-model with its float16 operands and result in `_Float16`
    (rendered instead of the boundary on kinds with float16 arithmetic); None for other kernels."""
    if inner.template != ELEMENTWISE or inner.scratch_bytes:
        return None
    params = dict(inner.params)
    params["loads"] = [
        {**load, "ctype": HALF_CTYPE} if load["arg"] in half_args else load for load in inner.params["loads"]
    ]
    if inner.params["out_arg"] in half_args:
        params["out_ctype"] = HALF_CTYPE
    return params
