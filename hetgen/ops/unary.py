"""Elementwise unary operators: one template, the C expression chosen per operator and dtype."""

from __future__ import annotations

import math
from collections.abc import Callable

from hetgen.ir import DType
from hetgen.ops._activation import ACTIVATIONS, epilogue_from_attributes, sigmoid
from hetgen.ops._common import INTEGER_DTYPES, UNSIGNED, UNSIGNED_DTYPES, libm, literal
from hetgen.ops._elementwise import Operand, elementwise_kernel
from hetgen.ops.base import Kernel, OpDef, OpInstance, Tiling, Unsupported

# Each builder returns the C expression of the result from the element variable `x`, the float
# dtype `t` (float32 or float64) and the node (for attributes).
FloatBuilder = Callable[[str, DType, OpInstance], str]


def _f(t: DType, value: float) -> str:
    return literal(value, t)


def _softplus(x: str, t: DType) -> str:
    # log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)
    return f"({libm('fmax', t)}({x}, {_f(t, 0)}) + {libm('log1p', t)}({libm('exp', t)}(-{libm('fabs', t)}({x}))))"


def _gelu(x: str, t: DType, op: OpInstance) -> str:
    approximate = op.attr("approximate", "none")
    if approximate == "tanh":
        inner = f"{_f(t, math.sqrt(2 / math.pi))} * ({x} + {_f(t, 0.044715)} * {x} * {x} * {x})"
        return f"{_f(t, 0.5)} * {x} * ({_f(t, 1)} + {libm('tanh', t)}({inner}))"
    if approximate != "none":
        raise Unsupported(f"Gelu approximate={approximate!r}; accepted: 'none', 'tanh'")
    return f"{_f(t, 0.5)} * {x} * ({_f(t, 1)} + {_erf(t)}({x} * {_f(t, math.sqrt(0.5))}))"


def _erf(t: DType) -> str:
    # float32: hg_erff (hg_kernels.h) vectorises where libm's erff is a call per element
    return "hg_erff" if t is DType.FLOAT32 else "erf"


def _alpha(op: OpInstance, default: float) -> float:
    return float(op.attr("alpha", default))


def _libm_call(name: str) -> FloatBuilder:
    return lambda x, t, op: f"{libm(name, t)}({x})"


def _activation(name: str) -> FloatBuilder:
    """A fusable activation: its expression is the one the fused epilogue uses."""
    return lambda x, t, op: ACTIVATIONS[name](x, t, epilogue_from_attributes(op.node))


FLOAT_BUILDERS: dict[str, FloatBuilder] = {
    **{name: _activation(name) for name in ACTIVATIONS if name != "Clip"},  # Clip: clip.py
    "Elu": lambda x, t, op: f"{x} > {_f(t, 0)} ? {x} : {_f(t, _alpha(op, 1.0))} * {libm('expm1', t)}({x})",
    "Selu": lambda x, t, op: (
        f"{_f(t, float(op.attr('gamma', 1.05070102214813232421875)))} * ({x} > {_f(t, 0)} ? {x} : "
        f"{_f(t, _alpha(op, 1.67326319217681884765625))} * {libm('expm1', t)}({x}))"
    ),
    "Celu": lambda x, t, op: (
        f"{libm('fmax', t)}({_f(t, 0)}, {x}) + {libm('fmin', t)}({_f(t, 0)}, "
        f"{_f(t, _alpha(op, 1.0))} * {libm('expm1', t)}({x} / {_f(t, _alpha(op, 1.0))}))"
    ),
    "Softplus": lambda x, t, op: _softplus(x, t),
    "Softsign": lambda x, t, op: f"{x} / ({_f(t, 1)} + {libm('fabs', t)}({x}))",
    "Exp": _libm_call("exp"),
    "Log": _libm_call("log"),
    "Sqrt": _libm_call("sqrt"),
    "Reciprocal": lambda x, t, op: f"{_f(t, 1)} / {x}",
    "Neg": lambda x, t, op: f"-{x}",
    "Abs": _libm_call("fabs"),
    "Floor": _libm_call("floor"),
    "Ceil": _libm_call("ceil"),
    "Round": _libm_call("rint"),  # ties to even, as ONNX asks (default rounding mode)
    "Erf": lambda x, t, op: f"{_erf(t)}({x})",
    "Sin": _libm_call("sin"),
    "Cos": _libm_call("cos"),
    "Tan": _libm_call("tan"),
    "Asin": _libm_call("asin"),
    "Acos": _libm_call("acos"),
    "Atan": _libm_call("atan"),
    "Sinh": _libm_call("sinh"),
    "Cosh": _libm_call("cosh"),
    "Asinh": _libm_call("asinh"),
    "Acosh": _libm_call("acosh"),
    "Atanh": _libm_call("atanh"),
    "Sign": lambda x, t, op: f"{x} > {_f(t, 0)} ? {_f(t, 1)} : ({x} < {_f(t, 0)} ? {_f(t, -1)} : {x})",
    "Gelu": _gelu,
    "Mish": lambda x, t, op: f"{x} * {libm('tanh', t)}({_softplus(x, t)})",
    "ThresholdedRelu": lambda x, t, op: f"{x} > {_f(t, _alpha(op, 1.0))} ? {x} : {_f(t, 0)}",
    "Swish": lambda x, t, op: f"{x} * {sigmoid(f'{_f(t, _alpha(op, 1.0))} * {x}', t)}",
    "Shrink": lambda x, t, op: (
        f"{x} < {_f(t, -float(op.attr('lambd', 0.5)))} ? {x} + {_f(t, float(op.attr('bias', 0.0)))} : "
        f"({x} > {_f(t, float(op.attr('lambd', 0.5)))} ? {x} - {_f(t, float(op.attr('bias', 0.0)))} : {_f(t, 0)})"
    ),
    "IsNaN": lambda x, t, op: f"{x} != {x}",
    "IsInf": lambda x, t, op: (
        " || ".join(
            [f"{x} == {_f(t, math.inf)}"] * bool(op.attr("detect_positive", 1))
            + [f"{x} == {_f(t, -math.inf)}"] * bool(op.attr("detect_negative", 1))
        )
        or "0"
    ),
}


def _int_expression(name: str, x: str, t: DType) -> str:
    unsigned = t in UNSIGNED_DTYPES
    wrap_neg = f"({t.c_type})(0u - ({UNSIGNED[t]}){x})"  # -x modulo 2^n, as numpy
    if name == "Neg":
        return wrap_neg
    if name == "Abs":
        return x if unsigned else f"{x} < 0 ? {wrap_neg} : {x}"
    if name == "Sign":
        return f"({t.c_type})({x} > 0)" if unsigned else f"({t.c_type})(({x} > 0) - ({x} < 0))"
    if name == "Relu":
        return f"{x} > 0 ? {x} : 0"
    assert name == "BitwiseNot", name
    return f"({t.c_type})~{x}"


INTEGER_OPS = ("Neg", "Abs", "Sign", "Relu", "BitwiseNot")


def lower(op: OpInstance) -> Kernel:
    name = op.node.op
    x_type = op.input_types[0]
    dtype = x_type.dtype
    if name == "Not" and dtype is DType.BOOL:
        expression = "!x"
    elif dtype.is_float and name in FLOAT_BUILDERS:
        expression = FLOAT_BUILDERS[name]("x", dtype, op)
    elif dtype in INTEGER_DTYPES and name in INTEGER_OPS:
        expression = _int_expression(name, "x", dtype)
    else:
        accepted = ["bool"] if name == "Not" else [] if name == "BitwiseNot" else ["float32", "float64"]
        accepted += [d.label for d in INTEGER_DTYPES] if name in INTEGER_OPS else []
        raise Unsupported(f"{name} on {dtype.label}; accepted: {', '.join(accepted)}")
    return elementwise_kernel([Operand("x", 0, x_type)], op.output_types[0], expression, out_arg=len(op.node.inputs))


_OPS = (*FLOAT_BUILDERS, "Not", "BitwiseNot")
# the device model tiles these in contiguous chunks (hetgen/spec/tile_shapes.py)
CHUNKED = ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish")
DEFS = tuple(OpDef(op, lower, tiling=Tiling.CHUNKS if op in CHUNKED else Tiling.WHOLE) for op in sorted(_OPS))
