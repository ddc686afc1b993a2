"""Random valid ONNX graphs for differential fuzzing against onnxruntime (see tests/fuzz_cases.py).

`models()` is a hypothesis strategy of (model, feeds, builders used): a few operators hetgen
registers (elementwise with broadcasting, Conv, Gemm/MatMul, pooling, normalisations, reductions, data
movement, Gather, Where, Cast, Resize, decomposed LayerNorm/Gelu...) with random shapes, attributes
inside each operator's valid domain, and dtypes onnxruntime has kernels for. One function per
operator family (`op_*`), registered with a weight in BUILDERS.

Comparisons are only asked of values both sides compute the same way: a float is cast to an integer,
compared, rounded or arg-maxed only when it is bit-exact on both sides (a graph input, or produced
only by data movement and exact operators); otherwise a last-ulp difference would flip the result.

Unusual names (`*/`, quotes, backslashes, `$`, `:`, spaces, non-ASCII, very long, near-collisions)
are on by default; `HG_FUZZ_NAMES=0` turns them off.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

OPSET = 20
REPO = Path(__file__).resolve().parent.parent
SHIPPED_PLATFORMS = tuple(sorted(p.stem for p in (REPO / "platforms").glob("*.yaml")))  # all of platforms/
RUNTIMES = ("vm", "graph", "aot")

FLOAT = np.dtype("float32")
INT64 = np.dtype("int64")
INT32 = np.dtype("int32")
BOOL = np.dtype("bool")
UINT8 = np.dtype("uint8")
DOUBLE = np.dtype("float64")
INT8 = np.dtype("int8")
INTS = (INT64, INT32)

ONNX_TYPE = {FLOAT: TensorProto.FLOAT, INT64: TensorProto.INT64, INT32: TensorProto.INT32, BOOL: TensorProto.BOOL}
ONNX_TYPE[UINT8] = TensorProto.UINT8
ONNX_TYPE[DOUBLE] = TensorProto.DOUBLE
ONNX_TYPE[INT8] = TensorProto.INT8

# Pieces of hostile names: comment and string terminators, escapes, trigraphs, ninja and path
# metacharacters, preprocessor text, non-ASCII, and spellings that collide once made identifiers.
NAME_PIECES = (
    "a*/b",
    "/*c",
    'q"uote',
    "back\\slash",
    "??/",
    "$var",
    "co:lon",
    "sp ace",
    "#define X 1",
    "ünï©ødé",
    "数据",
    "new\nline",
    "tab\tbed",
    "it's",
    "t-1",
    "t_1",
    "t.1",
    "%d%s",
    "{{x}}",
    "../up",
    "int",
    "L" * 150,
)


def names_enabled() -> bool:
    return os.environ.get("HG_FUZZ_NAMES", "1") != "0"


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    exact: bool  # bit-identical in hetgen and onnxruntime (safe to compare, cast, round, arg-max)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class GraphBuilder:
    """Grows a graph op by op from hypothesis draws; every tensor it makes has a known shape."""

    def __init__(self, draw, hostile_names: bool):
        self.draw = draw
        self.hostile_names = hostile_names
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[Tensor] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.pool: list[Tensor] = []
        self.used: set[str] = set()
        self.rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    # -- names and tensors --
    def name(self, hint: str) -> str:
        base = hint
        if self.hostile_names and self.draw(st.booleans()):
            base = self.draw(st.sampled_from(NAME_PIECES))
        name, index = base, 0
        while name in self.used or not name:
            index += 1
            name = f"{base}{index}"
        self.used.add(name)
        return name

    def shape(self, min_rank=1, max_rank=4, max_dim=5) -> tuple[int, ...]:
        rank = self.draw(st.integers(min_rank, max_rank))
        return tuple(self.draw(st.lists(st.integers(1, max_dim), min_size=rank, max_size=rank)))

    def values(self, shape, dtype: np.dtype, low=None, high=None) -> np.ndarray:
        if dtype.kind == "f":
            scale = self.draw(st.sampled_from((1.0, 1.0, 1.0, 30.0, 1e3)))  # big values test overflow care
            array = np.asarray(self.rng.standard_normal(shape) * scale).astype(dtype)
            if low is not None:
                array = self.rng.uniform(low, high, shape).astype(dtype)
            return array
        if dtype == BOOL:
            return self.rng.integers(0, 2, shape).astype(bool)
        lo, hi = (-5, 6) if low is None else (low, high)
        if dtype == UINT8:
            lo, hi = max(lo, 0), min(hi, 255)
        return self.rng.integers(lo, hi, shape).astype(dtype)

    def new_input(self, shape, dtype: np.dtype = FLOAT, low=None, high=None) -> Tensor:
        tensor = Tensor(self.name("x"), tuple(shape), np.dtype(dtype), exact=True)
        self.inputs.append(tensor)
        self.feeds[tensor.name] = np.asarray(self.values(tensor.shape, tensor.dtype, low, high))
        self.pool.append(tensor)
        return tensor

    def const(self, array: np.ndarray, hint: str = "w") -> str:
        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape, dtype=FLOAT, low=None, high=None, hint="w") -> Tensor:
        """A random initializer, or (sometimes) a graph input, as an operand."""
        if self.draw(st.integers(0, 3)) == 0:
            return self.new_input(shape, dtype, low, high)
        values = self.values(tuple(shape), np.dtype(dtype), low, high)
        return Tensor(self.const(values, hint), tuple(shape), np.dtype(dtype), exact=True)

    def node(self, op: str, inputs, outputs: list[tuple[tuple[int, ...], np.dtype, bool]], **attrs) -> list[Tensor]:
        made = [Tensor(self.name("t"), tuple(s), np.dtype(d), exact) for s, d, exact in outputs]
        node_name = "" if self.draw(st.integers(0, 9)) == 0 else self.name("n")
        names = [i if isinstance(i, str) else i.name for i in inputs]
        self.nodes.append(helper.make_node(op, names, [t.name for t in made], name=node_name, **attrs))
        self.pool.extend(made)
        return made

    def optional(self, *inputs) -> list:
        """A node's inputs where None is an omitted optional input: written "" (as exporters do in
        the middle) and, when it ends the list, sometimes "" and sometimes left off."""
        names = ["" if i is None else i for i in inputs]
        if self.draw(st.booleans()):
            while names and names[-1] == "":
                names.pop()
        return names

    def node1(self, op, inputs, shape, dtype, exact, **attrs) -> Tensor:
        return self.node(op, inputs, [(shape, dtype, exact)], **attrs)[0]

    # -- picking operands --
    def pick(self, dtypes=(FLOAT,), min_rank=0, max_rank=6, exact=None, fresh_shape=None) -> Tensor:
        """A tensor of the pool that fits, else a new graph input (recent tensors preferred)."""
        fits = [
            t
            for t in self.pool
            if t.dtype in dtypes and min_rank <= t.rank <= max_rank and (exact is None or t.exact == exact)
        ]
        if fits and self.draw(st.integers(0, 4)) > 0:
            recent = fits[-4:]
            return self.draw(st.sampled_from(recent))
        shape = fresh_shape or self.shape(max(min_rank, 1), min(max_rank, 4))
        return self.new_input(shape, self.draw(st.sampled_from(dtypes)))


# -- shapes --
def broadcast_partner(g: GraphBuilder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with `shape`: a suffix of it with some dims 1, and where `shape`
    has a 1, sometimes a bigger dim (two-way broadcasting)."""
    drop = g.draw(st.integers(0, len(shape)))
    partner = []
    for dim in shape[drop:]:
        choice = g.draw(st.integers(0, 3))
        if choice == 0:
            partner.append(1)
        elif choice == 1 and dim == 1:
            partner.append(g.draw(st.integers(2, 4)))
        else:
            partner.append(dim)
    if drop == 0 and len(shape) < 4 and g.draw(st.integers(0, 5)) == 0:
        partner = [1, *partner]  # a higher rank than `shape`
    return tuple(partner)


def conv_out(size, kernel, stride, pad_begin, pad_end, dilation) -> int:
    return (size + pad_begin + pad_end - dilation * (kernel - 1) - 1) // stride + 1


# -- operator builders: each adds one or a few nodes to the graph --
UNARY_ANY = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "Softplus", "Softsign", "Sin", "Cos", "Atan")
UNARY_ALPHA = {"LeakyRelu": (0.01, 0.5), "Elu": (0.1, 2.0), "Celu": (0.5, 2.0), "ThresholdedRelu": (0.0, 1.0)}
UNARY_EXACT = ("Floor", "Ceil", "Round", "Sign", "Identity")
UNARY_POSITIVE = ("Sqrt", "Log", "Reciprocal")


def positive(g: GraphBuilder, x: Tensor) -> Tensor:
    """|x| + 0.5: a valid operand for Sqrt, Log, Div, Pow."""
    a = g.node1("Abs", [x], x.shape, FLOAT, x.exact)
    half = g.const(np.array(0.5, np.float32), "half")
    return g.node1("Add", [a, half], x.shape, FLOAT, False)


def op_unary(g: GraphBuilder):
    kind = g.draw(st.integers(0, 5))
    if kind == 0:
        x = g.pick((FLOAT,), exact=True)
        op = g.draw(st.sampled_from(UNARY_EXACT))
        g.node1(op, [x], x.shape, FLOAT, True)
    elif kind == 1:
        x = g.pick((FLOAT,))
        op = g.draw(st.sampled_from(UNARY_POSITIVE))
        g.node1(op, [positive(g, x)], x.shape, FLOAT, False)
    elif kind == 2:
        x = g.pick((FLOAT,))
        op, (lo, hi) = g.draw(st.sampled_from(sorted(UNARY_ALPHA.items())))
        g.node1(op, [x], x.shape, FLOAT, False, alpha=g.draw(st.floats(lo, hi)))
    elif kind == 3:
        x = g.pick((FLOAT,))
        op = g.draw(st.sampled_from(("HardSigmoid", "HardSwish", "Gelu", "Mish", "Selu", "Shrink", "Exp")))
        attrs = {}
        if op == "HardSigmoid":
            attrs = {"alpha": g.draw(st.floats(0.1, 0.5)), "beta": g.draw(st.floats(0.2, 0.8))}
        elif op == "Gelu":
            attrs = {"approximate": g.draw(st.sampled_from(("none", "tanh")))}
        elif op == "Shrink":
            attrs = {"lambd": g.draw(st.floats(0.0, 1.0)), "bias": g.draw(st.floats(0.0, 1.0))}
        elif op == "Exp":  # keep it finite
            x = g.node1("Tanh", [x], x.shape, FLOAT, False)
        g.node1(op, [x], x.shape, FLOAT, False, **attrs)
    elif kind == 4:
        x = g.pick(INTS)
        op = g.draw(st.sampled_from(("Abs", "Neg", "Sign")))
        g.node1(op, [x], x.shape, x.dtype, True)
    else:
        x = g.pick((FLOAT,))
        op = g.draw(st.sampled_from(UNARY_ANY))
        g.node1(op, [x], x.shape, FLOAT, x.exact and op in ("Relu", "Abs", "Neg"))


def op_binary(g: GraphBuilder):
    dtype = g.draw(st.sampled_from((FLOAT, FLOAT, FLOAT, INT64, INT32)))
    a = g.pick((dtype,))
    if dtype == FLOAT:
        op = g.draw(st.sampled_from(("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu", "Mod")))
    else:
        op = g.draw(st.sampled_from(("Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "Pow")))
    partner = broadcast_partner(g, a.shape)
    if op == "PRelu":  # the slope broadcasts to x (one-way)
        partner = tuple(1 if g.draw(st.booleans()) else d for d in a.shape[g.draw(st.integers(0, a.rank)) :])
    same = [t for t in g.pool if t.dtype == dtype and _broadcasts(t.shape, a.shape)]  # a itself too (x * x)
    if op in ("Div", "Mod", "Pow"):  # a divisor or exponent in a safe range
        if dtype == FLOAT:
            b = g.weight(partner, FLOAT, 0.5, 2.0) if op != "Pow" else g.weight(partner, FLOAT, -1.5, 2.5)
            if op == "Pow":
                a = positive(g, a)
        else:
            b = g.weight(partner, dtype, 1, 4) if op != "Pow" else g.weight(partner, dtype, 0, 3)
            if op == "Mod" and g.draw(st.booleans()):
                b = g.weight(partner, dtype, -4, -1)
    elif same and g.draw(st.booleans()):
        b = g.draw(st.sampled_from(same[-3:]))
    else:
        b = g.weight(partner, dtype)
    if op == "PRelu" and not _one_way(b.shape, a.shape):
        b = g.weight(partner, dtype)
    if g.draw(st.booleans()) and op not in ("Div", "Mod", "Pow", "PRelu"):
        a, b = b, a
    out = np.broadcast_shapes(a.shape, b.shape)
    exact = a.exact and b.exact and (dtype != FLOAT or op in ("Max", "Min"))
    attrs = {"fmod": 1} if op == "Mod" and (dtype == FLOAT or g.draw(st.booleans())) else {}
    g.node1(op, [a, b], out, dtype, exact, **attrs)


def _broadcasts(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _one_way(small, big) -> bool:
    return _broadcasts(small, big) and np.broadcast_shapes(small, big) == tuple(big)


def op_variadic(g: GraphBuilder):
    dtype = g.draw(st.sampled_from((FLOAT, INT64, INT32)))
    op = g.draw(st.sampled_from(("Sum", "Mean", "Max", "Min") if dtype == FLOAT else ("Max", "Min")))  # Sum: floats
    a = g.pick((dtype,))
    operands = [a]
    for _ in range(g.draw(st.integers(1, 3))):
        partner = broadcast_partner(g, a.shape)
        if not _broadcasts(partner, np.broadcast_shapes(*(t.shape for t in operands))):
            partner = a.shape
        operands.append(g.weight(partner, dtype))
    out = np.broadcast_shapes(*(t.shape for t in operands))
    exact = all(t.exact for t in operands) and (dtype != FLOAT or op in ("Max", "Min"))
    g.node1(op, operands, out, dtype, exact)


def op_compare_where(g: GraphBuilder):
    dtype = g.draw(st.sampled_from((FLOAT, FLOAT, INT64, INT32)))
    a = g.pick((dtype,), exact=True)
    op = g.draw(st.sampled_from(("Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal")))
    if op == "Equal" and dtype == FLOAT:
        b = a
    else:
        b = g.weight(broadcast_partner(g, a.shape), dtype)
    cond = g.node1(op, [a, b], np.broadcast_shapes(a.shape, b.shape), BOOL, True)
    kind = g.draw(st.integers(0, 3))
    if kind == 0:  # boolean logic
        other = g.pick((BOOL,), exact=True)
        if _broadcasts(other.shape, cond.shape):
            logic = g.draw(st.sampled_from(("And", "Or", "Xor")))
            cond = g.node1(logic, [cond, other], np.broadcast_shapes(cond.shape, other.shape), BOOL, True)
        else:
            cond = g.node1("Not", [cond], cond.shape, BOOL, True)
    if kind == 1:
        g.node1("Cast", [cond], cond.shape, FLOAT, True, to=TensorProto.FLOAT)
        return
    x_type = g.draw(st.sampled_from((FLOAT, INT64)))
    x = g.pick((x_type,))
    y = g.weight(broadcast_partner(g, x.shape), x_type)
    if not _broadcasts(cond.shape, np.broadcast_shapes(x.shape, y.shape)):
        x, y = g.weight(cond.shape, x_type), g.weight(broadcast_partner(g, cond.shape), x_type)
    out = np.broadcast_shapes(cond.shape, x.shape, y.shape)
    g.node1("Where", [cond, x, y], out, x_type, x.exact and y.exact)


def op_clip(g: GraphBuilder):
    dtype = g.draw(st.sampled_from((FLOAT, FLOAT, INT64, INT32)))
    x = g.pick((dtype,))
    lo = g.draw(st.floats(-2, 0)) if dtype == FLOAT else g.draw(st.integers(-3, 0))
    hi = lo + (g.draw(st.floats(0, 3)) if dtype == FLOAT else g.draw(st.integers(0, 4)))
    which = g.draw(st.integers(0, 3))
    low = g.const(np.array(lo, dtype), "lo") if which in (1, 3) else None
    high = g.const(np.array(hi, dtype), "hi") if which in (2, 3) else None
    g.node1("Clip", g.optional(x, low, high), x.shape, dtype, x.exact)


def op_cast(g: GraphBuilder):
    kind = g.draw(st.integers(0, 4))
    if kind == 0:  # float -> int, only of exact values (a last-ulp difference would change the integer)
        x = g.pick((FLOAT,), exact=True)
        to = g.draw(st.sampled_from((INT64, INT32)))
    elif kind == 1:
        x = g.pick((INT64, INT32, UINT8, BOOL))
        to = g.draw(st.sampled_from((FLOAT, INT64, INT32)))
    elif kind == 2:
        x = g.pick((FLOAT,))
        to = FLOAT
    elif kind == 3:
        x = g.pick((UINT8,))
        to = g.draw(st.sampled_from((FLOAT, INT32, UINT8)))
    else:  # int8 both ways (out-of-range integers wrap, in C as in onnxruntime)
        x = g.pick((INT64, INT32, INT8))
        to = g.draw(st.sampled_from((FLOAT, INT64))) if x.dtype == INT8 else INT8
    g.node1("Cast", [x], x.shape, to, x.exact, to=ONNX_TYPE[to])


def op_conv(g: GraphBuilder):
    spatial = g.draw(st.sampled_from((2, 2, 1)))
    x = g.pick((FLOAT,), min_rank=2 + spatial, max_rank=2 + spatial)
    big = spatial == 2 and g.draw(st.integers(0, 3)) == 0  # bigger than small NPU SRAMs: tiled or refused
    if big:
        channels = g.draw(st.sampled_from((8, 16, 32)))
        x = g.new_input((1, channels, g.draw(st.integers(12, 40)), g.draw(st.integers(12, 40))), FLOAT)
    elif x.rank != 2 + spatial:
        x = g.new_input((1, g.draw(st.integers(1, 6)), *g.shape(spatial, spatial, 9)), FLOAT)
    channels = x.shape[1]
    groups = g.draw(st.sampled_from([d for d in range(1, channels + 1) if channels % d == 0]))
    out_channels = groups * g.draw(st.integers(1, 3))
    if big and groups < channels:
        out_channels = groups * g.draw(st.integers(1, max(1, 32 // groups)))
    kernel, strides, dilations, pads = [], [], [], []
    for size in x.shape[2:]:
        k = g.draw(st.integers(1, min(size + 2, 4)))
        d = g.draw(st.integers(1, 2))
        s = g.draw(st.integers(1, 2))
        lo, hi = g.draw(st.integers(0, 2)), g.draw(st.integers(0, 2))
        if conv_out(size, k, s, lo, hi, d) < 1:
            d, lo, hi = 1, k - 1, k - 1
        kernel.append(k), strides.append(s), dilations.append(d), pads.append((lo, hi))
    auto_pad = g.draw(st.sampled_from(("NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        dilations = [1] * spatial
        out = [-(-size // s) for size, s in zip(x.shape[2:], strides)]
    elif auto_pad == "VALID":
        dilations = [1] * spatial
        out = [conv_out(size, k, s, 0, 0, 1) for size, k, s in zip(x.shape[2:], kernel, strides)]
        if min(out) < 1:
            auto_pad, out = "SAME_UPPER", [-(-size // s) for size, s in zip(x.shape[2:], strides)]
    else:
        out = [
            conv_out(size, k, s, p[0], p[1], d)
            for size, k, s, p, d in zip(x.shape[2:], kernel, strides, pads, dilations)
        ]
    w = g.weight((out_channels, channels // groups, *kernel), FLOAT, hint="conv_w")
    inputs = g.optional(x, w, g.weight((out_channels,), FLOAT, hint="conv_b") if g.draw(st.booleans()) else None)
    attrs = {"group": groups, "strides": strides}
    if auto_pad == "NOTSET":
        attrs["pads"] = [p[0] for p in pads] + [p[1] for p in pads]
        attrs["dilations"] = dilations
    else:
        attrs["auto_pad"] = auto_pad
    if g.draw(st.booleans()):
        attrs["kernel_shape"] = kernel
    g.node1("Conv", inputs, (x.shape[0], out_channels, *out), FLOAT, False, **attrs)


def op_conv_transpose(g: GraphBuilder):
    x = g.pick((FLOAT,), min_rank=4, max_rank=4)
    if x.rank != 4:
        x = g.new_input((1, g.draw(st.integers(1, 4)), *g.shape(2, 2, 5)), FLOAT)
    channels = x.shape[1]
    groups = g.draw(st.sampled_from([d for d in range(1, channels + 1) if channels % d == 0]))
    per_group = g.draw(st.integers(1, 2))
    kernel = [g.draw(st.integers(1, 3)) for _ in range(2)]
    strides = [g.draw(st.integers(1, 2)) for _ in range(2)]
    output_padding = [g.draw(st.integers(0, s - 1)) for s in strides]
    pads = [g.draw(st.integers(0, k - 1)) for k in kernel] + [g.draw(st.integers(0, k - 1)) for k in kernel]
    out = [
        s * (size - 1) + op + (k - 1) + 1 - pb - pe
        for size, s, op, k, pb, pe in zip(x.shape[2:], strides, output_padding, kernel, pads[:2], pads[2:])
    ]
    if min(out) < 1:
        pads, out = (
            [0, 0, 0, 0],
            [s * (size - 1) + op + k for size, s, op, k in zip(x.shape[2:], strides, output_padding, kernel)],
        )
    w = g.weight((channels, per_group, *kernel), FLOAT, hint="deconv_w")
    inputs = g.optional(x, w, g.weight((per_group * groups,), FLOAT) if g.draw(st.booleans()) else None)
    g.node1(
        "ConvTranspose", inputs, (x.shape[0], per_group * groups, *out), FLOAT, False,
        group=groups, strides=strides, pads=pads, output_padding=output_padding, kernel_shape=kernel,
    )  # fmt: skip


def op_gemm(g: GraphBuilder):
    a = g.pick((FLOAT,), min_rank=2, max_rank=2)
    trans_a = g.draw(st.integers(0, 1))
    m, k = a.shape[::-1] if trans_a else a.shape
    n = g.draw(st.integers(1, 6))
    trans_b = g.draw(st.integers(0, 1))
    b = g.weight((n, k) if trans_b else (k, n), FLOAT, hint="gemm_b")
    bias = None
    if g.draw(st.booleans()):
        bias = g.weight(g.draw(st.sampled_from(((n,), (1, n), (m, n), (m, 1), ()))), FLOAT, hint="gemm_c")
    inputs = g.optional(a, b, bias)
    attrs = {"transA": trans_a, "transB": trans_b}
    if g.draw(st.booleans()):
        attrs |= {"alpha": g.draw(st.floats(-2, 2)), "beta": g.draw(st.floats(-2, 2))}
    g.node1("Gemm", inputs, (m, n), FLOAT, False, **attrs)


def op_matmul(g: GraphBuilder):
    a = g.pick((FLOAT,), min_rank=1, max_rank=4)
    n = g.draw(st.integers(1, 6))
    if g.draw(st.integers(0, 3)) == 0:  # bigger than small NPU SRAMs
        a = g.new_input((g.draw(st.integers(16, 96)), g.draw(st.integers(32, 160))), FLOAT)
        n = g.draw(st.integers(16, 96))
    k = a.shape[-1]
    kind = g.draw(st.integers(0, 3))
    if kind == 0:  # vector on the right
        b_shape = (k,)
    elif kind == 1 and a.rank >= 3:  # batched, broadcast batch dims
        b_shape = (*(1 if g.draw(st.booleans()) else d for d in a.shape[-3:-2]), k, n)
    else:
        b_shape = (k, n)
    b = g.weight(b_shape, FLOAT, hint="mm_b")
    if a.rank == 1 and len(b_shape) == 1:
        out = ()
    elif a.rank == 1:
        out = b_shape[:-2] + (n,)
    elif len(b_shape) == 1:
        out = a.shape[:-1]
    else:
        out = np.broadcast_shapes(a.shape[:-2], b_shape[:-2]) + (a.shape[-2], n)
    g.node1("MatMul", [a, b], tuple(out), FLOAT, False)


def op_pool(g: GraphBuilder):
    x = g.pick((FLOAT,), min_rank=3, max_rank=4)
    if x.rank < 3:
        x = g.new_input((1, g.draw(st.integers(1, 4)), *g.shape(2, 2, 8)), FLOAT)
    spatial = x.shape[2:]
    op = g.draw(st.sampled_from(("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")))
    if op.startswith("Global"):
        g.node1(op, [x], x.shape[:2] + (1,) * len(spatial), FLOAT, x.exact and op == "GlobalMaxPool")
        return
    kernel = [g.draw(st.integers(1, min(size, 3))) for size in spatial]
    strides = [g.draw(st.integers(1, 2)) for _ in spatial]
    dilations = [g.draw(st.integers(1, 2)) if op == "MaxPool" else 1 for _ in spatial]
    pads = [g.draw(st.integers(0, k - 1)) if k > 1 else 0 for k in kernel] + [
        g.draw(st.integers(0, k - 1)) if k > 1 else 0 for k in kernel
    ]
    ceil_mode = g.draw(st.integers(0, 1))
    out = []
    for i, size in enumerate(spatial):
        span = size + pads[i] + pads[i + len(spatial)] - dilations[i] * (kernel[i] - 1) - 1
        if span < 0:
            dilations[i], span = 1, size + pads[i] + pads[i + len(spatial)] - kernel[i]
        out.append(span // strides[i] + 1)
    if ceil_mode:  # the same unless a last window would start in the padding (rule differs by version)
        ceiled = []
        for i, size in enumerate(spatial):
            span = size + pads[i] + pads[i + len(spatial)] - dilations[i] * (kernel[i] - 1) - 1
            steps = -(-span // strides[i])
            ceiled.append(steps + 1 if steps * strides[i] < size + pads[i] else None)
        if None in ceiled:
            ceil_mode = 0
        else:
            out = ceiled
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode}
    if op == "MaxPool":
        attrs["dilations"] = dilations
    else:
        attrs["count_include_pad"] = g.draw(st.integers(0, 1))
    g.node1(op, [x], x.shape[:2] + tuple(out), FLOAT, x.exact and op == "MaxPool", **attrs)


def op_softmax(g: GraphBuilder):
    x = g.pick((FLOAT,), min_rank=1)
    op = g.draw(st.sampled_from(("Softmax", "LogSoftmax", "Hardmax")))
    if op == "Hardmax":
        x = g.pick((FLOAT,), min_rank=1, exact=True)
    axis = g.draw(st.integers(-x.rank, x.rank - 1))
    g.node1(op, [x], x.shape, FLOAT, op == "Hardmax", axis=axis)


REDUCE_FLOAT = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2")
REDUCE_FLOAT += ("ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum")


def op_reduce(g: GraphBuilder):
    dtype = g.draw(st.sampled_from((FLOAT, FLOAT, INT64, INT32)))
    x = g.pick((dtype,), min_rank=1)
    op = g.draw(st.sampled_from(REDUCE_FLOAT if dtype == FLOAT else ("ReduceSum", "ReduceMax", "ReduceMin")))
    if op == "ReduceLogSum":
        x = positive(g, x)
    axes = sorted(set(g.draw(st.lists(st.integers(0, x.rank - 1), min_size=0, max_size=x.rank))))
    keepdims = g.draw(st.integers(0, 1))
    axes_input = None
    if axes:
        signed = [a - x.rank if g.draw(st.booleans()) else a for a in axes]
        axes_input = g.const(np.array(signed, np.int64), "axes")
    inputs = g.optional(x, axes_input)
    reduced = axes or list(range(x.rank))
    shape = tuple(1 if i in reduced else d for i, d in enumerate(x.shape) if keepdims or i not in reduced)
    exact = x.exact and (dtype != FLOAT or op in ("ReduceMax", "ReduceMin"))
    g.node1(op, inputs, shape, dtype, exact, keepdims=keepdims)


def op_argmax(g: GraphBuilder):
    x = g.pick((FLOAT, INT32), min_rank=1, exact=True)
    axis = g.draw(st.integers(-x.rank, x.rank - 1))
    keepdims = g.draw(st.integers(0, 1))
    shape = tuple(1 if i == axis % x.rank else d for i, d in enumerate(x.shape) if keepdims or i != axis % x.rank)
    op = g.draw(st.sampled_from(("ArgMax", "ArgMin")))
    g.node1(op, [x], shape, INT64, True, axis=axis, keepdims=keepdims, select_last_index=g.draw(st.integers(0, 1)))


def op_concat(g: GraphBuilder):
    x = g.pick((FLOAT, INT64, BOOL, UINT8, DOUBLE, INT8), min_rank=1)
    axis = g.draw(st.integers(-x.rank, x.rank - 1))
    operands, total = [x], x.shape[axis]
    for _ in range(g.draw(st.integers(1, 3))):
        shape = list(x.shape)
        shape[axis] = g.draw(st.integers(1, 4))
        operands.append(g.weight(tuple(shape), x.dtype))
        total += shape[axis]
    g.draw(st.randoms()).shuffle(operands)
    shape = list(x.shape)
    shape[axis] = total
    g.node1("Concat", operands, tuple(shape), x.dtype, all(t.exact for t in operands), axis=axis)


def op_split(g: GraphBuilder):
    x = g.pick((FLOAT, INT64), min_rank=1)
    axis = g.draw(st.integers(-x.rank, x.rank - 1))
    size = x.shape[axis]
    if size >= 2 and g.draw(st.booleans()):
        count = g.draw(st.integers(2, min(size, 4)))
        per = -(-size // count)
        sizes = [per] * (size // per) + ([size % per] if size % per else [])
        attrs = {"num_outputs": len(sizes)}
        inputs = [x]
    else:
        cuts = sorted(g.draw(st.sets(st.integers(1, size - 1), max_size=3))) if size > 1 else []
        bounds = [0, *cuts, size]
        sizes = [b - a for a, b in zip(bounds, bounds[1:])]
        inputs, attrs = [x, g.const(np.array(sizes, np.int64), "split")], {}
    outputs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        outputs.append((tuple(shape), x.dtype, x.exact))
    g.node("Split", inputs, outputs, axis=axis, **attrs)


def op_slice(g: GraphBuilder):
    x = g.pick((FLOAT, INT64, BOOL, DOUBLE, INT8), min_rank=1)
    axes = sorted(set(g.draw(st.lists(st.integers(0, x.rank - 1), min_size=1, max_size=x.rank))))
    starts, ends, steps, shape = [], [], [], list(x.shape)
    for axis in axes:
        n = x.shape[axis]
        step = g.draw(st.sampled_from((1, 1, 2, -1, -2)))
        start = g.draw(st.integers(-n - 2, n + 2))
        end = g.draw(st.integers(-n - 2, n + 2))
        if g.draw(st.integers(0, 5)) == 0:
            end = 2**62 if step > 0 else -(2**62)
        length = len(range(*slice(start, end, step).indices(n)))
        if length == 0:  # keep tensors non-empty
            start, end = (0, n) if step > 0 else (n - 1, -n - 1)
            length = len(range(*slice(start, end, step).indices(n)))
        starts.append(start), ends.append(end), steps.append(step)
        shape[axis] = length
    signed_axes = [a - x.rank if g.draw(st.booleans()) else a for a in axes]
    axes_input = g.const(np.array(signed_axes, np.int64), "axes")
    if axes == list(range(len(axes))) and g.draw(st.booleans()):  # the default: the first len(starts) axes
        axes_input = None
    steps_input = g.const(np.array(steps, np.int64), "steps")
    if set(steps) == {1} and g.draw(st.booleans()):
        steps_input = None
    inputs = [x, g.const(np.array(starts, np.int64), "starts"), g.const(np.array(ends, np.int64), "ends")]
    g.node1("Slice", g.optional(*inputs, axes_input, steps_input), tuple(shape), x.dtype, x.exact)


def op_transpose(g: GraphBuilder):
    x = g.pick((FLOAT, INT64, BOOL, UINT8, DOUBLE, INT8), min_rank=1)
    perm = g.draw(st.permutations(range(x.rank)))
    g.node1("Transpose", [x], tuple(x.shape[p] for p in perm), x.dtype, x.exact, perm=list(perm))


def op_reshape(g: GraphBuilder):
    x = g.pick((FLOAT, INT64, BOOL), min_rank=0)
    kind = g.draw(st.integers(0, 4))
    if kind == 0 and x.rank:
        axis = g.draw(st.integers(-x.rank, x.rank)) if x.rank else 0
        lead = int(np.prod(x.shape[:axis], dtype=np.int64))
        g.node1("Flatten", [x], (lead, x.size // lead), x.dtype, x.exact, axis=axis)
        return
    if kind == 1:
        axes = sorted(set(g.draw(st.lists(st.integers(0, x.rank), min_size=1, max_size=2))))
        shape = list(x.shape)
        for a in axes:
            shape.insert(a, 1)
        g.node1("Unsqueeze", [x, g.const(np.array(axes, np.int64), "axes")], tuple(shape), x.dtype, x.exact)
        return
    if kind == 2 and 1 in x.shape:
        ones = [i for i, d in enumerate(x.shape) if d == 1]
        axes = sorted(set(g.draw(st.lists(st.sampled_from(ones), min_size=1))))
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        inputs = [x, g.const(np.array(axes, np.int64), "axes")]
        if axes == ones and g.draw(st.booleans()):  # omitted: every axis of length 1 (left off: onnxruntime
            inputs = [x]  # refuses Squeeze(x, ""), "Axes input is null")
        g.node1("Squeeze", inputs, shape, x.dtype, x.exact)
        return
    # Reshape to a random factorisation of the size, with one -1 and copied (0) dims sometimes
    size, dims = x.size, []
    while size > 1 and len(dims) < 3:
        divisor = g.draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
        dims.append(divisor)
        size //= divisor
    dims.append(size)
    target = list(dims)
    if g.draw(st.booleans()):
        target[g.draw(st.integers(0, len(target) - 1))] = -1
    for i in range(min(len(target), x.rank)):
        if target[i] == x.shape[i] and g.draw(st.integers(0, 2)) == 0:
            target[i] = 0
    g.node1("Reshape", [x, g.const(np.array(target, np.int64), "shape")], tuple(dims), x.dtype, x.exact)


def op_expand_tile(g: GraphBuilder):
    x = g.pick((FLOAT, INT64), min_rank=1, max_rank=3)
    if g.draw(st.booleans()):
        repeats = [g.draw(st.integers(1, 3)) for _ in x.shape]
        inputs = [x, g.const(np.array(repeats, np.int64), "repeats")]
        g.node1("Tile", inputs, tuple(d * r for d, r in zip(x.shape, repeats)), x.dtype, x.exact)
        return
    target = [g.draw(st.integers(2, 3)) if d == 1 and g.draw(st.booleans()) else d for d in x.shape]
    if g.draw(st.booleans()):
        target = [g.draw(st.integers(1, 2))] + target
    spec = [1 if g.draw(st.integers(0, 3)) == 0 else d for d in target]  # Expand broadcasts both ways
    out = np.broadcast_shapes(x.shape, tuple(spec))
    g.node1("Expand", [x, g.const(np.array(spec, np.int64), "shape")], out, x.dtype, x.exact)


def op_pad(g: GraphBuilder):
    x = g.pick((FLOAT, INT64), min_rank=1, max_rank=4)
    mode = g.draw(st.sampled_from(("constant", "constant", "reflect", "edge")))
    before, after = [], []
    for d in x.shape:
        limit = d - 1 if mode == "reflect" else 2
        before.append(g.draw(st.integers(0, max(limit, 0))))
        after.append(g.draw(st.integers(0, max(limit, 0))))
    pads, axes = before + after, None
    padded = [i for i in range(x.rank) if before[i] or after[i]]
    if g.draw(st.booleans()) and padded:  # only the padded axes, named by the optional `axes` input
        pads = [before[i] for i in padded] + [after[i] for i in padded]
        axes = g.const(np.array([i - x.rank if g.draw(st.booleans()) else i for i in padded], np.int64), "pad_axes")
    value = None
    if mode == "constant" and g.draw(st.booleans()):
        value = g.const(np.array(1.5 if x.dtype == FLOAT else 3, x.dtype), "value")
    inputs = g.optional(x, g.const(np.array(pads, np.int64), "pads"), value, axes)
    shape = tuple(d + b + a for d, b, a in zip(x.shape, before, after))
    g.node1("Pad", inputs, shape, x.dtype, x.exact, mode=mode)


def op_gather(g: GraphBuilder):
    x = g.pick((FLOAT, INT64), min_rank=1)
    axis = g.draw(st.integers(-x.rank, x.rank - 1))
    n = x.shape[axis]
    kind = g.draw(st.integers(0, 2))
    if kind == 2:  # GatherElements: indices of x's rank
        shape = tuple(g.draw(st.integers(1, d)) for d in x.shape)
        indices = g.rng.integers(-n, n, shape).astype(np.int64)
        out = g.node1("GatherElements", [x, g.const(indices, "idx")], shape, x.dtype, x.exact, axis=axis)
        return out
    index_shape = g.shape(0, 2, 4)
    if kind == 0:
        indices = g.const(g.rng.integers(-n, n, index_shape).astype(np.int64), "idx")
    else:  # indices fed at run time, in range (negative ones count from the end)
        indices = g.new_input(index_shape, INT64, -n, n)
    a = axis % x.rank
    g.node1("Gather", [x, indices], x.shape[:a] + tuple(index_shape) + x.shape[a + 1 :], x.dtype, x.exact, axis=axis)


def op_layernorm(g: GraphBuilder):
    x = g.pick((FLOAT,), min_rank=1)
    axis = g.draw(st.integers(-x.rank, x.rank - 1))
    normalized = x.shape[axis % x.rank :]
    bias = g.weight(normalized, FLOAT, hint="ln_bias") if g.draw(st.booleans()) else None
    inputs = g.optional(x, g.weight(normalized, FLOAT, hint="ln_scale"), bias)
    g.node1(
        "LayerNormalization", inputs, x.shape, FLOAT, False, axis=axis, epsilon=g.draw(st.sampled_from((1e-5, 1e-3)))
    )


def op_batchnorm(g: GraphBuilder):
    x = g.pick((FLOAT,), min_rank=2, max_rank=4)
    c = x.shape[1]
    op = g.draw(st.sampled_from(("BatchNormalization", "BatchNormalization", "InstanceNormalization")))
    if op == "InstanceNormalization":
        if x.rank < 3:
            x = g.new_input((1, c, g.draw(st.integers(2, 5))), FLOAT)
        inputs = [x, g.weight((c,), FLOAT), g.weight((c,), FLOAT)]
        g.node1(op, inputs, x.shape, FLOAT, False, epsilon=1e-5)
        return
    inputs = [x, g.weight((c,), FLOAT), g.weight((c,), FLOAT), g.weight((c,), FLOAT), g.weight((c,), FLOAT, 0.5, 2.0)]
    g.node1(op, inputs, x.shape, FLOAT, False, epsilon=g.draw(st.sampled_from((1e-5, 1e-3))))


def roi(g: GraphBuilder, x: Tensor) -> str | None:
    """Resize's optional roi: omitted, or given (only tf_crop_and_resize reads it)."""
    if g.draw(st.booleans()):
        return None
    return g.const(np.array([0.0] * x.rank + [1.0] * x.rank, np.float32), "roi")


def op_resize(g: GraphBuilder):
    x = g.pick((FLOAT,), min_rank=4, max_rank=4)
    if x.rank != 4:
        x = g.new_input((1, g.draw(st.integers(1, 3)), *g.shape(2, 2, 5)), FLOAT)
    mode = g.draw(st.sampled_from(("nearest", "linear", "cubic")))
    ctm = g.draw(st.sampled_from(("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")))
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = g.draw(st.sampled_from(("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")))
    if g.draw(st.booleans()):
        scales = [1.0, 1.0] + [float(g.draw(st.sampled_from((0.5, 1.0, 1.5, 2.0, 3.0)))) for _ in range(2)]
        out = tuple(int(np.floor(d * s)) for d, s in zip(x.shape, scales))
        if min(out) < 1:
            scales, out = [1.0, 1.0, 2.0, 2.0], (*x.shape[:2], x.shape[2] * 2, x.shape[3] * 2)
        if ctm in ("align_corners", "pytorch_half_pixel") and any(d * s != o for d, s, o in zip(x.shape, scales, out)):
            # The ONNX spec and reference take the resized length as in * scale (4.5 for 3 x 1.5);
            # onnxruntime takes the output's integer length (4). hetgen follows the spec, so the
            # two references disagree here: give integral products only.
            scales, out = [1.0, 1.0, 2.0, 2.0], (*x.shape[:2], x.shape[2] * 2, x.shape[3] * 2)
        inputs = g.optional(x, roi(g, x), g.const(np.array(scales, np.float32), "scales"))
    else:
        out = (*x.shape[:2], *(g.draw(st.integers(1, 8)) for _ in range(2)))
        inputs = g.optional(x, roi(g, x), None, g.const(np.array(out, np.int64), "sizes"))
        if ctm == "pytorch_half_pixel" and 1 in out[2:]:  # the references disagree here too (see above)
            attrs["coordinate_transformation_mode"] = "half_pixel"
    g.node1("Resize", inputs, out, FLOAT, False, **attrs)


def op_misc(g: GraphBuilder):
    kind = g.draw(st.integers(0, 3))
    if kind == 0:
        x = g.pick((FLOAT, INT64), min_rank=1)
        axis = g.draw(st.integers(-x.rank, x.rank - 1))
        inputs = [x, g.const(np.array(axis, np.int64), "axis")]
        attrs = {"exclusive": g.draw(st.integers(0, 1)), "reverse": g.draw(st.integers(0, 1))}
        g.node1("CumSum", inputs, x.shape, x.dtype, x.exact and x.dtype != FLOAT, **attrs)
    elif kind == 1:
        x = g.pick((FLOAT, INT64), min_rank=2)
        k = g.const(np.array(g.draw(st.integers(-3, 3)), np.int64), "k") if g.draw(st.booleans()) else None
        inputs = g.optional(x, k)
        g.node1("Trilu", inputs, x.shape, x.dtype, x.exact, upper=g.draw(st.integers(0, 1)))
    elif kind == 2:
        x = g.pick((FLOAT,), min_rank=4, max_rank=4)
        if x.rank != 4:
            x = g.new_input((1, 4 * g.draw(st.integers(1, 2)), *g.shape(2, 2, 3)), FLOAT)
        block = 2 if x.shape[1] % 4 == 0 else 1
        n, c, h, w = x.shape
        mode = g.draw(st.sampled_from(("DCR", "CRD")))
        g.node1(
            "DepthToSpace", [x], (n, c // block**2, h * block, w * block), FLOAT, x.exact, blocksize=block, mode=mode
        )
    else:
        x = g.pick((UINT8, INT32, INT64))
        y = g.weight(broadcast_partner(g, x.shape), x.dtype, 0, 8)
        op = g.draw(st.sampled_from(("BitwiseAnd", "BitwiseOr", "BitwiseXor")))
        g.node1(op, [x, y], np.broadcast_shapes(x.shape, y.shape), x.dtype, True)


def op_constant_subgraph(g: GraphBuilder):
    """An operator of initializers only (the frontend folds it), whose result feeds the graph."""
    x = g.pick((FLOAT,))
    c = Tensor(g.const(g.values(broadcast_partner(g, x.shape), FLOAT), "c"), (), FLOAT, True)
    c = Tensor(c.name, tuple(numpy_helper.to_array(g.initializers[-1]).shape), FLOAT, True)
    op = g.draw(st.sampled_from(("Relu", "Neg", "Abs", "Transpose")))
    if op == "Transpose":
        folded = g.node1(op, [c], c.shape[::-1], FLOAT, True)
    else:
        folded = g.node1(op, [c], c.shape, FLOAT, True)
    if g.draw(st.booleans()) and _broadcasts(folded.shape, x.shape):
        g.node1("Add", [x, folded], np.broadcast_shapes(x.shape, folded.shape), FLOAT, False)


def op_double(g: GraphBuilder):
    """float64 elementwise and reductions, reached by a Cast from float32 or a float64 input."""
    x = g.pick((DOUBLE, FLOAT))
    if x.dtype == FLOAT:
        x = g.node1("Cast", [x], x.shape, DOUBLE, x.exact, to=TensorProto.DOUBLE)
    kind = g.draw(st.integers(0, 3))
    if kind == 0:
        op = g.draw(st.sampled_from(("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Floor", "Sqrt", "Log")))
        if op in ("Sqrt", "Log"):
            x = g.node1("Abs", [x], x.shape, DOUBLE, x.exact)
        g.node1(op, [x], x.shape, DOUBLE, x.exact and op in ("Relu", "Abs", "Neg", "Floor"))
    elif kind == 1:
        op = g.draw(st.sampled_from(("Add", "Sub", "Mul", "Div", "Max", "Min")))
        b = g.weight(broadcast_partner(g, x.shape), DOUBLE, 0.5, 2.0)
        g.node1(op, [x, b], np.broadcast_shapes(x.shape, b.shape), DOUBLE, False)
    elif kind == 2 and x.rank:
        op = g.draw(st.sampled_from(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")))
        axis = g.draw(st.integers(0, x.rank - 1))
        shape = tuple(d for i, d in enumerate(x.shape) if i != axis)
        g.node1(op, [x, g.const(np.array([axis], np.int64), "axes")], shape, DOUBLE, False, keepdims=0)
    else:
        g.node1("Cast", [x], x.shape, FLOAT, x.exact, to=TensorProto.FLOAT)


def op_decomposed(g: GraphBuilder):
    """LayerNormalization or Gelu spelt out as exporters write them (the frontend rewrites them into
    one operator when nothing else reads an intermediate), sometimes with an intermediate read."""
    x = g.pick((FLOAT,), min_rank=1)
    if g.draw(st.booleans()):
        k = g.draw(st.integers(1, x.rank))
        axes = g.const(np.arange(x.rank - k, x.rank, dtype=np.int64), "axes")
        reduced = x.shape[: x.rank - k] + (1,) * k
        mean = g.node1("ReduceMean", [x, axes], reduced, FLOAT, False, keepdims=1)
        d = g.node1("Sub", [x, mean], x.shape, FLOAT, False)
        if g.draw(st.booleans()):
            sq = g.node1("Pow", [d, g.const(np.array(2.0, np.float32), "two")], x.shape, FLOAT, False)
        else:
            sq = g.node1("Mul", [d, d], x.shape, FLOAT, False)
        var = g.node1("ReduceMean", [sq, axes], reduced, FLOAT, False, keepdims=1)
        eps = g.const(np.array(g.draw(st.sampled_from((1e-5, 1e-3))), np.float32), "eps")
        sd = g.node1("Sqrt", [g.node1("Add", [var, eps], reduced, FLOAT, False)], reduced, FLOAT, False)
        y = g.node1("Div", [d, sd], x.shape, FLOAT, False)
        normalized = x.shape[x.rank - k :]
        if g.draw(st.booleans()):
            y = g.node1("Mul", [y, g.const(g.values(normalized, FLOAT), "gamma")], x.shape, FLOAT, False)
        if g.draw(st.booleans()):
            y = g.node1("Add", [y, g.const(g.values(normalized, FLOAT), "beta")], x.shape, FLOAT, False)
    else:
        if g.draw(st.booleans()):
            h = g.node1("Div", [x, g.const(np.array(math.sqrt(2), np.float32), "sqrt2")], x.shape, FLOAT, False)
        else:
            h = g.node1("Mul", [x, g.const(np.array(1 / math.sqrt(2), np.float32), "rsqrt2")], x.shape, FLOAT, False)
        e = g.node1("Erf", [h], x.shape, FLOAT, False)
        p = g.node1("Add", [e, g.const(np.array(1.0, np.float32), "one")], x.shape, FLOAT, False)
        half = g.const(np.array(0.5, np.float32), "half")
        if g.draw(st.booleans()):
            g.node1("Mul", [g.node1("Mul", [x, p], x.shape, FLOAT, False), half], x.shape, FLOAT, False)
        else:
            g.node1("Mul", [g.node1("Mul", [x, half], x.shape, FLOAT, False), p], x.shape, FLOAT, False)


BUILDERS = {
    "unary": (op_unary, 4),
    "binary": (op_binary, 5),
    "variadic": (op_variadic, 1),
    "compare_where": (op_compare_where, 2),
    "clip": (op_clip, 1),
    "cast": (op_cast, 1),
    "conv": (op_conv, 3),
    "conv_transpose": (op_conv_transpose, 1),
    "gemm": (op_gemm, 2),
    "matmul": (op_matmul, 2),
    "pool": (op_pool, 2),
    "softmax": (op_softmax, 1),
    "reduce": (op_reduce, 2),
    "argmax": (op_argmax, 1),
    "concat": (op_concat, 2),
    "split": (op_split, 1),
    "slice": (op_slice, 2),
    "transpose": (op_transpose, 2),
    "reshape": (op_reshape, 2),
    "expand_tile": (op_expand_tile, 1),
    "pad": (op_pad, 1),
    "gather": (op_gather, 1),
    "layernorm": (op_layernorm, 1),
    "batchnorm": (op_batchnorm, 1),
    "resize": (op_resize, 1),
    "misc": (op_misc, 1),
    "constant_subgraph": (op_constant_subgraph, 1),
    "double": (op_double, 1),
    "decomposed": (op_decomposed, 1),
}
WEIGHTED = tuple(name for name, (_, weight) in BUILDERS.items() for _ in range(weight))


def value_info(t: Tensor) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(t.name, ONNX_TYPE[t.dtype], list(t.shape))


@st.composite
def models(draw, max_ops: int = 6, hostile_names: bool | None = None):
    """(model, feeds, builder names used)."""
    g = GraphBuilder(draw, names_enabled() if hostile_names is None else hostile_names)
    first = g.draw(st.sampled_from((FLOAT, FLOAT, FLOAT, INT64, INT32, BOOL, UINT8)))
    g.new_input(g.shape(0 if draw(st.integers(0, 7)) == 0 else 1, draw(st.sampled_from((4, 4, 6))), 6), first)
    used = []
    for _ in range(draw(st.integers(min(2, max_ops), max_ops))):
        builder = WEIGHTED[g.rng.integers(len(WEIGHTED))]  # evenly: hypothesis's draws lean to the first
        used.append(builder)
        BUILDERS[builder][0](g)
    produced = [t for t in g.pool if t not in g.inputs]
    outputs = [produced[-1]]
    extra = draw(st.sets(st.sampled_from(produced), max_size=2))
    outputs += [t for t in produced if t in extra and t is not produced[-1]]
    if draw(st.integers(0, 9)) == 0:  # a graph input that is also an output
        outputs.append(g.inputs[0])
    graph = helper.make_graph(
        g.nodes, g.name("graph"), [value_info(t) for t in g.inputs], [value_info(t) for t in outputs],
        initializer=g.initializers,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    return model, g.feeds, tuple(used)
