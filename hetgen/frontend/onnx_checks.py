"""onnx's own judgement of a model: the full checker and strict shape inference, as one-line errors.

Both run on a *skeleton* of the model: every top-level initializer larger than SKELETON_BYTES (or
kept in an external file) becomes a graph input of the same type and shape. The weights' values
matter to neither check (their bytes are checked by `integrity`), only their types and shapes do;
the small constants shape inference reads (Reshape targets, Slice bounds, Gather indices) stay. So
the cost does not grow with the weights, and a model whose weights pass protobuf's 2 GiB limit
(external data) is checked in memory like any other.

`onnx.checker.check_model(full_check=True)` runs strict inference without data propagation; the
second pass (`check_type`, `strict_mode`, `data_prop`) also follows shape arithmetic through
Shape/Gather/Concat chains. Where either is wrong about a valid model, the case is pinned in
`checker_exceptions`; such a model is let through and hetgen's own rules (`rules`) still judge it.
"""

from __future__ import annotations

import re

import onnx
from onnx import helper

from hetgen.errors import ModelError
from hetgen.frontend.checker_exceptions import pinned_exception
from hetgen.frontend.external_data import is_external

SKELETON_BYTES = 64 << 10

# "(op_type:Concat, node name: cat): [ShapeInferenceError] All inputs ..." (the node name is optional)
_NODE_ERROR = re.compile(
    r"\(op_type:(?P<op>[^,)]*)(?:, node name: (?P<name>.*?))?\): \[(?P<kind>\w+)\] (?P<text>.*)", re.DOTALL
)


def check_with_onnx(proto: onnx.ModelProto, source: str) -> None:
    skeleton = model_skeleton(proto)
    try:
        onnx.checker.check_model(skeleton, full_check=True)
        onnx.shape_inference.infer_shapes(skeleton, check_type=True, strict_mode=True, data_prop=True)
    except onnx.checker.ValidationError as exc:
        message = _printable(" ".join(str(exc).split()))  # onnx prints the offending node over several lines
        raise ModelError(f"{source}: the onnx checker rejects the model: {message}") from None
    except onnx.shape_inference.InferenceError as exc:
        line = _inference_error(str(exc), proto.graph)
        if line is not None:
            raise ModelError(f"{source}: {line}") from None


def model_skeleton(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without the large top-level initializers' data: each is a typed graph input instead."""
    skeleton = onnx.ModelProto()
    for field, value in proto.ListFields():
        if field.name != "graph":
            _copy_field(skeleton, field, value)
    for field, value in proto.graph.ListFields():
        if field.name != "initializer":
            _copy_field(skeleton.graph, field, value)
    declared = {vi.name for vi in proto.graph.input}
    for tensor in proto.graph.initializer:
        if not (is_external(tensor) or tensor.ByteSize() > SKELETON_BYTES):
            skeleton.graph.initializer.append(tensor)
        elif tensor.name not in declared:  # before IR 4 every initializer is listed as an input already
            skeleton.graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    return skeleton


def _copy_field(message, field, value) -> None:
    repeated = getattr(field, "is_repeated", None)  # protobuf >= 5; `label` before
    if field.label == field.LABEL_REPEATED if repeated is None else repeated:
        getattr(message, field.name).extend(value)
    elif field.type == field.TYPE_MESSAGE:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)


def _inference_error(text: str, graph: onnx.GraphProto) -> str | None:
    """The one line for onnx's inference errors, naming the node; None when every one is pinned."""
    text = text.removeprefix("[ShapeInferenceError] ").removeprefix("Inference error(s): ")
    # one error per node, each starting "(op_type:"; a name in it may hold a line break of its own
    errors = [e.strip() for e in re.split(r"\n(?=\(op_type:)", text.strip()) if e.strip()] or [text.strip()]
    lines = [line for line in map(lambda e: _error_line(e, graph), errors) if line is not None]
    if not lines:
        return None
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    return f"{lines[0]}{more}"


def _error_line(error: str, graph: onnx.GraphProto) -> str | None:
    found = _NODE_ERROR.search(error)
    if found is None:
        return f"onnx shape inference rejects the model: {_printable(error)}"
    op, name, rule = found["op"], found["name"] or "", found["text"].strip()
    if pinned_exception(op, rule) is not None:
        return None
    return f"{_node_label(graph, op, name)}: {_printable(rule)} (onnx shape inference, strict)"


def _printable(text: str) -> str:
    """onnx's text quotes the model's names as they are: escape what a terminal would act on."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _node_label(graph: onnx.GraphProto, op: str, name: str) -> str:
    if name:
        return f"{_printable(op)} {name!r}"
    unnamed = next((n for n in graph.node if n.op_type == op and not n.name and n.output), None)
    shown = _printable(op)
    return f"{shown} (output {unnamed.output[0]!r})" if unnamed is not None else f"{shown} (unnamed)"
