"""C literals and per-dtype spellings shared by the tensor-operator lowerings.

Lowerings build their C expressions here, in Python, so the templates only lay them out.
"""

from __future__ import annotations

import math

import numpy as np

from hetgen.ir import DType
from hetgen.ops._unsupported import Unsupported

INTEGER_DTYPES = (
    DType.UINT8,
    DType.INT8,
    DType.INT32,
    DType.INT64,
    DType.INT16,
    DType.UINT16,
    DType.UINT32,
    DType.UINT64,
)
UNSIGNED_DTYPES = (DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64)
FLOAT_DTYPES = (DType.FLOAT32, DType.FLOAT64)

# Unsigned twin of each integer type: arithmetic that may overflow runs there (wraps, no UB).
UNSIGNED = {
    DType.UINT8: "uint8_t",
    DType.INT8: "uint8_t",
    DType.INT32: "uint32_t",
    DType.INT64: "uint64_t",
    DType.BOOL: "uint8_t",
    # 16-bit values promote to int: their wrapping arithmetic runs in uint32_t (no signed overflow)
    DType.INT16: "uint32_t",
    DType.UINT16: "uint32_t",
    DType.UINT32: "uint32_t",
    DType.UINT64: "uint64_t",
}

# Element-size types used to move data of any dtype without looking at it.
BITS_TYPE = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}

# Helper-name suffix of each dtype in hg_tensor.h (hg_div_i32, hg_mod_u8, ...).
SUFFIX = {
    DType.UINT8: "u8",
    DType.INT8: "i8",
    DType.INT32: "i32",
    DType.INT64: "i64",
    DType.FLOAT32: "f32",
    DType.FLOAT64: "f64",
    DType.BOOL: "u8",
    DType.INT16: "i16",
    DType.UINT16: "u16",
    DType.UINT32: "u32",
    DType.UINT64: "u64",
}

_INT_LIMITS = {
    DType.UINT8: (0, 255),
    DType.INT8: (-128, 127),
    DType.INT32: (-(2**31), 2**31 - 1),
    DType.INT64: (-(2**63), 2**63 - 1),
    DType.BOOL: (0, 1),
    DType.INT16: (-(2**15), 2**15 - 1),
    DType.UINT16: (0, 2**16 - 1),
    DType.UINT32: (0, 2**32 - 1),
    DType.UINT64: (0, 2**64 - 1),
}


def c_float(value: float) -> str:
    """A float literal that round-trips exactly (as render's `cfloat` filter, parenthesised)."""
    value = float(value)
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = repr(value)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"({text}f)" if value < 0 else f"{text}f"


def c_double(value: float) -> str:
    """A double literal that round-trips exactly."""
    value = float(value)
    if math.isnan(value):
        return "((double)NAN)"
    if math.isinf(value):
        return "((double)INFINITY)" if value > 0 else "(-(double)INFINITY)"
    text = repr(value)
    if "e" not in text and "." not in text and "inf" not in text:
        text += ".0"
    return f"({text})" if value < 0 else text


def c_int(value: int, dtype: DType) -> str:
    """An integer literal of `dtype` (INT64_MIN has no literal of its own)."""
    value = int(value)
    if dtype is DType.INT64:
        if value == -(2**63):
            return "INT64_MIN"
        return f"INT64_C({value})" if value >= 0 else f"(-INT64_C({-value}))"
    if dtype is DType.INT32 and value == -(2**31):
        return "INT32_MIN"
    if dtype is DType.UINT64:
        return f"UINT64_C({value})"
    if dtype is DType.UINT32:
        return f"{value}u"
    return str(value) if value >= 0 else f"({value})"


def literal(value, dtype: DType) -> str:
    """A C literal of `dtype` holding `value` (already representable in it)."""
    if dtype is DType.FLOAT32:
        return c_float(value)
    if dtype is DType.FLOAT64:
        return c_double(value)
    if dtype is DType.BOOL:
        return "1" if bool(value) else "0"
    return c_int(int(value), dtype)


def int_limits(dtype: DType) -> tuple[int, int]:
    return _INT_LIMITS[dtype]


def lowest(dtype: DType) -> str:
    """The identity of max: -inf for floats, the smallest value otherwise."""
    if dtype.is_float:
        return literal(-math.inf, dtype)
    return literal(_INT_LIMITS[dtype][0], dtype)


def highest(dtype: DType) -> str:
    if dtype.is_float:
        return literal(math.inf, dtype)
    return literal(_INT_LIMITS[dtype][1], dtype)


def libm(name: str, dtype: DType) -> str:
    """The libm function `name` for a float dtype: expf for float32, exp for float64."""
    return f"{name}f" if dtype is DType.FLOAT32 else name


def scalar_value(array: np.ndarray | None, what: str) -> float | int | None:
    """The single value of a constant scalar (or one-element) tensor."""
    if array is None:
        return None
    array = np.asarray(array)
    if array.size != 1:
        raise Unsupported(f"{what} must hold one value, got shape {array.shape}")
    return array.reshape(()).item()


def require_dtype(dtype: DType | None, accepted, what: str) -> DType:
    if dtype not in accepted:
        names = ", ".join(d.label for d in accepted)
        label = dtype.label if dtype is not None else "an unknown type"
        raise Unsupported(f"{what} on {label}; accepted: {names}")
    return dtype
