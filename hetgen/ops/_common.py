"""The helpers every operator lowering shares, in one module: checks on an instance, C literals
and per-dtype spellings, and the index arithmetic of loop nests.

Lowerings build their C expressions and index arithmetic here, in Python, so the templates only lay
them out.

Index arithmetic: every tensor kernel walks its output in row-major order through a nest of loops
with constant bounds. Each operand is addressed by a linear expression of the loop variables; before
the nest is built, dimensions of extent 1 are dropped and neighbouring dimensions that are
contiguous for *every* operand are merged, so an elementwise add of equal shapes is one flat loop
and a per-channel bias is a (rows, channels, pixels) nest whose inner loop is unit-stride.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.lib.stride_tricks import as_strided

from hetgen.ir import DType, Node, TensorType
from hetgen.ops._unsupported import Unsupported


class OpInstance(Protocol):
    """What these helpers read of a `hetgen.ops.base.OpInstance`. Named structurally because
    base.py imports this module (its fused activations spell their C literals here)."""

    node: Node
    input_types: tuple[TensorType | None, ...]
    output_types: tuple[TensorType, ...]

    def attr(self, key: str, default: Any = None) -> Any: ...


# -- checks on an instance ----------------------------------------------------------------------


def require_float32(op: OpInstance, *indices: int) -> None:
    """Raise Unsupported unless the given inputs (default: all present ones) are float32."""
    for index in indices or range(len(op.input_types)):
        tensor_type = op.input_types[index] if index < len(op.input_types) else None
        if tensor_type is not None and tensor_type.dtype is not DType.FLOAT32:
            name = op.node.inputs[index]
            raise Unsupported(f"{op.node.op} on {tensor_type.dtype.label} input '{name}'; accepted: float32")


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


# -- C literals and per-dtype spellings ---------------------------------------------------------

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


def float_literal(value: float) -> str:
    """A float literal that round-trips exactly through the C compiler (render's `cfloat` filter)."""
    value = float(value)
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = repr(value)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f"


def c_float(value: float) -> str:
    """`float_literal`, parenthesised when negative (safe inside any C expression)."""
    text = float_literal(value)
    return f"({text})" if float(value) < 0 and not math.isinf(float(value)) else text


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


# -- index arithmetic: axes, strides, broadcasting, collapsing, loop nests ----------------------


def normalize_axis(axis: int, rank: int, what: str = "axis", *, op: OpInstance | None = None) -> int:
    """`axis` of a rank-`rank` tensor made non-negative; Unsupported when it is out of range.

    Two conventions, one check. Without `op` (the data-movement and reduction operators: `what`
    names the axis in the message) a rank-0 tensor accepts axis 0, the one position of a scalar.
    With `op` (Softmax, LayerNormalization, QuantizeLinear: an axis the operator computes along) a
    rank-0 input has no axis, and the message names the operator and its input's rank."""
    if op is not None:
        if not -rank <= axis < rank:
            raise Unsupported(f"{op.node.op} axis {axis} is out of range for a rank-{rank} input")
        return axis % rank
    if not -rank <= axis < max(rank, 1):
        raise Unsupported(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


@dataclass(frozen=True)
class Loop:
    var: str  # C loop variable
    extent: int


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides that read a `shape` tensor broadcast (numpy rules) to `out_shape`."""
    shape = tuple(shape)
    pad = len(out_shape) - len(shape)
    if pad < 0:
        raise Unsupported(f"cannot broadcast shape {shape} to {tuple(out_shape)}")
    own = contiguous_strides(shape)
    strides = [0] * pad
    for extent, stride, out_extent in zip(shape, own, out_shape[pad:]):
        if extent == out_extent:
            strides.append(stride)
        elif extent == 1:
            strides.append(0)
        else:
            raise Unsupported(f"cannot broadcast shape {shape} to {tuple(out_shape)}")
    return tuple(strides)


def collapse(
    extents: Sequence[int], strides: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop extent-1 dimensions and merge neighbours that are contiguous for every operand.

    `strides[k]` are operand k's element strides over `extents`. Returns the collapsed extents and
    each operand's strides over them (both in the same outer-to-inner order).
    """
    kept = [(e, [s[d] for s in strides]) for d, e in enumerate(extents) if e != 1]
    merged: list[tuple[int, list[int]]] = []
    for extent, dim_strides in kept:
        if merged:
            outer_extent, outer_strides = merged[-1]
            if all(o == s * extent for o, s in zip(outer_strides, dim_strides)):
                merged[-1] = (outer_extent * extent, dim_strides)
                continue
        merged.append((extent, dim_strides))
    out_extents = tuple(e for e, _ in merged)
    out_strides = tuple(tuple(s[k] for _, s in merged) for k in range(len(strides)))
    return out_extents, out_strides


def loops_for(extents: Sequence[int], prefix: str = "i") -> tuple[Loop, ...]:
    return tuple(Loop(f"{prefix}{d}", int(e)) for d, e in enumerate(extents))


def index_expr(loops: Sequence[Loop], strides: Sequence[int], offset: int = 0) -> str:
    """The C expression of the element index `offset + sum(var * stride)`."""
    terms = []
    for loop, stride in zip(loops, strides):
        if stride == 1:
            terms.append(loop.var)
        elif stride != 0:
            terms.append(f"{loop.var} * {stride}" if stride > 0 else f"{loop.var} * ({stride})")
    if offset or not terms:
        terms.append(str(offset) if offset >= 0 else f"({offset})")
    return " + ".join(terms)


def element_view(shape: Sequence[int]) -> np.ndarray:
    """A zero-memory array of `shape` whose byte strides equal its element strides.

    numpy's own view operations (slicing, transposing, broadcasting, reshaping) applied to it give
    the element strides and offset of a data-movement operator's source; see `view_strides`.
    """
    base = np.zeros(1, dtype=np.uint8)
    return as_strided(base, shape=tuple(shape), strides=contiguous_strides(shape), writeable=False)


def view_strides(view: np.ndarray, root: np.ndarray) -> tuple[tuple[int, ...], int]:
    """(element strides, element offset) of a view derived from `element_view(...)` `root`."""
    offset = view.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return tuple(int(s) for s in view.strides), int(offset)
