"""Pattern rewrites: decomposed LayerNormalization and Gelu become the single operators.

Exporters (older torch, TF converters, models from before opset 17/20) spell these out:

- LayerNorm: ReduceMean → Sub → Pow(2) → ReduceMean → Add(eps) → Sqrt → Div → Mul(gamma) → Add(beta),
  over trailing axes, keepdims=1. It becomes LayerNormalization(x, gamma, beta) (opset-17 semantics,
  its `opset` ≥ 17). Mul(d, d) in place of Pow(d, 2), and a missing Mul or Add, are accepted.
- Gelu: x * 0.5 * (1 + erf(x / sqrt(2))) in any association of the product, with Mul by 1/sqrt(2)
  in place of the division. It becomes Gelu(x) (approximate='none', its `opset` ≥ 20).
- Gelu, tanh form: x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), x^3 as Pow(x, 3) or
  x * x * x, each product in either order. It becomes Gelu(x, approximate='tanh').

Both rewrites compute the same expression, in the same precision, as the decomposed form; they are
made only when every intermediate tensor has no other reader and is not a graph output, the
constants have exactly the expected values, the tensors are float32, and hetgen supports the fused
operator (otherwise the decomposed ops are lowered one by one).
"""

from __future__ import annotations

import math

import numpy as np

from hetgen.frontend.work import Work, WorkNode
from hetgen.ir import DType
from hetgen.ops.registry import supported_ops


def rewrite_patterns(work: Work) -> None:
    supported = supported_ops()
    if "LayerNormalization" in supported:
        _rewrite_all(work, "ReduceMean", _match_layer_norm)
    if "Gelu" in supported:
        _rewrite_all(work, "Erf", _match_gelu)
        _rewrite_all(work, "Tanh", _match_gelu_tanh)


def _rewrite_all(work: Work, anchor: str, match) -> None:
    # The reader describes work.nodes: built once, and again only after a rewrite changed them, so
    # a model of N nodes with M anchors costs O(N), not O(N * M).
    if not any(node.op == anchor for node in work.nodes):
        return
    index, reader = 0, _Reader(work)
    while index < len(work.nodes):
        node = work.nodes[index]
        found = match(work, node, reader) if node.op == anchor and node.is_default_domain else None
        if found is None:
            index += 1
            continue
        matched, replacement = found
        gone = {id(n) for n in matched}
        last = max(i for i, n in enumerate(work.nodes) if id(n) in gone)  # all inputs exist there
        work.nodes = [
            replacement if i == last else n for i, n in enumerate(work.nodes) if i == last or id(n) not in gone
        ]
        index, reader = 0, _Reader(work)  # positions changed; start over (patterns are rare)


class _Reader:
    """Who produces and reads each tensor, and the questions patterns ask about them."""

    def __init__(self, work: Work):
        self.work = work
        self.users = {name: list({id(n): n for n in users}.values()) for name, users in work.consumers().items()}
        self.producers = work.producers()

    def only_user(self, name: str, op: str) -> WorkNode | None:
        """The single node reading `name`, if it is an `op` and `name` is not a graph output."""
        users = self.users.get(name, [])
        if len(users) != 1 or name in self.work.outputs or users[0].op != op:
            return None
        return users[0]

    def scalar(self, name: str) -> float | None:
        value = self.work.constants.get(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def other(self, node: WorkNode, name: str) -> str | None:
        """The other input of a binary node that reads `name`."""
        if len(node.inputs) != 2 or name not in node.inputs:
            return None
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]

    def is_float32(self, *names: str) -> bool:
        return all(DType.from_onnx(self.work.types[n].elem) is DType.FLOAT32 for n in names if n in self.work.types)


def _close(value: float | None, expected: float, tolerance: float = 1e-6) -> bool:
    return value is not None and abs(value - expected) <= tolerance * abs(expected)


# -- LayerNormalization ---------------------------------------------------------------------------


def _trailing_axes(work: Work, node: WorkNode, rank: int) -> int | None:
    """The first normalised axis when `node` reduces the trailing axes with keepdims; else None."""
    if node.attrs.get("keepdims", 1) != 1 or len(node.inputs) < 2 or node.inputs[1] not in work.constants:
        return None
    axes = sorted(int(a) + rank if a < 0 else int(a) for a in work.constants[node.inputs[1]].reshape(-1))
    if not axes or axes != list(range(rank - len(axes), rank)):
        return None
    return axes[0]


def _shape(work: Work, name: str) -> tuple[int, ...] | None:
    """A tensor's shape, or None where typing failed (check.py reports those; a rewrite just skips)."""
    known = work.types.get(name)
    return known.shape if known is not None else None


def _match_layer_norm(work: Work, mean: WorkNode, reader: _Reader):
    x = mean.inputs[0]
    if x not in work.types or not reader.is_float32(x):
        return None
    shape = work.types[x].shape
    axis = _trailing_axes(work, mean, len(shape))
    sub = reader.only_user(mean.outputs[0], "Sub")
    if axis is None or sub is None or sub.inputs != [x, mean.outputs[0]]:
        return None
    centred = sub.outputs[0]
    users = reader.users.get(centred, [])
    if centred in work.outputs or len(users) != 2:
        return None
    square = next((u for u in users if u.op in ("Pow", "Mul")), None)
    div = next((u for u in users if u.op == "Div"), None)
    if square is None or div is None or div.inputs[0] != centred:
        return None
    if square.op == "Pow" and not (square.inputs[0] == centred and reader.scalar(square.inputs[1]) == 2.0):
        return None
    if square.op == "Mul" and square.inputs != [centred, centred]:
        return None
    variance = reader.only_user(square.outputs[0], "ReduceMean")
    if variance is None or _trailing_axes(work, variance, len(shape)) != axis:
        return None
    add_eps = reader.only_user(variance.outputs[0], "Add")
    epsilon = reader.scalar(reader.other(add_eps, variance.outputs[0]) or "") if add_eps else None
    sqrt = reader.only_user(add_eps.outputs[0], "Sqrt") if add_eps else None
    if epsilon is None or epsilon < 0 or sqrt is None or reader.only_user(sqrt.outputs[0], "Div") is not div:
        return None
    if div.inputs != [centred, sqrt.outputs[0]]:
        return None
    matched = [mean, sub, square, variance, add_eps, sqrt, div]
    norm_shape = shape[axis:]
    scale = np.ones(norm_shape, np.float32)
    bias = None
    last = div.outputs[0]
    mul = reader.only_user(last, "Mul")
    gamma = _affine_param(work, reader.other(mul, last), norm_shape) if mul else None
    if gamma is not None and _shape(work, mul.outputs[0]) == shape:
        scale, last = gamma, mul.outputs[0]
        matched.append(mul)
    add = reader.only_user(last, "Add")
    beta = _affine_param(work, reader.other(add, last), norm_shape) if add else None
    if beta is not None and _shape(work, add.outputs[0]) == shape:
        bias, last = beta, add.outputs[0]
        matched.append(add)
    inputs = [x, work.add_constant(f"{last}_scale", scale)]
    if bias is not None:
        inputs.append(work.add_constant(f"{last}_bias", bias))
    attrs = {"axis": axis, "epsilon": epsilon, "stash_type": 1}
    return matched, mean.derive("LayerNormalization", inputs, [last], attrs, max(work.opset, 17))


def _affine_param(work: Work, name: str | None, norm_shape: tuple[int, ...]) -> np.ndarray | None:
    """A float32 constant that broadcasts over the normalised axes only, as an array of their shape."""
    value = work.constants.get(name or "")
    if value is None or value.dtype != np.float32:
        return None
    squeezed = value.reshape(value.shape[next((i for i, d in enumerate(value.shape) if d != 1), value.ndim) :])
    if squeezed.ndim > len(norm_shape):
        return None
    try:
        return np.ascontiguousarray(np.broadcast_to(squeezed, norm_shape))
    except ValueError:
        return None


# -- Gelu -------------------------------------------------------------------------------------


def _match_gelu(work: Work, erf: WorkNode, reader: _Reader):
    scaled = reader.producers.get(erf.inputs[0])
    if scaled is None or reader.only_user(scaled.outputs[0], "Erf") is not erf:
        return None
    if scaled.op == "Div" and _close(reader.scalar(scaled.inputs[1]), math.sqrt(2)):
        x = scaled.inputs[0]
    elif scaled.op == "Mul":
        x = next(
            (n for n in scaled.inputs if _close(reader.scalar(reader.other(scaled, n) or ""), 1 / math.sqrt(2))), None
        )
        if x is None or x in work.constants:
            return None
    else:
        return None
    if not reader.is_float32(x):
        return None
    tail = _gelu_tail(work, reader, erf.outputs[0], x)
    if tail is None:
        return None
    after, y = tail
    matched = [scaled, erf, *after]
    return matched, erf.derive("Gelu", [x], [y], {"approximate": "none"}, max(work.opset, 20))


def _gelu_tail(work: Work, reader: _Reader, activated: str, x: str):
    """What both Gelu forms end with: 1 + erf(...) or 1 + tanh(...), times x and 0.5 in any
    association, with the result of x's shape; the nodes from the Add on, and the result."""
    plus_one = reader.only_user(activated, "Add")
    if plus_one is None or reader.scalar(reader.other(plus_one, activated) or "") != 1.0:
        return None
    factors = _product(work, reader, plus_one.outputs[0], x)
    if factors is None:
        return None
    muls, y = factors
    if _shape(work, y) is None or _shape(work, y) != _shape(work, x):
        return None
    return [plus_one, *muls], y


def _product(work: Work, reader: _Reader, one_plus_erf: str, x: str):
    """The Mul nodes computing x * 0.5 * one_plus_erf, in any association, and their output."""
    first = reader.only_user(one_plus_erf, "Mul")
    if first is None:
        return None
    other = reader.other(first, one_plus_erf)
    if other == x or reader.scalar(other or "") == 0.5:  # (x * p) * 0.5 or (0.5 * p) * x
        second = reader.only_user(first.outputs[0], "Mul")
        rest = reader.other(second, first.outputs[0]) if second else None
        if rest is None or (reader.scalar(rest) != 0.5 if other == x else rest != x):
            return None
        return [first, second], second.outputs[0]
    half = reader.producers.get(other or "")  # (x * 0.5) * p
    if half is None or half.op != "Mul" or reader.only_user(half.outputs[0], "Mul") is not first:
        return None
    if reader.other(half, x) is None or reader.scalar(reader.other(half, x)) != 0.5:
        return None
    return [half, first], first.outputs[0]


def _match_gelu_tanh(work: Work, tanh: WorkNode, reader: _Reader):
    scaled = reader.producers.get(tanh.inputs[0])
    if scaled is None or scaled.op != "Mul" or reader.only_user(scaled.outputs[0], "Tanh") is not tanh:
        return None
    total = _scaled_by(reader, scaled, math.sqrt(2 / math.pi))
    inner = reader.producers.get(total or "")
    if inner is None or inner.op != "Add" or reader.only_user(inner.outputs[0], "Mul") is not scaled:
        return None
    for x in inner.inputs:
        cubic = reader.producers.get(reader.other(inner, x) or "")
        if cubic is None or cubic.op != "Mul" or reader.only_user(cubic.outputs[0], "Add") is not inner:
            continue
        cube_nodes = _cube_of(work, reader, _scaled_by(reader, cubic, 0.044715), x)
        if cube_nodes is not None:
            break
    else:
        return None
    if x in work.constants or not reader.is_float32(x):
        return None
    tail = _gelu_tail(work, reader, tanh.outputs[0], x)
    if tail is None:
        return None
    after, y = tail
    matched = [*cube_nodes, cubic, inner, scaled, tanh, *after]
    return matched, tanh.derive("Gelu", [x], [y], {"approximate": "tanh"}, max(work.opset, 20))


def _scaled_by(reader: _Reader, mul: WorkNode, factor: float) -> str | None:
    """The tensor that Mul node `mul` multiplies by the scalar constant `factor`."""
    for name in mul.inputs:
        other = reader.other(mul, name)
        if other is not None and other != name and _close(reader.scalar(other), factor, 1e-4):
            return name
    return None


def _cube_of(work: Work, reader: _Reader, cube: str | None, x: str) -> list[WorkNode] | None:
    """The nodes computing `cube` = x^3 (Pow(x, 3), or x * x * x in either association)."""
    node = reader.producers.get(cube or "")
    if node is None or len(reader.users.get(cube, [])) != 1 or cube in work.outputs:
        return None
    if node.op == "Pow":
        return [node] if node.inputs[0] == x and reader.scalar(node.inputs[1]) == 3.0 else None
    if node.op != "Mul" or x not in node.inputs:
        return None
    square = reader.producers.get(reader.other(node, x) or "")
    if square is None or square.op != "Mul" or square.inputs != [x, x]:
        return None
    if reader.only_user(square.outputs[0], "Mul") is not node:
        return None
    return [square, node]
