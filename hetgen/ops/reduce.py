"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp.

The input is walked once in memory order. The reduced and kept dimensions are collapsed into
alternating runs; each output element accumulates in place in the output buffer (initialised with
the reduction's identity), and when the innermost run is reduced the accumulator lives in a
register for that run. A finishing pass applies the post-transform (mean's division, L2's sqrt).
ReduceLogSumExp first finds each output's largest finite input (kept in the scratch buffer) and
sums exp(x - max), so large inputs do not overflow.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.ir import DType, TensorType
from hetgen.ops._common import (
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    UNSIGNED,
    UNSIGNED_DTYPES,
    collapse,
    contiguous_strides,
    highest,
    index_expr,
    libm,
    literal,
    loops_for,
    lowest,
    normalize_axis,
)
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported

NUMERIC = (*FLOAT_DTYPES, *INTEGER_DTYPES)


@dataclass(frozen=True)
class Pass:
    """One sweep over the input: buf[o] = combine(buf[o], value(x)) from buf[o] = init."""

    buf: str  # "out" or "shift"
    init: str
    value: str  # format string of the element's contribution, from `x` (and {s}, the output's shift)
    combine: str  # format string of {acc} and {v}
    finish: str | None = None  # format string of {acc} (and {s}), applied to each output after the sweep


def _sum(t: DType) -> str:
    if t.is_float:
        return "{acc} + {v}"
    return f"({t.c_type})(({UNSIGNED[t]}){{acc}} + ({UNSIGNED[t]}){{v}})"


def _prod(t: DType) -> str:
    if t.is_float:
        return "{acc} * {v}"
    return f"({t.c_type})(({UNSIGNED[t]}){{acc}} * ({UNSIGNED[t]}){{v}})"


def _max(t: DType) -> str:
    nan = " || {v} != {v}" if t.is_float else ""
    return f"({{v}} > {{acc}}{nan}) ? {{v}} : {{acc}}"


def _min(t: DType) -> str:
    nan = " || {v} != {v}" if t.is_float else ""
    return f"({{v}} < {{acc}}{nan}) ? {{v}} : {{acc}}"


def _abs(t: DType) -> str:
    if t.is_float:
        return f"{libm('fabs', t)}(x)"
    if t in UNSIGNED_DTYPES:
        return "x"
    return f"x < 0 ? ({t.c_type})(0u - ({UNSIGNED[t]})x) : x"


def _square(t: DType) -> str:
    return "x * x" if t.is_float else f"({t.c_type})(({UNSIGNED[t]})x * ({UNSIGNED[t]})x)"


def _passes(name: str, t: DType, count: int) -> tuple[Pass, ...]:
    zero, one = literal(0, t), literal(1, t)
    if name == "ReduceSum":
        return (Pass("out", zero, "x", _sum(t)),)
    if name == "ReduceMean":
        return (Pass("out", zero, "x", _sum(t), f"{{acc}} / {literal(count, t)}" if count else "{acc} / 0"),)
    if name == "ReduceMax":
        return (Pass("out", lowest(t) if t is not DType.BOOL else "0", "x", _max(t)),)
    if name == "ReduceMin":
        return (Pass("out", highest(t) if t is not DType.BOOL else "1", "x", _min(t)),)
    if name == "ReduceProd":
        return (Pass("out", one, "x", _prod(t)),)
    if name == "ReduceL1":
        return (Pass("out", zero, _abs(t), _sum(t)),)
    if name == "ReduceSumSquare":
        return (Pass("out", zero, _square(t), _sum(t)),)
    if not t.is_float:
        raise Unsupported(f"{name} on {t.label}; accepted: float32, float64")
    if name == "ReduceL2":
        return (Pass("out", zero, "x * x", "{acc} + {v}", f"{libm('sqrt', t)}({{acc}})"),)
    if name == "ReduceLogSum":
        return (Pass("out", zero, "x", "{acc} + {v}", f"{libm('log', t)}({{acc}})"),)
    if name == "ReduceLogSumExp":
        finite_max = f"({{v}} > {{acc}} && {libm('fabs', t)}({{v}}) != {literal(float('inf'), t)}) ? {{v}} : {{acc}}"
        return (
            # the largest finite input; 0 when there is none, so exp(x - s) stays defined
            Pass("shift", lowest(t), "x", finite_max, f"{{acc}} == {lowest(t)} ? {zero} : {{acc}}"),
            Pass("out", zero, f"{libm('exp', t)}(x - {{s}})", "{acc} + {v}", f"{libm('log', t)}({{acc}}) + {{s}}"),
        )
    raise Unsupported(f"{name} is not a reduction")


def reduced_axes(op: OpInstance, rank: int) -> tuple[int, ...]:
    """The normalised, sorted axes to reduce (all of them when none are given, unless noop)."""
    if op.has_input(1):
        value = op.constant(1)
        if value is None:
            raise Unsupported(f"{op.node.op} axes must be a compile-time constant")
        axes = [int(a) for a in value.reshape(-1)]
    else:
        axes = list(op.attr("axes", ()) or ())
    if not axes:
        return () if op.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({normalize_axis(a, rank, "reduce axis") for a in axes}))


def lower(op: OpInstance) -> Kernel:
    x_type: TensorType = op.input_types[0]
    out_type = op.output_types[0]
    t = x_type.dtype
    if t not in NUMERIC and not (t is DType.BOOL and op.node.op in ("ReduceMax", "ReduceMin")):
        raise Unsupported(f"{op.node.op} on {t.label}")
    shape = x_type.shape
    axes = reduced_axes(op, len(shape))
    kept_shape = [1 if d in axes else e for d, e in enumerate(shape)]
    out_strides = [0 if d in axes else s for d, s in enumerate(contiguous_strides(kept_shape))]
    extents, (in_strides, o_strides) = collapse(shape, [contiguous_strides(shape), out_strides])
    count = x_type.size // out_type.size if out_type.size else 0
    passes = _passes(op.node.op, t, count)
    loops = loops_for(extents)
    # With the innermost run reduced, the accumulator stays in a register across it.
    hoist = bool(loops) and o_strides[-1] == 0
    outer = loops[:-1] if hoist else loops
    # A long reduced run accumulates in one lane per element of a 64-byte vector.
    lanes = 64 // t.itemsize if hoist and loops[-1].extent >= 2 * (64 // t.itemsize) else 0
    out_index = index_expr(loops, o_strides)
    params = {
        "empty": out_type.size == 0,
        "sweep": x_type.size > 0,
        "ctype": t.c_type,
        "out_arg": len(op.node.inputs),
        "scratch_arg": len(op.node.inputs) + 1,
        "out_size": out_type.size,
        "loops": outer,
        "inner": loops[-1] if hoist else None,
        "lanes": lanes,
        "lanes_end": loops[-1].extent // lanes * lanes if lanes else 0,
        "in_index": index_expr(loops, in_strides),
        "out_index": out_index,
        "passes": [_pass_view(p, out_index) for p in passes],
        "shifted": any(p.buf == "shift" for p in passes),
    }
    return Kernel(
        template="kernels/reduce.c.j2",
        params=params,
        scratch_bytes=out_type.nbytes if params["shifted"] else 0,
        flops=x_type.size * len(passes) * 2,
        bytes_accessed=x_type.nbytes * len(passes) + out_type.nbytes,
    )


def _pass_view(p: Pass, out_index: str) -> dict:
    return {
        "buf": p.buf,
        "init": p.init,
        "value": p.value.format(s=f"shift[{out_index}]"),
        "combine": p.combine.format(acc="acc", v="v"),
        "combine_lane": p.combine.format(acc="lane[l]", v="v"),
        "combine_in_place": p.combine.format(acc=f"{p.buf}[{out_index}]", v="v"),
        "finish": p.finish.format(acc=f"{p.buf}[i]", s="shift[i]") if p.finish else None,
    }


REDUCTIONS = (
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
)
AXES_INPUT_SINCE = 18  # ReduceSum's axes became an input at 13, the others' at 18
DEFS = tuple(
    OpDef(op, lower, const_inputs=(1,), axes_input_since=13 if op == "ReduceSum" else AXES_INPUT_SINCE)
    for op in REDUCTIONS
)
