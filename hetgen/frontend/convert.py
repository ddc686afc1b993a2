"""A prepared ONNX model → the frontend's working graph, typed as far as onnx can tell.

onnx's own shape inference (`strict_mode=False, data_prop=True`) runs first, on the whole model;
what it leaves unknown is filled node by node later (see `resolve`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from hetgen.frontend.external_data import tensor_array
from hetgen.frontend.work import DEFAULT_DOMAINS, ValueType, Work, WorkNode, attr_value
from hetgen.names import c_identifier


def infer_onnx_shapes(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model with onnx's inferred value_info; a model onnx cannot infer is returned as it is."""
    try:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception:  # onnx raises on shapes that contradict declared ones: try without those
        stripped = onnx.ModelProto.FromString(proto.SerializeToString())
        del stripped.graph.value_info[:]
        for vi in stripped.graph.output:
            vi.type.tensor_type.ClearField("shape")
        try:
            return onnx.shape_inference.infer_shapes(stripped, strict_mode=False, data_prop=True)
        except Exception:
            return stripped  # the node-by-node pass will find the types


def value_type(vi: onnx.ValueInfoProto) -> ValueType | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tensor = vi.type.tensor_type
    if not tensor.elem_type or not tensor.HasField("shape"):
        return None
    dims = []
    for dim in tensor.shape.dim:
        if not dim.HasField("dim_value") or dim.dim_value < 0:
            return None
        dims.append(int(dim.dim_value))
    return ValueType(tensor.elem_type, tuple(dims))


def to_work(proto: onnx.ModelProto, source: str, name: str | None, folder: Path | None = None) -> Work:
    """`folder`: where the model's external initializers are (external_data.model_folder)."""
    graph = proto.graph
    opsets = {("" if o.domain in DEFAULT_DOMAINS else o.domain): o.version for o in proto.opset_import}
    constants = {t.name: tensor_array(t, folder, source) for t in graph.initializer}
    types: dict[str, ValueType] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        found = value_type(vi)
        if found is not None:
            types[vi.name] = found
    for tensor_name, array in constants.items():
        types[tensor_name] = ValueType.of(array)
    nodes = []
    for node in graph.node:
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        attrs = {a.name: attr_value(a) for a in node.attribute}
        work_node = WorkNode(node.op_type, list(node.input), list(node.output), attrs, domain, opsets.get(domain, 1))
        work_node.source_name = node.name
        nodes.append(work_node)
    graph_name = name or c_identifier(graph.name, "model")
    inputs = [vi.name for vi in graph.input if vi.name not in constants]
    outputs = [vi.name for vi in graph.output]
    work = Work(source, graph_name, inputs, outputs, nodes, constants, types, opsets)
    work.source_names = {node.source_name for node in nodes if node.source_name}
    work.names = {n for node in nodes for n in (*node.inputs, *node.outputs)} | {*inputs, *outputs, *types}
    return work


def constant_node_value(attrs: dict) -> np.ndarray | None:
    """The value of a Constant node, for the common attribute forms (others go to the evaluator)."""
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs:
        return np.asarray(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.asarray(attrs["value_floats"], dtype=np.float32)
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.asarray(attrs["value_ints"], dtype=np.int64)
    return None
