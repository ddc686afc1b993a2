"""Replace nodes of function operators (`EXPANDED` in `hetgen/ops/registry.py`) by their ONNX function body.

Runs on the prepared model, before shape inference: onnx types the model first (a context-dependent
body depends on its inputs' element types and ranks), then each node is replaced by its body with
the body's values renamed apart, its attribute references bound to the node's attributes or the
schema's defaults. Bodies may hold function operators themselves, so it repeats until none is left.
"""

from __future__ import annotations

import onnx
from onnx import defs

from hetgen.errors import ModelError
from hetgen.frontend.work import DEFAULT_DOMAINS
from hetgen.ops.registry import EXPANDED_OPS

MAX_DEPTH = 8  # bodies within bodies; the standard's deepest is 2


def expand_functions(proto: onnx.ModelProto, source: str) -> onnx.ModelProto:
    opset = next((o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS), 0)
    for _ in range(MAX_DEPTH):
        if not any(_expands(node) for node in proto.graph.node):
            return proto
        types = _value_types(proto)
        nodes: list[onnx.NodeProto] = []
        for index, node in enumerate(proto.graph.node):
            if _expands(node):
                nodes += _body(node, index, opset, types, source)
            else:
                nodes.append(node)
        del proto.graph.node[:]
        proto.graph.node.extend(nodes)
    raise ModelError(f"{source}: function operators nest deeper than {MAX_DEPTH} levels")


def _expands(node: onnx.NodeProto) -> bool:
    return node.domain in DEFAULT_DOMAINS and node.op_type in EXPANDED_OPS


def _value_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:  # contradicting declared shapes: the types onnx can still give
        inferred = proto
    graph = inferred.graph
    types = {vi.name: vi.type for vi in (*graph.input, *graph.value_info, *graph.output)}
    for tensor in graph.initializer:
        types[tensor.name] = onnx.helper.make_tensor_type_proto(tensor.data_type, tuple(tensor.dims))
    return types


def _newest(versions, opset: int) -> int | None:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _function(node: onnx.NodeProto, opset: int, types: dict, source: str) -> onnx.FunctionProto:
    what = f"{source}: {node.op_type} node {node.name or node.output[0]!r}"
    try:
        schema = defs.get_schema(node.op_type, opset)
    except defs.SchemaError:
        raise ModelError(f"{what}: {node.op_type} does not exist in opset {opset}") from None
    version = _newest(schema.function_opset_versions, opset) if schema.has_function else None
    if version is not None:
        return _parsed(schema.get_function_with_opset_version(version))
    version = _newest(schema.context_dependent_function_opset_versions, opset)
    if version is None:
        raise ModelError(f"{what}: onnx defines no function body for it at opset {opset}; hetgen has no kernel for it")
    input_types = [types.get(name, onnx.TypeProto()).SerializeToString() for name in node.input]
    try:
        body = schema.get_context_dependent_function_with_opset_version(version, node.SerializeToString(), input_types)
    except Exception as exc:  # onnx refuses to build the body (e.g. an input's type is unknown)
        raise ModelError(f"{what}: onnx cannot build its function body: {exc}") from None
    function = _parsed(body)
    if not function.node:
        raise ModelError(f"{what}: onnx cannot build its function body (input types {[n for n in node.input]})")
    return function


def rename_outer(graph: onnx.GraphProto, renamed: dict[str, str]) -> None:
    """Rename, in place, the names a subgraph reads from its enclosing scope (not its own ones)."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    local.update(name for node in graph.node for name in node.output)
    outer = {name: new for name, new in renamed.items() if name not in local}
    for node in graph.node:
        node.input[:] = [outer.get(name, name) for name in node.input]
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                rename_outer(attribute.g, outer)
    for output in graph.output:
        if output.name in outer:  # a branch that returns an outer value as it is
            output.name = outer[output.name]


def _parsed(body: bytes | onnx.FunctionProto) -> onnx.FunctionProto:
    if isinstance(body, onnx.FunctionProto):
        return body
    function = onnx.FunctionProto()
    function.ParseFromString(body)
    return function


def _bound_attribute(attribute: onnx.AttributeProto, node_attrs: dict, schema_defaults: dict):
    """The body attribute with its `ref_attr_name` resolved; None when neither node nor schema sets it."""
    if not attribute.ref_attr_name:
        return attribute
    bound = node_attrs.get(attribute.ref_attr_name) or schema_defaults.get(attribute.ref_attr_name)
    if bound is None:
        return None
    copy = onnx.AttributeProto()
    copy.CopyFrom(bound)
    copy.name = attribute.name
    return copy


def _body(node: onnx.NodeProto, index: int, opset: int, types: dict, source: str) -> list[onnx.NodeProto]:
    if node.op_type in HETGEN_BODIES:
        return HETGEN_BODIES[node.op_type](node, f"{node.op_type}_{index}_{node.name or node.output[0]}__", opset)
    function = _function(node, opset, types, source)
    schema = defs.get_schema(node.op_type, opset)
    defaults = {name: attr.default_value for name, attr in schema.attributes.items() if attr.default_value.name}
    node_attrs = {a.name: a for a in node.attribute}
    prefix = f"{node.op_type}_{index}_{node.name or node.output[0]}__"
    renamed = {name: actual for name, actual in zip(function.input, node.input)}
    renamed.update({name: "" for name in list(function.input)[len(node.input) :]})
    renamed.update({name: actual for name, actual in zip(function.output, node.output)})
    renamed.update({name: "" for name in list(function.output)[len(node.output) :]})

    def rename(name: str) -> str:
        if not name:
            return ""
        if name not in renamed:
            renamed[name] = prefix + name
        return renamed[name]

    nodes = []
    for k, inner in enumerate(function.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{prefix}{inner.name or k}"
        del copy.input[:]
        copy.input.extend(rename(n) for n in inner.input)
        del copy.output[:]
        copy.output.extend(rename(n) for n in inner.output)
        del copy.attribute[:]
        for attribute in inner.attribute:
            bound = _bound_attribute(attribute, node_attrs, defaults)
            if bound is not None:
                if bound.type == onnx.AttributeProto.GRAPH:  # a branch or body reads the function's values
                    rename_outer(bound.g, renamed)
                copy.attribute.append(bound)
        nodes.append(copy)
    return nodes


# -- bodies hetgen writes itself, for operators onnx defines without one --------------------------


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _scalar(name: str, value: float) -> onnx.NodeProto:
    return onnx.helper.make_node("Constant", [], [name], value_float=float(value))


def _lp_normalization(node: onnx.NodeProto, prefix: str, opset: int) -> list[onnx.NodeProto]:
    """x / ||x||_p along `axis` (p 1 or 2), as ReduceL1/ReduceL2 with kept dimensions and a Div.
    (CastLike needs opset 15; older models get Cast to float32, their only float type here.)"""
    attrs = _attrs(node)
    p, axis = int(attrs.get("p", 2)), int(attrs.get("axis", -1))
    if p not in (1, 2):
        raise ModelError(f"LpNormalization {node.name or node.output[0]!r}: p={p}; accepted: 1, 2")
    reduce = "ReduceL2" if p == 2 else "ReduceL1"
    norm = prefix + "norm"
    if opset >= 18:
        axes = onnx.helper.make_node("Constant", [], [prefix + "axes"], value_ints=[axis])
        nodes = [axes, onnx.helper.make_node(reduce, [node.input[0], prefix + "axes"], [norm], keepdims=1)]
    else:
        nodes = [onnx.helper.make_node(reduce, [node.input[0]], [norm], axes=[axis], keepdims=1)]
    # a zero norm divides zeros: by 1 instead, so they stay zeros (not NaN), as the reference gives
    safe = [
        _scalar(prefix + "zero", 0.0),
        onnx.helper.make_node("Equal", [norm, prefix + "zero"], [prefix + "is_zero"]),
        onnx.helper.make_node("CastLike", [prefix + "is_zero", norm], [prefix + "one_if_zero"])
        if opset >= 15
        else onnx.helper.make_node("Cast", [prefix + "is_zero"], [prefix + "one_if_zero"], to=onnx.TensorProto.FLOAT),
        onnx.helper.make_node("Add", [norm, prefix + "one_if_zero"], [prefix + "divisor"]),
    ]
    return [*nodes, *safe, onnx.helper.make_node("Div", [node.input[0], prefix + "divisor"], [node.output[0]])]


def _lp_pool(node: onnx.NodeProto, prefix: str, opset: int) -> list[onnx.NodeProto]:
    """(sum over each window of |x|^p)^(1/p): an AveragePool of |x|^p counting the padding, times
    the window's size."""
    attrs = _attrs(node)
    p = float(attrs.pop("p", 2))
    window = 1
    for extent in attrs["kernel_shape"]:
        window *= int(extent)
    if "dilations" in attrs and opset < 19:
        opset_note = "dilations need opset 19 (AveragePool's)"
        raise ModelError(f"LpPool {node.name or node.output[0]!r}: {opset_note}")
    n = lambda suffix: prefix + suffix  # noqa: E731
    return [
        onnx.helper.make_node("Abs", [node.input[0]], [n("abs")]),
        _scalar(n("p"), p),
        onnx.helper.make_node("Pow", [n("abs"), n("p")], [n("pow")]),
        onnx.helper.make_node("AveragePool", [n("pow")], [n("mean")], count_include_pad=1, **attrs),
        _scalar(n("window"), window),
        onnx.helper.make_node("Mul", [n("mean"), n("window")], [n("sum")]),
        _scalar(n("inverse_p"), 1.0 / p),
        onnx.helper.make_node("Pow", [n("sum"), n("inverse_p")], [node.output[0]]),
    ]


HETGEN_BODIES = {"LpNormalization": _lp_normalization, "LpPool": _lp_pool}
