"""RNN, GRU and LSTM: static sequence length, every direction, layout and activation ONNX allows.

One template (`recurrent.c.j2`) runs all three: for each direction and batch row, the steps in
order (reversed for the reverse direction, from the row's own `sequence_lens` when given), each
step's gate pre-activations `x_t W^T + h_{t-1} R^T + Wb + Rb` in float32, then the cell of the
operator. Python decides every index, stride and the C expression of each activation.

ONNX gate orders: GRU z, r, h; LSTM i, o, f, c (peepholes P: i, o, f). `activation_alpha/beta` are
consumed in order by the activations that take them, as onnxruntime does.
"""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported

TEMPLATE = "kernels/recurrent.c.j2"
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# activation: (C expression of `v` given alpha and beta, default alpha, default beta); None: unused
_ACTIVATIONS = {
    "relu": ("(v > 0.0f ? v : 0.0f)", None, None),
    "tanh": ("tanhf(v)", None, None),
    "sigmoid": ("(1.0f / (1.0f + expf(-v)))", None, None),
    "affine": ("({a} * v + {b})", 1.0, 0.0),
    "leakyrelu": ("(v >= 0.0f ? v : {a} * v)", 0.01, None),
    "thresholdedrelu": ("(v > {a} ? v : 0.0f)", 1.0, None),
    "scaledtanh": ("({a} * tanhf({b} * v))", 1.0, 1.0),
    "hardsigmoid": ("fmaxf(0.0f, fminf(1.0f, {a} * v + {b}))", 0.2, 0.5),
    "elu": ("(v >= 0.0f ? v : {a} * expm1f(v))", 1.0, None),
    "softsign": ("(v / (1.0f + fabsf(v)))", None, None),
    "softplus": ("log1pf(expf(v))", None, None),
}


def _c_float(value: float) -> str:
    text = repr(float(value))
    return f"({text}f)" if "e" in text or "." in text else f"({text}.0f)"


def _activation_expressions(op: OpInstance, directions: int) -> list[list[str]]:
    """[direction][k]: the C expression of the k-th activation of the cell, in terms of `v`."""
    kind = op.node.op
    per_direction = len(DEFAULT_ACTIVATIONS[kind])
    names = op.attr("activations", None)
    names = tuple(names) if names else DEFAULT_ACTIVATIONS[kind] * directions
    if len(names) != per_direction * directions:
        raise Unsupported(
            f"{kind} with {len(names)} activations for {directions} direction(s); "
            f"accepted: {per_direction} per direction"
        )
    alphas = list(op.attr("activation_alpha", ()) or ())
    betas = list(op.attr("activation_beta", ()) or ())
    expressions = []
    for name in names:
        key = (name.decode() if isinstance(name, bytes) else name).lower()
        if key not in _ACTIVATIONS:
            raise Unsupported(f"{kind} activation {name!r}; accepted: {', '.join(sorted(_ACTIVATIONS))}")
        template, alpha, beta = _ACTIVATIONS[key]
        a = alphas.pop(0) if alpha is not None and alphas else alpha
        b = betas.pop(0) if beta is not None and betas else beta
        expressions.append(template.format(a=_c_float(a or 0.0), b=_c_float(b or 0.0)))
    return [expressions[d * per_direction : (d + 1) * per_direction] for d in range(directions)]


def lower(op: OpInstance) -> Kernel:
    kind = op.node.op
    x_type = op.input_types[0]
    for index, tensor in enumerate(op.input_types):
        expected = DType.INT32 if index == 4 else DType.FLOAT32
        if tensor is not None and tensor.dtype is not expected:
            raise Unsupported(f"{kind} input {index} of {tensor.dtype.label}; accepted: {expected.label}")
    layout = int(op.attr("layout", 0))
    if layout == 0:
        steps, batch, inputs = x_type.shape
    else:
        batch, steps, inputs = x_type.shape
    gates = GATES[kind]
    weights = op.input_types[1].shape  # [directions, gates * hidden, inputs]
    directions = weights[0]
    hidden = int(op.attr("hidden_size", weights[1] // gates))
    direction = op.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        raise Unsupported(f"{kind} direction {direction!r}; accepted: forward, reverse, bidirectional")
    if (direction == "bidirectional") != (directions == 2):
        raise Unsupported(f"{kind} direction {direction!r} with weights for {directions} direction(s)")
    clip = op.attr("clip", None)
    arg_count = len(op.node.inputs)
    # one args slot per node output, NULL for an omitted one (Y is often omitted)
    outputs = {("Y", "Y_h", "Y_c")[k]: arg_count + k for k, name in enumerate(op.node.outputs) if name}
    if kind == "LSTM" and int(op.attr("input_forget", 0)):
        coupled = True
    else:
        coupled = False
    # element strides of X[t][b][i], Y[t][d][b][j], and the states [d][b][j] under each layout
    if layout == 0:
        x_strides = (batch * inputs, inputs)
        y_strides = (directions * batch * hidden, batch * hidden, hidden)
        state_strides = (batch * hidden, hidden)
    else:
        x_strides = (inputs, steps * inputs)
        y_strides = (directions * hidden, hidden, steps * directions * hidden)
        state_strides = (hidden, directions * hidden)
    scratch_floats = (gates + 3) * hidden
    return Kernel(
        template=TEMPLATE,
        params={
            "kind": kind,
            "steps": steps,
            "batch": batch,
            "inputs": inputs,
            "hidden": hidden,
            "gates": gates,
            "directions": directions,
            "reverse": [direction == "reverse" or d == 1 for d in range(directions)],
            "activations": _activation_expressions(op, directions),
            "has": {i: op.has_input(i) for i in range(8)},
            "outputs": outputs,
            "clip": _c_float(clip) if clip is not None else None,
            "linear_before_reset": int(op.attr("linear_before_reset", 0)),
            "input_forget": coupled,
            "scratch_arg": arg_count + len(op.node.outputs),
            "x_strides": x_strides,
            "y_strides": y_strides,
            "state_strides": state_strides,
        },
        scratch_bytes=4 * scratch_floats,
        flops=2 * directions * steps * batch * gates * hidden * (inputs + hidden),
        bytes_accessed=sum(t.nbytes for t in op.input_types if t) + sum(t.nbytes for t in op.output_types),
    )


DEFS = tuple(OpDef(kind, lower) for kind in sorted(GATES))
