"""A model's own consistency, checked before anything trusts it: tensor data and graph wiring.

onnx's checker accepts a tensor whose bytes do not match its declared shape in some forms, and it
says "not topologically sorted" both for a node reading a name nothing produces and for a cycle.
These checks name the tensor or the nodes, with the numbers, so a hostile or broken model gets one
clear line instead of an exception from numpy's reshape later.
"""

from __future__ import annotations

import math

import onnx
from onnx import helper

from hetgen.errors import ModelError
from hetgen.frontend.external_data import is_external, model_tensors

T = onnx.TensorProto
# Element types packed below one byte per element, and those without a fixed size: not checked here.
_PACKED = {getattr(T, n) for n in ("INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1") if hasattr(T, n)}
_UNSIZED = {T.STRING, T.UNDEFINED}
_TWO_VALUES = {T.COMPLEX64, T.COMPLEX128}  # typed fields hold real and imaginary parts
# Shapes whose byte count passes this cannot be indexed with 64-bit signed sizes (size_t, ptrdiff_t).
MAX_TENSOR_BYTES = (1 << 63) - 1


def type_label(elem: int) -> str:
    """numpy's name where there is one (float32, as hetgen's DType labels say), else onnx's."""
    try:
        return helper.tensor_dtype_to_np_dtype(elem).name
    except (KeyError, ValueError, TypeError):
        pass
    try:
        return helper.tensor_dtype_to_string(elem).removeprefix("TensorProto.").lower()
    except (KeyError, ValueError):
        return f"element type {elem}"


def check_text(proto: onnx.ModelProto, source: str) -> None:
    """Every string field (names, op types, domains, docs) is UTF-8 text.

    ONNX's protos are proto2, where the parser does not validate strings; Python then hands out
    `bytes` where every later step (and onnx's checker) expects `str`.
    """
    found = _first_non_utf8(proto, "model")
    if found:
        field, value = found
        raise ModelError(f"{source}: {field} is not UTF-8 text ({value[:40]!r}); names in a model must be UTF-8")


def _first_non_utf8(message, where: str) -> tuple[str, bytes] | None:
    for field, value in message.ListFields():
        repeated = getattr(field, "is_repeated", None)  # protobuf >= 5; `label` before
        repeated = field.label == field.LABEL_REPEATED if repeated is None else repeated
        for index, item in enumerate(value if repeated else [value]):
            at = f"{where}.{field.name}" + (f"[{index}]" if repeated else "")
            if field.type == field.TYPE_MESSAGE:
                found = _first_non_utf8(item, at)
                if found:
                    return found
            elif field.type == field.TYPE_STRING and isinstance(item, bytes):
                return at, item
    return None


def check_tensor_data(proto: onnx.ModelProto, source: str) -> None:
    for tensor in model_tensors(proto):
        _check_tensor(tensor, source)


def _check_tensor(tensor: onnx.TensorProto, source: str) -> None:
    where = f"{source}: tensor '{tensor.name or '(unnamed)'}'"
    dims = tuple(tensor.dims)
    if any(d < 0 for d in dims):
        raise ModelError(f"{where} declares shape {dims} with a negative dimension")
    if tensor.data_type in _UNSIZED or tensor.data_type in _PACKED:
        return
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        raise ModelError(f"{where} has unknown element type {tensor.data_type}") from None
    count = math.prod(dims)
    nbytes = count * itemsize
    declared = f"declares shape {dims} of {type_label(tensor.data_type)}, {nbytes} bytes"
    if nbytes > MAX_TENSOR_BYTES:
        raise ModelError(f"{where} {declared}, more than any 64-bit target can address")
    if is_external(tensor):
        return  # its file's bytes were checked against the shape where it was found (external_data.locate)
    if tensor.HasField("raw_data") or tensor.raw_data:
        if len(tensor.raw_data) != nbytes:
            raise ModelError(f"{where} {declared}, but carries {len(tensor.raw_data)} bytes")
        return
    values = sum(
        len(field)
        for field in (tensor.float_data, tensor.int32_data, tensor.int64_data, tensor.double_data, tensor.uint64_data)
    )
    expected = count * (2 if tensor.data_type in _TWO_VALUES else 1)
    if values != expected:
        raise ModelError(f"{where} {declared} ({expected} values), but carries {values} values")


def check_initializers(proto: onnx.ModelProto, source: str) -> None:
    """An initializer named like a graph input is that input's default value, so it must match the
    input's declared element type and shape (onnx's checker does not compare them; onnxruntime
    does). hetgen freezes such an initializer as a constant, so a mismatch would silently take the
    input away from the model."""
    declared = {vi.name: vi.type.tensor_type for vi in proto.graph.input if vi.type.HasField("tensor_type")}
    for tensor in proto.graph.initializer:
        if tensor.name not in declared:
            continue
        tensor_type, dims = declared[tensor.name], tuple(tensor.dims)
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor_type.shape.dim)
        same_shape = not tensor_type.HasField("shape") or (
            len(shape) == len(dims) and all(not isinstance(d, int) or d == v for d, v in zip(shape, dims))
        )
        if tensor_type.elem_type in (0, tensor.data_type) and same_shape:
            continue
        shown = shape if tensor_type.HasField("shape") else "no shape"
        raise ModelError(
            f"{source}: initializer {tensor.name!r} ({type_label(tensor.data_type)} {dims}) has the name of graph "
            f"input {tensor.name!r}, declared {type_label(tensor_type.elem_type)} {shown}; an initializer named "
            "like an input is its default value and must match its type and shape"
        )


def check_wiring(graph: onnx.GraphProto, source: str) -> None:
    """Every node input and graph output is produced by something, and no nodes form a cycle."""
    producers = {name: node for node in graph.node for name in node.output if name}
    available = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    available |= {s.values.name for s in graph.sparse_initializer}
    for node in graph.node:
        for name in node.input:
            if name and name not in available and name not in producers:
                raise ModelError(
                    f"{source}: {_label(node)} reads {name!r}, which no node, graph input or initializer produces"
                )
    for output in graph.output:
        if output.name not in available and output.name not in producers:
            raise ModelError(f"{source}: graph output {output.name!r} is not produced by any node or input")
    cycle = _find_cycle(graph, producers, available)
    if cycle:
        path = " -> ".join(_label(node) for node in cycle)
        raise ModelError(
            f"{source}: the graph has a cycle: {path} -> {_label(cycle[0])}; an ONNX graph must be acyclic"
        )


def _find_cycle(graph: onnx.GraphProto, producers: dict, available: set) -> list[onnx.NodeProto]:
    """One cycle of nodes (each reading the next one's output... back to the first), or []."""
    state: dict[int, int] = {}  # id(node) -> 1 on the current path, 2 done
    for start in graph.node:
        if state.get(id(start)):
            continue
        path, stack = [], [(start, iter(start.input))]
        state[id(start)] = 1
        path.append(start)
        while stack:
            node, inputs = stack[-1]
            name = next(inputs, None)
            if name is None:
                state[id(node)] = 2
                stack.pop()
                path.pop()
                continue
            producer = producers.get(name) if name and name not in available else None
            if producer is None:
                continue
            mark = state.get(id(producer))
            if mark == 1:  # back to a node on the path: the cycle is the path from there on
                return path[path.index(producer) :][::-1]
            if mark is None:
                state[id(producer)] = 1
                path.append(producer)
                stack.append((producer, iter(producer.input)))
    return []


def _label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} '{node.name}'" if node.name else f"{node.op_type} (output {node.output[0]!r})"
