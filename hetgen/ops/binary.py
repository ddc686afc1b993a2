"""Elementwise operators of two or more inputs with numpy broadcasting: arithmetic, comparisons,
logic, and the variadic Max/Min/Sum/Mean.

Integer arithmetic matches numpy (and ONNX's reference): it wraps modulo 2^n, so it runs on the
unsigned twin of the type (no undefined overflow); Div truncates toward zero and, like numpy,
gives 0 for a zero divisor; the helpers that guard those cases live in `hg_tensor.h`.
"""

from __future__ import annotations

from functools import reduce

from hetgen.ir import DType
from hetgen.ops._common import INTEGER_DTYPES, SUFFIX, UNSIGNED, UNSIGNED_DTYPES, libm, literal, scalar_value
from hetgen.ops._elementwise import Operand, check_epilogue, elementwise_kernel
from hetgen.ops.base import NO_ROLES, InputRoles, Kernel, OpDef, OpInstance, Tiling, Unsupported

NUMERIC = (DType.FLOAT32, DType.FLOAT64, *INTEGER_DTYPES)

COMPARISONS = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=", "GreaterOrEqual": ">="}
LOGICAL = {"And": "&", "Or": "|", "Xor": "^"}
BITWISE = {"BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^"}
VARIADIC = ("Max", "Min", "Sum", "Mean")


def _wrapping(t: DType, a: str, symbol: str, b: str) -> str:
    unsigned = UNSIGNED[t]
    return f"({t.c_type})(({unsigned}){a} {symbol} ({unsigned}){b})"


def _max(t: DType, a: str, b: str) -> str:
    if t.is_float:  # NaN wins, as numpy.maximum
        return f"(({a} > {b} || {a} != {a}) ? {a} : {b})"
    return f"({a} > {b} ? {a} : {b})"


def _min(t: DType, a: str, b: str) -> str:
    if t.is_float:
        return f"(({a} < {b} || {a} != {a}) ? {a} : {b})"
    return f"({a} < {b} ? {a} : {b})"


def _arithmetic(name: str, t: DType, a: str, b: str, op: OpInstance) -> tuple[str, bool]:
    """(C expression, uses hg_tensor.h) of a two-operand arithmetic operator on dtype `t`."""
    symbol = {"Add": "+", "Sub": "-", "Mul": "*", "Sum": "+"}.get(name)
    if symbol is not None:
        return (f"{a} {symbol} {b}" if t.is_float else _wrapping(t, a, symbol, b)), False
    if name == "Div":
        return (f"{a} / {b}", False) if t.is_float else (f"hg_div_{SUFFIX[t]}({a}, {b})", True)
    if name == "Mod":
        fmod = int(op.attr("fmod", 0))
        if t.is_float:
            return (f"{libm('fmod', t)}({a}, {b})", False) if fmod else (f"hg_mod_{SUFFIX[t]}({a}, {b})", True)
        return f"hg_{'fmod' if fmod else 'mod'}_{SUFFIX[t]}({a}, {b})", True
    if name == "Max":
        return _max(t, a, b), False
    if name == "Min":
        return _min(t, a, b), False
    raise Unsupported(f"{name} on {t.label}")


def _pow(op: OpInstance, a: str, b: str) -> tuple[str, bool]:
    base, exponent = op.input_types[0].dtype, op.input_types[1].dtype
    constant = op.constant(1)
    if base.is_float and constant is not None and constant.size == 1 and scalar_value(constant, "") == 2:
        return f"{a} * {a}", False
    if base.is_float and exponent.is_float:
        return f"{libm('pow', base)}({a}, ({base.c_type}){b})", False
    if base.is_float:  # numpy computes float ** int in double
        return f"({base.c_type})pow((double){a}, (double){b})", False
    if exponent.is_float:  # int ** float: in double, then back to the base's type
        return f"({base.c_type})hg_f2i64(pow((double){a}, (double){b}))", True
    return f"hg_pow_{SUFFIX[base]}({a}, ({base.c_type}){b})", True


def _bitshift(t: DType, direction: str, a: str, b: str) -> str:
    """Shifts by a negative or too large amount give 0 (or -1 for a negative value shifted right)."""
    width = 8 * t.itemsize
    signed = t not in UNSIGNED_DTYPES
    out_of_range = f"({b} < 0 || {b} >= {width})" if signed else f"{b} >= {width}"
    if direction == "LEFT":
        return f"{out_of_range} ? ({t.c_type})0 : ({t.c_type})(({UNSIGNED[t]}){a} << {b})"
    if direction != "RIGHT":
        raise Unsupported(f"BitShift direction {direction!r}; accepted: 'LEFT', 'RIGHT'")
    saturated = f"({a} < 0 ? ({t.c_type})-1 : ({t.c_type})0)" if signed else "0"
    return f"{out_of_range} ? {saturated} : ({t.c_type})({a} >> {b})"


def _check_types(op: OpInstance, accepted) -> DType:
    dtype = op.input_types[0].dtype
    for t in op.input_types:
        if t is None or t.dtype is not dtype:
            raise Unsupported(f"{op.node.op} on mixed input types")
    if dtype not in accepted:
        raise Unsupported(f"{op.node.op} on {dtype.label}; accepted: {', '.join(d.label for d in accepted)}")
    return dtype


def _expression(op: OpInstance, names: list[str]) -> tuple[str, bool, int]:
    """(expression, uses helpers, flops per element)."""
    name = op.node.op
    if name == "Pow":
        for i, what in ((0, "base"), (1, "exponent")):
            if op.input_types[i].dtype not in NUMERIC:
                raise Unsupported(f"Pow {what} of type {op.input_types[i].dtype.label}")
        expression, helpers = _pow(op, *names)
        return expression, helpers, 1
    if name in COMPARISONS:
        _check_types(op, (*NUMERIC, DType.BOOL))
        return f"{names[0]} {COMPARISONS[name]} {names[1]}", False, 1
    if name in LOGICAL:
        _check_types(op, (DType.BOOL,))
        return f"{names[0]} {LOGICAL[name]} {names[1]}", False, 1
    if name in BITWISE:
        t = _check_types(op, INTEGER_DTYPES)
        return f"({t.c_type})({names[0]} {BITWISE[name]} {names[1]})", False, 1
    if name == "BitShift":
        t = _check_types(op, INTEGER_DTYPES)
        return _bitshift(t, op.attr("direction", "LEFT"), *names), False, 1
    if name == "PRelu":
        t = _check_types(op, (DType.FLOAT32, DType.FLOAT64))
        zero = literal(0, t)
        return f"{names[0]} < {zero} ? {names[0]} * {names[1]} : {names[0]}", False, 2
    t = _check_types(op, NUMERIC)
    if name == "Mean":
        if not t.is_float:
            raise Unsupported(f"Mean on {t.label}; accepted: float32, float64")
        total = " + ".join(names)
        return f"({total}) / {literal(len(names), t)}", False, len(names)
    if len(names) == 1:  # Max/Min/Sum of one input
        return names[0], False, 0
    if name == "Sum" and not t.is_float:
        unsigned = UNSIGNED[t]
        return f"({t.c_type})({' + '.join(f'({unsigned}){n}' for n in names)})", False, len(names) - 1
    if name in VARIADIC:
        return reduce(lambda acc, n: _arithmetic(name, t, acc, n, op)[0], names), False, len(names) - 1
    expression, helpers = _arithmetic(name, t, names[0], names[1], op)
    return expression, helpers, 1


def lower(op: OpInstance) -> Kernel:
    present = [i for i in range(len(op.node.inputs)) if op.has_input(i)]
    names = ["a", "b"] if len(present) == 2 and op.node.op not in VARIADIC else [f"x{i}" for i in present]
    if op.node.op not in VARIADIC and len(present) != 2:
        raise Unsupported(f"{op.node.op} with {len(present)} inputs; accepted: 2")
    expression, helpers, flops = _expression(op, names)
    out_type = op.output_types[0]
    check_epilogue(op.epilogue, out_type.dtype, op.node.op)
    operands = [Operand(n, i, op.input_types[i]) for n, i in zip(names, present)]
    return elementwise_kernel(
        operands,
        out_type,
        expression,
        out_arg=len(op.node.inputs),
        flops_per_element=flops,
        epilogue=op.epilogue,
        helpers=helpers,
    )


_OPS = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "PRelu",
    "BitShift",
    *VARIADIC,
    *COMPARISONS,
    *LOGICAL,
    *BITWISE,
)
CHUNKED = ("Add", "Sub", "Mul", "Div")  # the device model tiles these in contiguous chunks (hetgen/spec/tile_shapes.py)
DIVIDING = ("Div", "Mod")  # input 1 divides (hetgen/runtime/inputs.py keeps it non-zero)
DEFS = tuple(
    OpDef(
        op,
        lower,
        fusable_epilogue=op == "Add",
        tiling=Tiling.CHUNKS if op in CHUNKED else Tiling.WHOLE,
        input_roles=InputRoles(divisor=1) if op in DIVIDING else NO_ROLES,
    )
    for op in sorted(_OPS)
)
