"""The C meaning of each fusable activation, written once.

Both places an activation runs take its C expression from `ACTIVATIONS`: the standalone elementwise
kernel (`unary.py`, `clip.py`) and the epilogue fused into the kernel that produces its input
(`Epilogue.c_expression`, laid out by `templates/kernels/_epilogue.j2`). So fusing an activation
never changes a result, bit for bit (tests/test_truth.py checks every one).

Each entry builds the expression of the result from the C expression `x` of the input element, the
float dtype `t` and the activation's parameters (an `Epilogue`: kind, alpha, beta).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hetgen.ir import DType, Node
from hetgen.ops._common import libm, literal

# Activations that may be fused into the kernel that produces their input (Conv, Gemm, MatMul, Add).
FUSABLE_ACTIVATIONS = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish")


@dataclass(frozen=True)
class Epilogue:
    """A fused activation applied to each output element before it is stored.

    `kind` is an ONNX op name from FUSABLE_ACTIVATIONS; `alpha`/`beta` carry its parameters
    (LeakyRelu alpha, Clip min/max, HardSigmoid alpha/beta). Rendered by
    `templates/kernels/_epilogue.j2`.
    """

    kind: str
    alpha: float = 0.0
    beta: float = 0.0

    def c_expression(self, x: str) -> str:
        """The float32 C expression of this activation applied to `x`: the same text the
        standalone kernel uses (`hetgen/ops/_activation.py`)."""
        return activation_c(self, x)


Builder = Callable[[str, DType, Epilogue], str]


def _f(t: DType, value: float) -> str:
    return literal(value, t)


def sigmoid(x: str, t: DType) -> str:
    # float32: hg_expf (hg_kernels.h) vectorises where expf does not; its clamping keeps the
    # result within 1e-38 of 0 and 1 at the extremes.
    exp = "hg_expf" if t is DType.FLOAT32 else "exp"
    return f"({_f(t, 1)} / ({_f(t, 1)} + {exp}(-({x}))))"


def clip(x: str, lo: str | None, hi: str | None) -> str:
    """`min(max(x, lo), hi)` as numpy.clip: NaN passes through, and lo > hi gives hi. `lo`/`hi` are
    C expressions (a literal or a variable), None for no bound."""
    expression = x
    if lo is not None:
        expression = f"({expression} < {lo} ? {lo} : {expression})"
    if hi is not None:
        expression = f"({expression} > {hi} ? {hi} : {expression})"
    return expression


ACTIVATIONS: dict[str, Builder] = {
    "Relu": lambda x, t, e: f"({x} > {_f(t, 0)} ? {x} : {_f(t, 0)})",
    "LeakyRelu": lambda x, t, e: f"({x} >= {_f(t, 0)} ? {x} : {x} * {_f(t, e.alpha)})",
    "Clip": lambda x, t, e: clip(x, _f(t, e.alpha), _f(t, e.beta)),
    "Sigmoid": lambda x, t, e: sigmoid(x, t),
    "Tanh": lambda x, t, e: f"{libm('tanh', t)}({x})",
    "HardSigmoid": lambda x, t, e: clip(f"({_f(t, e.alpha)} * {x} + {_f(t, e.beta)})", _f(t, 0), _f(t, 1)),
    "HardSwish": lambda x, t, e: f"({x} * {clip(f'({_f(t, 1 / 6)} * {x} + {_f(t, 0.5)})', _f(t, 0), _f(t, 1))})",
}
assert set(ACTIVATIONS) == set(FUSABLE_ACTIVATIONS), "every fusable activation needs its C expression here"

# The ONNX defaults of each activation's attributes, as (alpha, beta).
DEFAULTS = {"LeakyRelu": (0.01, 0.0), "HardSigmoid": (0.2, 0.5)}


def activation_c(epilogue: Epilogue, x: str, t: DType = DType.FLOAT32) -> str:
    return ACTIVATIONS[epilogue.kind](x, t, epilogue)


def epilogue_from_attributes(node: Node) -> Epilogue:
    """The parameters of activation `node` read from its attributes (Clip's bounds, which may be
    inputs, are its caller's business)."""
    alpha, beta = DEFAULTS.get(node.op, (0.0, 0.0))
    if node.op in DEFAULTS:
        alpha = float(node.attr("alpha", alpha))
        beta = float(node.attr("beta", beta)) if node.op == "HardSigmoid" else beta
    return Epilogue(node.op, alpha=alpha, beta=beta)
