"""RNN, GRU and LSTM: static sequence length, every direction, layout and activation ONNX allows.

One loop (`templates/kernels/_recurrent.j2`) runs all three: for each direction and batch row, the
steps in order (reversed for the reverse direction, from the row's own `sequence_lens` when given),
each step's gate pre-activations `x_t W^T + h_{t-1} R^T + Wb + Rb` in float32, then the cell of the
operator, a template of its own (`recurrent_rnn`, `_gru`, `_lstm`.c.j2, chosen by `Cell`). Python
decides every index, stride, each direction's offsets (`Direction`) and the C expression of each
activation.

ONNX gate orders: GRU z, r, h; LSTM i, o, f, c (peepholes P: i, o, f). `activation_alpha/beta` are
consumed in order by the activations that take them, as onnxruntime does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hetgen.ir import DType
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


class Cell(Enum):
    """The operator's cell: its gate count and its template."""

    RNN = ("RNN", 1, "kernels/recurrent_rnn.c.j2")
    GRU = ("GRU", 3, "kernels/recurrent_gru.c.j2")
    LSTM = ("LSTM", 4, "kernels/recurrent_lstm.c.j2")

    def __init__(self, op: str, gates: int, template: str):
        self.op, self.gates, self.template = op, gates, template


GATES = {cell.op: cell.gates for cell in Cell}
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


@dataclass(frozen=True)
class Preactivations:
    """The C text of each gate's pre-activation in the cell, of step `j` (peepholes included)."""

    i: str = ""  # LSTM input gate
    o: str = ""  # LSTM output gate
    f: str = ""  # LSTM forget gate
    c: str = ""  # LSTM cell candidate
    r: str = ""  # GRU reset gate


@dataclass(frozen=True)
class Direction:
    """One direction's slices, in elements: of W, R, B ([Wb, Rb]), the states and Y."""

    reverse: bool
    w: int  # W[d]
    r: int  # R[d]
    wb: int  # Wb[d]
    rb: int  # Rb[d]
    r_h: int  # GRU: R[d]'s h gate block
    rb_h: int  # GRU: Rb[d]'s h gate part
    state: int  # initial_h[d], initial_c[d], Y_h[d], Y_c[d]
    y: int  # Y[t][d]
    activations: tuple[str, ...]
    pre: Preactivations


def _directions(
    cell: Cell, hidden: int, inputs: int, reverse: tuple[bool, ...], activations, peepholes: bool, strides
) -> tuple[Direction, ...]:
    gates, state_strides, y_strides = cell.gates, strides[0], strides[1]
    rows = gates * hidden
    directions = []
    for d, (backward, functions) in enumerate(zip(reverse, activations)):
        pre = Preactivations()
        if cell is Cell.LSTM:
            peep = [f"peep[{d * 3 * hidden + k * hidden}u + j]" if peepholes else "0.0f" for k in range(3)]
            pre = Preactivations(
                i=f"g[j] + {peep[0]} * c[j]",
                o=f"g[{hidden}u + j] + {peep[1]} * c[j]",
                f=f"g[{2 * hidden}u + j] + {peep[2]} * c[j]",
                c=f"g[{3 * hidden}u + j]",
            )
        elif cell is Cell.GRU:
            pre = Preactivations(r=f"g[{hidden}u + j]")
        directions.append(
            Direction(
                reverse=backward,
                w=d * rows * inputs,
                r=d * rows * hidden,
                wb=d * 2 * rows,
                rb=d * 2 * rows + rows,
                r_h=d * rows * hidden + 2 * hidden * hidden,
                rb_h=d * 2 * rows + rows + 2 * hidden,
                state=d * state_strides[0],
                y=d * y_strides[1],
                activations=tuple(functions),
                pre=pre,
            )
        )
    return tuple(directions)


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
    cell = Cell[kind]
    reverse = tuple(direction == "reverse" or d == 1 for d in range(directions))
    has = {i: op.has_input(i) for i in range(8)}
    return Kernel(
        template=cell.template,
        params={
            "kind": kind,
            "steps": steps,
            "batch": batch,
            "inputs": inputs,
            "hidden": hidden,
            "gate_rows": gates * hidden,
            "gate": tuple(k * hidden for k in range(gates)),  # each gate's first row in g
            "y_floats": steps * directions * batch * hidden,
            "directions": _directions(
                cell,
                hidden,
                inputs,
                reverse,
                _activation_expressions(op, directions),
                has[7],
                (state_strides, y_strides),
            ),
            "has": has,
            "outputs": outputs,
            "has_y": "Y" in outputs,
            "final_states": tuple((name, state) for name, state in (("Y_h", "h"), ("Y_c", "c")) if name in outputs),
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
