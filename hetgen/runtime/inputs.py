"""The inputs verify and bench feed a built model: the user's (.npz) or seeded random ones that the
model can actually take.

Random integers are not always valid data: an integer input that indexes a tensor (Gather's indices,
an embedding's token ids, OneHot's indices) must stay below the indexed axis, and one that divides
must not be zero. `value_ranges` reads those limits from the ONNX model the project was built from,
so a failure of `verify` means the generated code is wrong, not that the inputs were. (Operands
that decide shapes, such as Slice's starts or Reshape's shape, must be constants for hetgen, so they
are never graph inputs.)
"""

from __future__ import annotations

import zipfile
from collections import deque
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from hetgen.errors import HetgenError
from hetgen.ops.base import NO_ROLES, InputRoles
from hetgen.ops.registry import op_def

DEFAULT_RANGE = (0, 8)  # small non-negative integers, where nothing narrower is known


def value_ranges(model_path: Path, inputs) -> dict[str, tuple[int, int]]:
    """For each integer input, the half-open range [low, high) of values the model accepts."""
    integer_inputs = [t.name for t in inputs if np.issubdtype(t.dtype, np.integer)]
    if not integer_inputs:
        return {}
    proto = onnx.load(str(model_path), load_external_data=False)
    shapes = _static_shapes(proto, {t.name: t.shape for t in inputs})
    constants = {t.name: t for t in proto.graph.initializer}
    constants.update(
        {n.output[0]: n.attribute[0].t for n in proto.graph.node if n.op_type == "Constant" and n.attribute}
    )
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in proto.graph.node:
        for position, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, position))
    return {name: _range(name, consumers, shapes, constants) for name in integer_inputs}


def _range(name: str, consumers, shapes, constants) -> tuple[int, int]:
    low, high = DEFAULT_RANGE
    seen, queue = {name}, deque([name])
    while queue:
        for node, position in consumers.get(queue.popleft(), ()):
            roles = _roles(node)
            if roles.carries and (position == 0 or roles.carries == "all"):
                for output in node.output:
                    if output and output not in seen:
                        seen.add(output)
                        queue.append(output)
            elif roles.indices is not None and position == roles.indices:
                high = min(high, _indexed_size(node, roles, shapes))
            elif node.op_type == "OneHot" and position == 0:
                depth = constants.get(node.input[1]) if len(node.input) > 1 else None
                high = min(high, int(numpy_helper.to_array(depth).reshape(-1)[0]) if depth is not None else 1)
            elif roles.divisor == position:
                low = max(low, 1)
    return low, max(high, low + 1)


def _roles(node: onnx.NodeProto) -> InputRoles:
    """What the operator's inputs and output hold (`OpDef.input_roles`): which it passes on, which index or divide."""
    definition = op_def(node.op_type)
    return definition.input_roles if definition is not None else NO_ROLES


def _indexed_size(node: onnx.NodeProto, roles: InputRoles, shapes: Mapping[str, tuple[int, ...]]) -> int:
    """The size of the axis `node` indexes; 1 (only zeros, always valid) when it is not known."""
    data = shapes.get(node.input[0])
    if not data or min(data) <= 0:
        return 1
    axis_attribute = roles.indexed_axis
    if axis_attribute is None:  # GatherND / ScatterND index the leading axes: stay below all of them
        return min(data)
    axis = next((a.i for a in node.attribute if a.name == axis_attribute), 0)
    return data[axis] if -len(data) <= axis < len(data) else 1


def _static_shapes(proto: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape that ONNX shape inference can tell, given the shapes the model was built for."""
    graph = proto.graph
    for value in graph.input:
        if value.name in input_shapes:
            tensor = value.type.tensor_type
            tensor.shape.Clear()
            tensor.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=d) for d in input_shapes[value.name])
    del graph.value_info[:]
    try:
        graph = shape_inference.infer_shapes(proto).graph
    except Exception:  # inference is a help here, not a requirement: fall back to indices of 0
        pass
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    return shapes


def read_inputs(path: Path, inputs) -> dict[str, np.ndarray]:
    """The user's inputs from an .npz file (`np.savez(path, **{name: array})`), checked against the
    names, shapes and dtypes the model was built for."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise HetgenError(
            f"{path}: no such file; --inputs takes an .npz written by np.savez(path, name=array)"
        ) from None
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise HetgenError(
            f"{path}: not a numpy .npz file ({error}); write it with np.savez(path, name=array)"
        ) from None
    expected = ", ".join(str(t) for t in inputs)
    missing = [t.name for t in inputs if t.name not in arrays]
    unknown = sorted(set(arrays) - {t.name for t in inputs})
    if missing or unknown:
        raise HetgenError(f"{path}: missing inputs {missing}, unknown arrays {unknown}; the model takes {expected}")
    problems = []
    for info in inputs:
        array = arrays[info.name]
        if array.shape != info.shape:
            problems.append(f"{info.name!r} has shape {array.shape}; the model was built for {info.shape}")
        if array.dtype != info.dtype:
            problems.append(f"{info.name!r} has dtype {array.dtype}; the model takes {info.dtype}")
    if problems:
        raise HetgenError(f"{path}: " + "; ".join(problems) + f" (the model takes {expected})")
    return {t.name: arrays[t.name] for t in inputs}
