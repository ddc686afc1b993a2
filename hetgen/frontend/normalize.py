"""Opset normalisation: every node is rewritten into the newest form of its operator.

Lowerings therefore see one form per operator, whatever opset (7..21) the model was exported at:

==========================  =====================================================================
operator                    form after the frontend (its `opset` is at least the version shown)
==========================  =====================================================================
Softmax, LogSoftmax,        opset-13 semantics (one axis). Before 13 these coerced the input to
Hardmax                     2-D; that becomes Reshape → op(axis=1) → Reshape unless the axis was
                            already the last one. `axis` explicit and non-negative.
Clip                        min/max are inputs 1 and 2 (constants); the opset<11 attributes go. (11)
ReduceSum (13), other       axes are a constant int64 input 1, non-negative, sorted and never
Reduce* (18)                empty (an absent axes input means all axes); `keepdims` explicit;
                            `noop_with_empty_axes` gone (a no-op reduction becomes Identity).
ArgMax, ArgMin (12)         `axis` non-negative, `keepdims` and `select_last_index` explicit.
Split (13)                  constant int64 `split` input 1 always present (computed for equal
                            splits and for opset-18 `num_outputs`); `axis` non-negative.
Squeeze, Unsqueeze (13)     constant int64 `axes` input 1, non-negative (Unsqueeze: in the output's
                            rank), sorted; Squeeze's absent axes made explicit.
Slice (10)                  starts, ends, axes, steps are constant int64 inputs 1..4, all present;
                            axes non-negative. starts/ends keep ONNX's clamping semantics.
Pad (11)                    pads (int64, full rank) and constant_value are inputs; opset-18 axes
                            folded into full-rank pads.
Upsample, Resize-10         Resize(X, "", scales) with coordinate_transformation_mode=asymmetric
                            (and nearest_mode=floor for nearest), the old ops' semantics. (13)
Resize                      an empty roi/scales constant becomes an omitted input. (13)
BatchNormalization (9)      `spatial` gone: spatial=1 is the modern op; spatial=0 becomes Mul+Add
                            with folded constants. `training_mode=0` dropped.
TopK (10)                   k is a constant int64 input 1; `axis` non-negative.
Scatter                     ScatterElements. (11)
GridSample (20)             mode names of opset 20 (linear, cubic).
Dropout                     Identity (removed by cleanup); its mask output becomes all-true.
Transpose                   one that keeps the order of the axes longer than 1 (it moves only
                            size-1 axes: a batch-first sequence of batch 1 made sequence-first)
                            becomes Reshape, a view of its input's bytes, not a copy. (13)
Gather, GatherElements,     `axis` explicit and non-negative.
ScatterElements, Concat,
Flatten, LayerNormalization,
LpNormalization
==========================  =====================================================================

Every node then carries its `opset` (`WorkNode.opset`, then the IR's typed `Node.opset`): the
version of its domain's opset whose semantics it follows *as written now*, i.e. max(model opset,
the version of the form above). An operator whose meaning changed with an opset has one registry
entry per meaning (`OpDef.since`), and the registry picks the entry for the node's opset
(hetgen/ops/registry.py `op_def`); for the operators above it never has to tell them apart.
Evaluating a node with onnx at its opset gives its meaning (the frontend's folding and
`export_onnx` rely on this).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hetgen.frontend.work import ValueType, Work, WorkNode
from hetgen.ops.registry import OPS

Rule = Callable[[WorkNode, Work], list[WorkNode]]


def normalize(node: WorkNode, work: Work) -> list[WorkNode]:
    """The node in its operator's newest form (one or more nodes), or unchanged."""
    rule = RULES.get(node.op) if node.is_default_domain else None
    if rule is None or any(name and name not in work.types for name in node.inputs):
        return [node]
    return rule(node, work)


# -- helpers ------------------------------------------------------------------------------------


def _shape(work: Work, name: str) -> tuple[int, ...]:
    return work.types[name].shape


def _input(node: WorkNode, index: int) -> str:
    return node.inputs[index] if index < len(node.inputs) else ""


def _nonneg(axes, rank: int) -> list[int]:
    return [int(a) + rank if int(a) < 0 else int(a) for a in np.asarray(axes).reshape(-1)]


def _int64(work: Work, base: str, values) -> str:
    return work.add_constant(base, np.asarray(values, dtype=np.int64).reshape(-1))


def _new_tensor(work: Work, base: str, value_type: ValueType) -> str:
    name = work.fresh_name(base)
    work.types[name] = value_type
    return name


def _trim(inputs: list[str]) -> list[str]:
    while inputs and not inputs[-1]:
        inputs.pop()
    return inputs


class _NotConstant(Exception):
    """An input the normal form needs as a constant is computed at run time: keep the node as is."""


def _constant(work: Work, name: str) -> np.ndarray | None:
    if not name:
        return None
    if name not in work.constants:
        raise _NotConstant(name)
    return work.constants[name]


def _keep_if_not_constant(rule: Rule) -> Rule:
    def guarded(node: WorkNode, work: Work) -> list[WorkNode]:
        try:
            return rule(node, work)
        except _NotConstant:
            return [node]  # check.py reports it when the lowering needs the input constant

    guarded.__name__ = rule.__name__
    return guarded


def _identity(node: WorkNode) -> list[WorkNode]:
    return [node.derive("Identity", node.inputs[:1], node.outputs[:1], {})]


# -- rules --------------------------------------------------------------------------------------


def _softmax(node: WorkNode, work: Work) -> list[WorkNode]:
    x, y = node.inputs[0], node.outputs[0]
    shape = _shape(work, x)
    rank = len(shape)
    attrs = dict(node.attrs)
    opset = max(node.opset, 13)
    if node.opset >= 13 or rank == 0:
        attrs["axis"] = _nonneg(attrs.get("axis", -1), rank)[0] if rank else 0
        return [node.derive(node.op, node.inputs, node.outputs, attrs, opset)]
    axis = _nonneg(attrs.get("axis", 1), rank)[0]
    if axis == rank - 1:
        attrs["axis"] = axis
        return [node.derive(node.op, node.inputs, node.outputs, attrs, opset)]
    # Before opset 13 the op worked on the input coerced to 2-D at `axis`.
    flat_shape = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    elem = work.types[x].elem
    flat_x = _new_tensor(work, f"{x}_2d", ValueType(elem, flat_shape))
    flat_y = _new_tensor(work, f"{y}_2d", ValueType(work.types[y].elem if y in work.types else elem, flat_shape))
    attrs["axis"] = 1
    return [
        node.derive("Reshape", [x, _int64(work, f"{x}_2d_shape", flat_shape)], [flat_x], {}, opset),
        node.derive(node.op, [flat_x], [flat_y], attrs, opset),
        node.derive("Reshape", [flat_y, _int64(work, f"{y}_shape", shape)], [y], {}, opset),
    ]


def _clip(node: WorkNode, work: Work) -> list[WorkNode]:
    if node.opset >= 11:
        return [node]
    attrs = dict(node.attrs)
    dtype = work.types[node.inputs[0]].numpy
    bounds = []
    for key in ("min", "max"):
        value = attrs.pop(key, None)
        bounds.append("" if value is None else work.add_constant(f"{node.outputs[0]}_{key}", np.asarray(value, dtype)))
    return [node.derive("Clip", _trim([node.inputs[0], *bounds]), node.outputs, attrs, 11)]


# The reductions whose axes were an attribute before some opset (`OpDef.axes_input_since`).
REDUCE_AXES_INPUT_SINCE = {op: d.axes_input_since for op, d in OPS.items() if d.axes_input_since is not None}


@_keep_if_not_constant
def _reduce(node: WorkNode, work: Work) -> list[WorkNode]:
    since = REDUCE_AXES_INPUT_SINCE[node.op]
    x = node.inputs[0]
    rank = len(_shape(work, x))
    attrs = dict(node.attrs)
    noop = attrs.pop("noop_with_empty_axes", 0)
    axes = attrs.pop("axes", None) if node.opset < since else _constant(work, _input(node, 1))
    if axes is None or np.asarray(axes).size == 0:
        if noop:
            return _identity(node)
        axes = range(rank)
    attrs["keepdims"] = int(attrs.get("keepdims", 1))
    axes_name = _int64(work, f"{node.outputs[0]}_axes", sorted(_nonneg(axes, rank)))
    return [node.derive(node.op, [x, axes_name], node.outputs, attrs, max(node.opset, since))]


def _arg_reduce(node: WorkNode, work: Work) -> list[WorkNode]:
    rank = len(_shape(work, node.inputs[0]))
    attrs = dict(node.attrs)
    attrs["axis"] = _nonneg(attrs.get("axis", 0), rank)[0]
    attrs["keepdims"] = int(attrs.get("keepdims", 1))
    attrs["select_last_index"] = int(attrs.get("select_last_index", 0))
    return [node.derive(node.op, node.inputs, node.outputs, attrs, max(node.opset, 12))]


@_keep_if_not_constant
def _split(node: WorkNode, work: Work) -> list[WorkNode]:
    x = node.inputs[0]
    shape = _shape(work, x)
    attrs = dict(node.attrs)
    axis = _nonneg(attrs.pop("axis", 0), len(shape))[0]
    count = attrs.pop("num_outputs", None)
    split = attrs.pop("split", None) if node.opset < 13 else _constant(work, _input(node, 1))
    if not 0 <= axis < len(shape):
        return [node]  # an invalid model; leave it to onnx's message
    dim = shape[axis]
    if split is None or np.asarray(split).size == 0:
        parts = len(node.outputs)
        if count is not None:  # opset 18: equal chunks, the last one smaller
            chunk = -(-dim // count)
            split = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
        elif dim % parts:
            return [node]  # an invalid model; leave it to onnx's message
        else:
            split = [dim // parts] * parts
    split_name = _int64(work, f"{node.outputs[0]}_split", split)
    return [node.derive("Split", [x, split_name], node.outputs, {"axis": axis}, max(node.opset, 13))]


@_keep_if_not_constant
def _squeeze(node: WorkNode, work: Work) -> list[WorkNode]:
    x = node.inputs[0]
    shape = _shape(work, x)
    attrs = dict(node.attrs)
    axes = attrs.pop("axes", None) if node.opset < 13 else _constant(work, _input(node, 1))
    if axes is None or np.asarray(axes).size == 0:
        axes = [i for i, d in enumerate(shape) if d == 1]
    if not len(axes):
        return _identity(node)
    axes_name = _int64(work, f"{node.outputs[0]}_axes", sorted(_nonneg(axes, len(shape))))
    return [node.derive("Squeeze", [x, axes_name], node.outputs, attrs, max(node.opset, 13))]


@_keep_if_not_constant
def _unsqueeze(node: WorkNode, work: Work) -> list[WorkNode]:
    x = node.inputs[0]
    attrs = dict(node.attrs)
    axes = attrs.pop("axes", None) if node.opset < 13 else _constant(work, _input(node, 1))
    axes = np.asarray(axes).reshape(-1)
    out_rank = len(_shape(work, x)) + axes.size
    axes_name = _int64(work, f"{node.outputs[0]}_axes", sorted(_nonneg(axes, out_rank)))
    return [node.derive("Unsqueeze", [x, axes_name], node.outputs, attrs, max(node.opset, 13))]


@_keep_if_not_constant
def _slice(node: WorkNode, work: Work) -> list[WorkNode]:
    x = node.inputs[0]
    rank = len(_shape(work, x))
    attrs = dict(node.attrs)
    if node.opset < 10:
        starts, ends, axes, steps = attrs.pop("starts"), attrs.pop("ends"), attrs.pop("axes", None), None
    else:
        starts, ends, axes, steps = (_constant(work, _input(node, i)) for i in (1, 2, 3, 4))
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    axes = range(starts.size) if axes is None else axes
    steps = np.ones(starts.size, np.int64) if steps is None else steps
    base = node.outputs[0]
    inputs = [
        x,
        _int64(work, f"{base}_starts", starts),
        _int64(work, f"{base}_ends", ends),
        _int64(work, f"{base}_axes", _nonneg(axes, rank)),
        _int64(work, f"{base}_steps", steps),
    ]
    return [node.derive("Slice", inputs, node.outputs, attrs, max(node.opset, 10))]


@_keep_if_not_constant
def _pad(node: WorkNode, work: Work) -> list[WorkNode]:
    x = node.inputs[0]
    rank = len(_shape(work, x))
    attrs = dict(node.attrs)
    base = node.outputs[0]
    if node.opset < 11:
        pads = attrs.pop("pads")
        value = np.asarray(attrs.pop("value", 0.0), dtype=work.types[x].numpy)
        inputs = [x, _int64(work, f"{base}_pads", pads), work.add_constant(f"{base}_value", value)]
        return [node.derive("Pad", inputs, node.outputs, attrs, 11)]
    axes = _constant(work, _input(node, 3))
    if axes is None:
        return [node]
    pads = np.asarray(_constant(work, _input(node, 1)), dtype=np.int64).reshape(-1)
    full = np.zeros(2 * rank, np.int64)
    axes = _nonneg(axes, rank)
    for i, axis in enumerate(axes):
        full[axis], full[axis + rank] = pads[i], pads[i + len(axes)]
    inputs = _trim([x, _int64(work, f"{base}_pads", full), _input(node, 2)])
    return [node.derive("Pad", inputs, node.outputs, attrs)]


@_keep_if_not_constant
def _upsample(node: WorkNode, work: Work) -> list[WorkNode]:
    """Upsample (7, 9) and Resize-10 share semantics: asymmetric coordinates, floor for nearest."""
    attrs = dict(node.attrs)
    scales = attrs.pop("scales") if node.op == "Upsample" and node.opset < 9 else _constant(work, node.inputs[1])
    mode = attrs.get("mode", "nearest")
    mode = "linear" if mode == "bilinear" else mode
    new_attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric"}
    if mode == "nearest":
        new_attrs["nearest_mode"] = "floor"
    scales_name = work.add_constant(f"{node.outputs[0]}_scales", np.asarray(scales, np.float32).reshape(-1))
    return [node.derive("Resize", [node.inputs[0], "", scales_name], node.outputs, new_attrs, max(node.opset, 13))]


def _resize(node: WorkNode, work: Work) -> list[WorkNode]:
    if node.opset < 11:
        return _upsample(node, work)
    inputs = list(node.inputs)
    for index in (1, 2):
        name = _input(node, index)
        if name in work.constants and work.constants[name].size == 0:
            inputs[index] = ""
    return [node.derive("Resize", _trim(inputs), node.outputs, node.attrs, max(node.opset, 13))]


def _batch_norm(node: WorkNode, work: Work) -> list[WorkNode]:
    attrs = dict(node.attrs)
    spatial = attrs.pop("spatial", 1)
    if attrs.get("training_mode", 0) == 0:
        attrs.pop("training_mode", None)
    if spatial:
        return [node.derive(node.op, node.inputs, node.outputs, attrs, max(node.opset, 9))]
    params = node.inputs[1:5]
    if len(node.outputs) > 1 or not all(p in work.constants for p in params):
        return [node]
    scale, bias, mean, var = (work.constants[p].astype(np.float64) for p in params)
    x, y = node.inputs[0], node.outputs[0]
    dtype = work.types[x].numpy
    factor = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
    offset = bias - mean * factor
    scaled = _new_tensor(work, f"{y}_scaled", work.types[x])
    return [
        node.derive("Mul", [x, work.add_constant(f"{y}_factor", factor.astype(dtype))], [scaled], {}, 9),
        node.derive("Add", [scaled, work.add_constant(f"{y}_offset", offset.astype(dtype))], [y], {}, 9),
    ]


def _top_k(node: WorkNode, work: Work) -> list[WorkNode]:
    attrs = dict(node.attrs)
    rank = len(_shape(work, node.inputs[0]))
    attrs["axis"] = _nonneg(attrs.get("axis", -1), rank)[0]
    inputs = list(node.inputs)
    if node.opset < 10:
        inputs = [inputs[0], _int64(work, f"{node.outputs[0]}_k", [attrs.pop("k")])]
    return [node.derive("TopK", inputs, node.outputs, attrs, max(node.opset, 10))]


def _scatter(node: WorkNode, work: Work) -> list[WorkNode]:
    return _explicit_axis(0)(node.derive("ScatterElements", node.inputs, node.outputs, node.attrs, 11), work)


def _grid_sample(node: WorkNode, work: Work) -> list[WorkNode]:
    attrs = dict(node.attrs)
    mode = attrs.get("mode", "bilinear")
    attrs["mode"] = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return [node.derive(node.op, node.inputs, node.outputs, attrs, max(node.opset, 20))]


def _dropout(node: WorkNode, work: Work) -> list[WorkNode]:
    if len(node.outputs) > 1 and node.outputs[1]:
        shape = _shape(work, node.inputs[0])
        work.constants[node.outputs[1]] = np.ones(shape, dtype=np.bool_)
        work.types[node.outputs[1]] = ValueType.of(work.constants[node.outputs[1]])
    return _identity(node)


def _transpose(node: WorkNode, work: Work) -> list[WorkNode]:
    x = node.inputs[0]
    shape = _shape(work, x)
    rank = len(shape)
    perm = node.attrs.get("perm")
    perm = list(reversed(range(rank))) if perm is None else _nonneg(perm, rank)
    moved = [axis for axis in perm if shape[axis] != 1]
    if sorted(perm) != list(range(rank)) or moved != sorted(moved) or 0 in shape:
        return [node]
    target = _int64(work, f"{node.outputs[0]}_shape", [shape[axis] for axis in perm])
    return [node.derive("Reshape", [x, target], node.outputs[:1], {}, max(node.opset, 13))]


def _explicit_axis(default: int | None) -> Rule:
    """`axis` made explicit and non-negative."""

    def rule(node: WorkNode, work: Work) -> list[WorkNode]:
        attrs = dict(node.attrs)
        axis = attrs.get("axis", default)
        if axis is None:
            return [node]
        attrs["axis"] = _nonneg(axis, len(_shape(work, node.inputs[0])))[0]
        return [node.derive(node.op, node.inputs, node.outputs, attrs)]

    return rule


RULES: dict[str, Rule] = {
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "Hardmax": _softmax,
    "Clip": _clip,
    **dict.fromkeys(REDUCE_AXES_INPUT_SINCE, _reduce),
    "ArgMax": _arg_reduce,
    "ArgMin": _arg_reduce,
    "Split": _split,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Slice": _slice,
    "Pad": _pad,
    "Upsample": _upsample,
    "Resize": _resize,
    "BatchNormalization": _batch_norm,
    "TopK": _top_k,
    "Scatter": _scatter,
    "GridSample": _grid_sample,
    "Dropout": _dropout,
    "Transpose": _transpose,
    "Gather": _explicit_axis(0),
    "GatherElements": _explicit_axis(0),
    "ScatterElements": _explicit_axis(0),
    "Concat": _explicit_axis(None),
    "Flatten": _explicit_axis(1),
    "LayerNormalization": _explicit_axis(-1),
    "LpNormalization": _explicit_axis(-1),
}
