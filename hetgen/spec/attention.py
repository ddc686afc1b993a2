"""Attention as one kernel unit: MatMul(Q, Kᵀ) → scale → mask → Softmax → MatMul(·, V).

The pattern, anchored on a Softmax over the last axis, in the forms exporters write:

- scores = MatMul(Q, Kᵀ), optionally scaled by a scalar constant (Mul, or Div with the scores as
  numerator);
- optionally masked: Add(scores, mask) with a float32 mask that broadcasts to the scores, or
  Where(cond, fill, scores) / Where(cond, scores, fill) with a bool cond and a scalar constant fill;
- Softmax(axis = last), then MatMul(probabilities, V).

Transposes feeding Q, Kᵀ or V (heads split by Reshape → Transpose, K transposed once more) and a
Transpose of the context (heads merged back) are absorbed as strides, so the kernel reads and writes
the tensors the surrounding graph has. Every tensor inside the pattern has exactly one reader, is not
a graph output and is float32, and the unit runs only where placement puts all of its nodes as one
group (`patterns.py`; the kernel table matches with every node in one place), so the scores (and
the transposed copies) never exist as tensors: the kernel (`hetgen/ops/attention.py`) computes them
one block of query rows at a time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from hetgen.ir import DType, Graph, Node
from hetgen.ops.attention import AttentionSpec, MaskSpec, Operand


@dataclass(frozen=True)
class AttentionMatch:
    nodes: tuple[Node, ...]  # the scores MatMul first, the node writing the result last
    inputs: tuple[str, ...]  # the kernel's inputs: Q, K, V bases, then the mask's tensor if any
    spec: AttentionSpec


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


class PatternGraph:
    """The questions the matcher asks: the one reader of a tensor, the producer, the target."""

    def __init__(self, graph: Graph, assignment: Mapping[str, str]):
        self.graph, self.assignment = graph, assignment
        self.readers = {name: list({id(n): n for n in users}.values()) for name, users in graph.consumers().items()}
        self.producer = {out: node for node in graph.nodes for out in node.outputs if out}
        self.outputs = set(graph.outputs)

    def only_reader(self, name: str, op: str | tuple[str, ...], target: str) -> Node | None:
        users = self.readers.get(name, [])
        if len(users) != 1 or name in self.outputs or users[0].op not in ((op,) if isinstance(op, str) else op):
            return None
        return users[0] if self.assignment.get(users[0].name) == target else None

    def private_producer(self, name: str, op: str, target: str) -> Node | None:
        """The `op` node producing `name` when `name` has one reader and is not a graph output."""
        node = self.producer.get(name)
        if node is None or node.op != op or len(self.readers.get(name, [])) != 1 or name in self.outputs:
            return None
        return node if self.assignment.get(node.name) == target else None

    def scalar(self, name: str) -> float | None:
        value = self.graph.constants.get(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def dtype(self, name: str) -> DType | None:
        known = self.graph.types.get(name)
        return known.dtype if known is not None else None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.graph.types[name].shape)


def _through_transposes(g: PatternGraph, name: str, target: str) -> tuple[str, tuple[int, ...], list[Node]]:
    """The tensor `name` is a view of, the view's element strides (one per axis of `name`), and the
    Transpose nodes absorbed on the way."""
    rank = len(g.shape(name))
    axes = list(range(rank))  # axis l of `name` is axis axes[l] of the current tensor
    absorbed = []
    current = name
    while (node := g.private_producer(current, "Transpose", target)) is not None:
        source = node.inputs[0]
        perm = node.attr("perm") or tuple(reversed(range(rank)))
        if len(g.shape(source)) != rank:
            break
        axes = [int(perm[a]) for a in axes]
        absorbed.append(node)
        current = source
    base = contiguous_strides(g.shape(current))
    return current, tuple(base[a] for a in axes), absorbed


def _four(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A rank-2..4 view as exactly 4 axes (leading batch axes of size 1, stride 0)."""
    pad = 4 - len(shape)
    return (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)


def _operand(g: PatternGraph, name: str, target: str, inputs: list[str], transpose: bool) -> tuple[Operand, list[Node]]:
    base, strides, absorbed = _through_transposes(g, name, target)
    shape, strides = _four(g.shape(name), strides)
    if transpose:  # Kᵀ [.., D, Sk] read as K [.., Sk, D]
        shape, strides = shape[:2] + shape[2:][::-1], strides[:2] + strides[2:][::-1]
    if base not in inputs:
        inputs.append(base)
    return Operand(inputs.index(base), shape, strides), absorbed


def _mask(g: PatternGraph, node: Node, scores: str, shape4: tuple[int, ...], inputs: list[str]) -> MaskSpec | None:
    if node.op == "Add":
        other = node.inputs[1] if node.inputs[0] == scores else node.inputs[0]
        if other == scores or g.dtype(other) is not DType.FLOAT32:
            return None
        kind, fill, tensor = "add", 0.0, other
    else:  # Where
        cond, a, b = node.inputs
        if g.dtype(cond) is not DType.BOOL or (a == scores) == (b == scores):
            return None
        fill = g.scalar(b if a == scores else a)
        if fill is None:
            return None
        kind, tensor = ("where_keep_true" if a == scores else "where_fill_true"), cond
    strides = _broadcast_strides(g.shape(tensor), shape4)
    if strides is None:
        return None
    if tensor not in inputs:
        inputs.append(tensor)
    return MaskSpec(kind, inputs.index(tensor), strides, fill)


def _broadcast_strides(shape: tuple[int, ...], to: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides reading a tensor of `shape` broadcast to the rank-4 `to`; None if it does not broadcast."""
    if len(shape) > 4:
        if any(d != 1 for d in shape[:-4]):
            return None
        shape = shape[-4:]
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    own = contiguous_strides(padded)
    strides = []
    for size, target, stride in zip(padded, to, own):
        if size == target:
            strides.append(stride if size > 1 else 0)
        elif size == 1:
            strides.append(0)
        else:
            return None
    return tuple(strides)


def match_attention(
    graph: Graph, assignment: Mapping[str, str], softmax: Node, g: PatternGraph | None = None
) -> AttentionMatch | None:
    """The attention pattern around `softmax`, or None when the graph does not have it exactly
    (`g`: the graph's questions, when the caller asks about several Softmax nodes)."""
    g = g if g is not None else PatternGraph(graph, assignment)
    target = assignment.get(softmax.name)
    x = softmax.inputs[0]
    rank = len(g.shape(x))
    if not 2 <= rank <= 4 or int(softmax.attr("axis", -1)) % rank != rank - 1 or g.dtype(x) is not DType.FLOAT32:
        return None
    passed: list[Node] = []  # Casts to float32 of float32 tensors, and a Where that keeps everything
    current = _back_through_casts(g, x, target, passed)
    mask_node, masked, scale_node, scale_op, scale = None, "", None, "", 1.0
    node = g.private_producer(current, "Add", target) or g.private_producer(current, "Where", target)
    if node is not None:
        mask_node, masked = node, _chain_input(node, g, target)
        if masked is None:
            return None
        current = _back_through_casts(g, masked, target, passed)
    for op in ("Mul", "Div"):
        node = g.private_producer(current, op, target)
        if node is None:
            continue
        a, b = node.inputs
        chain, factor = (b, a) if op == "Mul" and g.scalar(b) is None else (a, b)
        if factor not in graph.constants or g.scalar(factor) is None or chain in graph.constants:
            return None
        scale_node, scale_op, scale, current = node, ("/" if op == "Div" else "*"), g.scalar(factor), chain
        current = _back_through_casts(g, current, target, passed)
        break
    scores = g.private_producer(current, "MatMul", target)
    if scores is None:
        return None
    probabilities = _forward_through_identities(g, softmax.outputs[0], target, passed)
    context = g.only_reader(probabilities, "MatMul", target)
    if context is None or context.inputs[0] != probabilities or context.inputs[1] == probabilities:
        return None
    # the Attention operator's body scales Q and Kᵀ each by a scalar before their product
    pre_scale = 1.0
    operands = []
    for name in scores.inputs:
        node = g.private_producer(name, "Mul", target)
        factor = (
            next((n for n in node.inputs if n in graph.constants and g.scalar(n) is not None), None) if node else None
        )
        if factor is not None and node.inputs[0] != node.inputs[1]:
            pre_scale *= g.scalar(factor)
            passed.append(node)
            name = node.inputs[1] if node.inputs[0] == factor else node.inputs[0]
        operands.append(name)
    q_name, kt_name, v_name = operands[0], operands[1], context.inputs[1]
    out_name = context.outputs[0]
    names = (q_name, kt_name, v_name, out_name, scores.outputs[0])
    if any(g.dtype(n) is not DType.FLOAT32 for n in names) or any(len(g.shape(n)) != rank for n in names):
        return None
    batch = g.shape(out_name)[:-2]
    if any(g.shape(n)[:-2] != batch for n in names):
        return None  # batch broadcasting inside the pattern: left to the separate kernels
    inputs: list[str] = []
    q, q_nodes = _operand(g, q_name, target, inputs, transpose=False)
    k, k_nodes = _operand(g, kt_name, target, inputs, transpose=True)
    v, v_nodes = _operand(g, v_name, target, inputs, transpose=False)
    shape4 = _four(g.shape(x), contiguous_strides(g.shape(x)))[0]
    mask = None
    if mask_node is not None:
        mask = _mask(g, mask_node, masked, shape4, inputs)
        if mask is None:
            return None
    out_nodes = [context]
    out_strides = _four(g.shape(out_name), contiguous_strides(g.shape(out_name)))[1]
    merge = g.only_reader(out_name, "Transpose", target)
    if merge is not None and merge.outputs[0] not in g.outputs:
        perm = merge.attr("perm") or tuple(reversed(range(rank)))
        result = contiguous_strides(g.shape(merge.outputs[0]))
        merged = [0] * rank
        for axis, source_axis in enumerate(perm):
            merged[int(source_axis)] = result[axis]
        if merged[-1] == 1:  # the context's rows stay contiguous: the GEMM writes them in place
            out_nodes.append(merge)
            out_strides = _four(g.shape(out_name), tuple(merged))[1]
    shape_q = q.shape
    spec = AttentionSpec(
        batch=shape_q[0],
        heads=shape_q[1],
        sq=shape_q[2],
        sk=k.shape[2],
        d=shape_q[3],
        dv=v.shape[3],
        q=q,
        k=k,
        v=v,
        out_strides=out_strides,
        scale_op=scale_op,
        scale=scale,
        mask=mask,
        pre_scale=pre_scale,
    )
    if math.prod((spec.sq, spec.sk, spec.d, spec.dv)) == 0:
        return None
    middle = [n for n in (scale_node, mask_node) if n is not None]
    nodes = (scores, *middle, softmax, *passed, *q_nodes, *k_nodes, *v_nodes, *out_nodes)
    if len({n.name for n in nodes}) != len(nodes):
        return None
    return AttentionMatch(nodes, tuple(inputs), spec)


def _chain_input(mask_node: Node, g: PatternGraph, target: str) -> str | None:
    """Which input of the mask node continues the chain back to the scores MatMul."""
    for name in mask_node.inputs:
        if not name or name in g.graph.constants:
            continue
        current = _back_through_casts(g, name, target, [])
        for op in ("Mul", "Div"):
            scale = g.private_producer(current, op, target)
            if scale is not None:
                current = next((i for i in scale.inputs if i not in g.graph.constants), current)
                current = _back_through_casts(g, current, target, [])
                break
        if g.private_producer(current, "MatMul", target) is not None:
            return name
    return None


def _is_float_cast(g: PatternGraph, node: Node) -> bool:
    return node.op == "Cast" and int(node.attr("to", 0)) == 1 and g.dtype(node.inputs[0]) is DType.FLOAT32


def _back_through_casts(g: PatternGraph, name: str, target: str, passed: list[Node]) -> str:
    """Past Casts of float32 to float32 (the Attention operator's body has them): the tensor they copy."""
    while (node := g.private_producer(name, "Cast", target)) is not None and _is_float_cast(g, node):
        passed.append(node)
        name = node.inputs[0]
    return name


def _forward_through_identities(g: PatternGraph, name: str, target: str, passed: list[Node]) -> str:
    """Past float32 Casts and a Where whose constant condition is all false (the Attention body's
    'row all masked' guard, when no row is): the tensor equal to `name` that the next node reads.
    A CastLike that takes only its type from `name`, for that Where's other branch, goes too."""
    while name not in g.outputs:
        readers = g.readers.get(name, [])
        type_only = [n for n in readers if n.op == "CastLike" and n.inputs[1] == name and n.inputs[0] != name]
        rest = [n for n in readers if n not in type_only]
        if len(rest) != 1 or g.assignment.get(rest[0].name) != target:
            break
        node = rest[0]
        if node.op == "Cast" and _is_float_cast(g, node) and not type_only:
            passed.append(node)
        elif node.op == "Where" and node.inputs[2] == name and g.shape(node.outputs[0]) == g.shape(name):
            cond = g.graph.constants.get(node.inputs[0])
            if cond is None or cond.any():
                break
            if any(g.readers.get(c.outputs[0], []) != [node] or c.outputs[0] in g.outputs for c in type_only):
                break
            passed.extend([*type_only, node])
        else:
            break
        name = node.outputs[0]
    return name
