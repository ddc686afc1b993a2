"""Cast and CastLike between float32/float64/float16/int64/int32/int8/uint8/bool.

float16 is stored as its bits: to float16 rounds once, to nearest even (hg_f64_to_f16); from it is
exact (hg_f16_to_f32). An int64 beyond 2^53 rounds to double first, but is past float16's range
anyway (infinity either way).

Float to integer truncates toward zero; NaN and out-of-range values give what numpy gives on x86
(see hg_f2i32 in hg_tensor.h) instead of C's undefined behaviour. Anything to bool is `x != 0`.
"""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops._elementwise import Operand, elementwise_kernel
from hetgen.ops.base import CARRIES, Kernel, OpDef, OpInstance


def cast_expression(x: str, src: DType, dst: DType) -> tuple[str, bool]:
    """(C expression converting `x` from `src` to `dst`, uses hg_tensor.h)."""
    if src is dst:
        return x, False
    if src is DType.FLOAT16:  # widening is exact; then as from float32
        widened, helpers = cast_expression(f"hg_f16_to_f32({x})", DType.FLOAT32, dst)
        return widened, helpers
    if dst is DType.FLOAT16:  # one rounding, from the exact double value (float, int32, smaller ints)
        return (f"hg_f32_to_f16({x})" if src is DType.FLOAT32 else f"hg_f64_to_f16((double){x})"), False
    if dst is DType.BOOL:
        return f"({x} != 0)", False
    if src.is_float and not dst.is_float:
        if dst in (DType.INT64, DType.UINT64, DType.UINT32):  # through int64: uint32 past 2^31 too
            return (f"hg_f2i64({x})" if dst is DType.INT64 else f"({dst.c_type})hg_f2i64({x})"), True
        return f"({dst.c_type})hg_f2i32({x})", True
    return f"({dst.c_type}){x}", False


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    out_type = op.output_types[0]
    expression, helpers = cast_expression("x", x_type.dtype, out_type.dtype)
    return elementwise_kernel(
        [Operand("x", 0, x_type)], out_type, expression, out_arg=len(op.node.inputs), helpers=helpers
    )


DEFS = (
    OpDef("Cast", lower, input_roles=CARRIES, float16_boundary=False),
    OpDef("CastLike", lower, float16_boundary=False),
)
