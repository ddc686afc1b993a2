"""hetgen's own validity rules for single nodes: what the ONNX spec forbids and onnx does not catch.

onnx's checker and strict inference (`onnx_checks`) catch most broken nodes, but not all: a pooling
or convolution window larger than its padded input is only found when the model happens to declare
the output shape, a constant Gather index out of range only when onnxruntime runs the model, and
the shapes hetgen itself works out node by node (`resolve`) were never shown to onnx. These rules
run on every node of the model as `resolve` reaches it, before it is folded, rewritten or inlined,
when its input types and constant inputs are known; a rule whose facts are unknown says nothing.

Each rule is one function from the node to the broken rule's text (or None), registered in RULES.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hetgen.errors import ModelError
from hetgen.frontend.integrity import type_label
from hetgen.frontend.work import ValueType, Work, WorkNode
from hetgen.ir import MAX_RANK


def check_node(node: WorkNode, work: Work) -> None:
    """Raise the ModelError naming the node and the rule it breaks, if it breaks one."""
    rule = RULES.get(node.op) if node.is_default_domain else None
    problem = rule(node, work) if rule else None
    if problem:
        raise ModelError(f"{work.source}: {node.label}: {problem}")


def check_rank(name: str, value_type: ValueType, where: str, source: str) -> None:
    if value_type.rank > MAX_RANK:
        raise ModelError(
            f"{source}: tensor {name!r} ({where}) has rank {value_type.rank}, shape {value_type.shape}; "
            f"hetgen's runtime holds at most {MAX_RANK} dimensions (HG_MAX_RANK)"
        )


def _type(node: WorkNode, work: Work, index: int) -> ValueType | None:
    name = node.inputs[index] if index < len(node.inputs) else ""
    return work.types.get(name) if name else None


def _constant(node: WorkNode, work: Work, index: int) -> np.ndarray | None:
    name = node.inputs[index] if index < len(node.inputs) else ""
    return work.constants.get(name) if name else None


def _axis(axis: int, rank: int, what: str = "axis") -> tuple[int | None, str | None]:
    if not -rank <= axis < rank:
        return None, f"{what} {axis} is outside [{-rank}, {rank - 1}] for rank {rank}"
    return axis % rank, None


# -- Concat ---------------------------------------------------------------------------------------


def concat(node: WorkNode, work: Work) -> str | None:
    types = [(i, name, work.types.get(name)) for i, name in enumerate(node.inputs) if name]
    if any(t is None for _, _, t in types) or not types:
        return None
    first_index, first_name, first = types[0]
    axis, problem = _axis(node.attrs.get("axis", 1 if node.opset < 4 else 0), first.rank)
    if problem:
        return problem
    for index, name, other in types[1:]:
        if other.rank != first.rank:
            return (
                f"input {index} ({name!r}) has rank {other.rank}, input {first_index} ({first_name!r}) rank "
                f"{first.rank}; Concat's inputs must have the same rank"
            )
        if any(a != b for k, (a, b) in enumerate(zip(first.shape, other.shape)) if k != axis):
            return (
                f"input {index} ({name!r}) has shape {other.shape}, input {first_index} ({first_name!r}) "
                f"{first.shape}; Concat's inputs must agree on every axis but axis {axis}"
            )
    return None


# -- Reshape --------------------------------------------------------------------------------------


def reshape(node: WorkNode, work: Work) -> str | None:
    target = _constant(node, work, 1) if node.opset >= 5 else node.attrs.get("shape")
    if target is None:
        return None
    target = [int(v) for v in np.asarray(target).reshape(-1)]
    allowzero = bool(node.attrs.get("allowzero", 0))
    if target.count(-1) > 1:
        return f"the target shape {target} has {target.count(-1)} dimensions of -1; at most one may be inferred"
    if any(v < -1 for v in target):
        return f"the target shape {target} has a dimension below -1"
    if allowzero and 0 in target and -1 in target:
        return f"the target shape {target} has both 0 and -1 with allowzero=1; the -1 cannot be inferred"
    source = _type(node, work, 0)
    if source is None:
        return None
    if not allowzero and any(v == 0 and k >= source.rank for k, v in enumerate(target)):
        return f"the target shape {target} copies (0) a dimension the input {source.shape} does not have"
    dims = [source.shape[k] if v == 0 and not allowzero else v for k, v in enumerate(target)]
    known = int(np.prod([d for d in dims if d != -1], dtype=object))  # Python ints: no overflow
    fits = (known != 0 and source.size % known == 0) if -1 in dims else source.size == known
    if not fits:
        return f"the input {source.shape} has {source.size} elements, which the target shape {target} cannot hold"
    return None


# -- windows: Conv and pooling --------------------------------------------------------------------

# op -> (data input index, weight input index or None, first opset with `dilations`)
_WINDOWED = {
    "Conv": (0, 1, 1),
    "ConvInteger": (0, 1, 1),
    "QLinearConv": (0, 3, 1),
    "MaxPool": (0, None, 10),
    "AveragePool": (0, None, 19),
    "LpPool": (0, None, 18),
}


def window(node: WorkNode, work: Work) -> str | None:
    data_index, weight_index, dilated_since = _WINDOWED[node.op]
    data = _type(node, work, data_index)
    if data is None or data.rank < 3:
        return None
    spatial = data.rank - 2
    kernel = node.attrs.get("kernel_shape")
    if kernel is None and weight_index is not None:
        weight = _type(node, work, weight_index)
        kernel = weight.shape[2:] if weight is not None else None
    if kernel is None:
        return None
    dilations = node.attrs.get("dilations", (1,) * spatial) if node.opset >= dilated_since else (1,) * spatial
    strides = node.attrs.get("strides", (1,) * spatial)
    pads = node.attrs.get("pads", (0,) * (2 * spatial))
    for name, values, length in (
        ("kernel_shape", kernel, spatial),
        ("dilations", dilations, spatial),
        ("strides", strides, spatial),
        ("pads", pads, 2 * spatial),
    ):
        if len(values) != length:
            return f"{name} has {len(values)} values; the input {data.shape} needs {length}"
        if any(v < (0 if name == "pads" else 1) for v in values):
            return f"{name} {list(values)} must be {'non-negative' if name == 'pads' else 'positive'}"
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID") or data.size == 0:
        return None  # SAME_*: the padding gives every output a window; an empty input has no outputs
    for axis in range(spatial):
        before, after = (pads[axis], pads[axis + spatial]) if auto_pad == "NOTSET" else (0, 0)
        padded = data.shape[axis + 2] + before + after
        span = (kernel[axis] - 1) * dilations[axis] + 1
        if span > padded:
            taps = f"{kernel[axis]} taps" + (f" at dilation {dilations[axis]}" if dilations[axis] != 1 else "")
            return (
                f"along spatial axis {axis} the window spans {span} elements ({taps}), but the padded input has "
                f"{padded} ({data.shape[axis + 2]} + pads {before} and {after}); no output position fits"
            )
    return None


# -- Gather ---------------------------------------------------------------------------------------


def gather(node: WorkNode, work: Work) -> str | None:
    data, indices = _type(node, work, 0), _constant(node, work, 1)
    if data is None:
        return None
    axis, problem = _axis(int(node.attrs.get("axis", 0)), data.rank)
    if problem or indices is None or not np.asarray(indices).size:
        return problem
    extent, values = data.shape[axis], np.asarray(indices)
    if node.op == "GatherElements" and values.ndim != data.rank:
        return f"the indices have rank {values.ndim}, the data {data.rank}; GatherElements needs the same rank"
    low, high = int(values.min()), int(values.max())
    if low < -extent or high >= extent:
        bad = low if low < -extent else high
        return (
            f"constant index {bad} is out of range for axis {axis} of {node.inputs[0]!r} ({extent} elements); "
            f"indices must lie in [{-extent}, {extent - 1}]"
        )
    return None


# -- If -------------------------------------------------------------------------------------------


def if_branches(node: WorkNode, work: Work) -> str | None:
    then_branch, else_branch = node.attrs.get("then_branch"), node.attrs.get("else_branch")
    if then_branch is None or else_branch is None:
        return None
    then_out, else_out = list(then_branch.output), list(else_branch.output)
    if len(then_out) != len(else_out) or len(then_out) != len(node.outputs):
        return (
            f"then_branch has {len(then_out)} outputs, else_branch {len(else_out)}, the node {len(node.outputs)}; "
            "both branches must produce one value per output"
        )
    for index, (a, b) in enumerate(zip(then_out, else_out)):
        kind_a, kind_b = a.type.WhichOneof("value"), b.type.WhichOneof("value")
        elem_a = a.type.tensor_type.elem_type if kind_a == "tensor_type" else 0
        elem_b = b.type.tensor_type.elem_type if kind_b == "tensor_type" else 0
        if (kind_a and kind_b and kind_a != kind_b) or (elem_a and elem_b and elem_a != elem_b):
            what_a = type_label(elem_a) if elem_a else kind_a
            what_b = type_label(elem_b) if elem_b else kind_b
            return (
                f"output {index} is {what_a} in then_branch ({a.name!r}) but {what_b} in else_branch ({b.name!r}); "
                "both branches must produce the same types"
            )
    return None


RULES: dict[str, Callable[[WorkNode, Work], str | None]] = {
    "Concat": concat,
    "Reshape": reshape,
    **dict.fromkeys(_WINDOWED, window),
    "Gather": gather,
    "GatherElements": gather,
    "If": if_branches,
}
