"""ONNX model → Graph IR (minimal first version: load, infer shapes, convert).

Constant folding, hetgen's own shape rules, opset handling and the unsupported-operator report are
added on top of this by the frontend stage proper.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from hetgen.errors import ModelError
from hetgen.ir import DType, Graph, Node, TensorType


def c_identifier(text: str, fallback: str) -> str:
    cleaned = re.sub(r"[^0-9A-Za-z_]", "_", text).strip("_")
    if not cleaned:
        cleaned = fallback
    if cleaned[0].isdigit():
        cleaned = f"_{cleaned}"
    return cleaned


def _attr_value(attr: onnx.AttributeProto):
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
    return value


def _tensor_type(value_info: onnx.ValueInfoProto, where: str) -> TensorType | None:
    tensor = value_info.type.tensor_type
    dtype = DType.from_onnx(tensor.elem_type)
    if dtype is None or not tensor.HasField("shape"):
        return None
    dims = []
    for dim in tensor.shape.dim:
        if not dim.HasField("dim_value"):
            return None
        dims.append(dim.dim_value)
    return TensorType(dtype, tuple(dims))


def load_model(model: "str | Path | onnx.ModelProto") -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    if not path.is_file():
        raise ModelError(f"{path}: no such model file; give the path of an .onnx file")
    try:
        return onnx.load(str(path))
    except Exception as exc:  # protobuf raises several unrelated types
        raise ModelError(f"{path}: not a readable ONNX model ({exc.__class__.__name__}: {exc})") from None


def import_onnx(model: "str | Path | onnx.ModelProto") -> Graph:
    proto = load_model(model)
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    graph = inferred.graph
    constants: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        constants[init.name] = numpy_helper.to_array(init)
    types: dict[str, TensorType] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        tensor_type = _tensor_type(vi, vi.name)
        if tensor_type is not None:
            types[vi.name] = tensor_type
    for name, array in constants.items():
        dtype = DType.from_numpy(array.dtype)
        if dtype is not None:
            types[name] = TensorType(dtype, tuple(array.shape))
    inputs = tuple(vi.name for vi in graph.input if vi.name not in constants)
    nodes = []
    for index, node in enumerate(graph.node):
        attrs = tuple(sorted((a.name, _attr_value(a)) for a in node.attribute))
        if node.op_type == "Constant" and len(node.output) == 1:
            value = _constant_node_value(dict(attrs))
            if value is not None:
                constants[node.output[0]] = value
                dtype = DType.from_numpy(value.dtype)
                if dtype is not None:
                    types[node.output[0]] = TensorType(dtype, tuple(value.shape))
                continue
        name = f"n{index}_{c_identifier(node.op_type.lower(), 'op')}"
        nodes.append(Node(name, node.op_type, tuple(node.input), tuple(node.output), attrs, node.name))
    outputs = tuple(vi.name for vi in graph.output)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    return Graph(c_identifier(graph.name, "model"), inputs, outputs, tuple(nodes), types, constants, opset)


def _constant_node_value(attrs: dict) -> np.ndarray | None:
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
