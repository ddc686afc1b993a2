"""Read an ONNX model and check what hetgen needs before anything else looks at it.

Every problem is a `ModelError` that names the file: a missing file, bytes that are not an ONNX
protobuf, an opset outside MIN_OPSET..MAX_OPSET, an initializer that contradicts the graph input it
shadows, a model onnx's full checker or strict shape inference rejects (`onnx_checks`), no outputs,
inputs of an unsupported element type, inputs with dynamic dimensions (unless `shapes` fixes them).

Initializers that are also listed as graph inputs (required before IR version 4, still allowed
after) are treated as constants: hetgen compiles a model with its weights frozen.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from hetgen.errors import ModelError
from hetgen.frontend.external_data import (
    is_external,
    load_external_data,
    model_tensors,
    resolve_external_data,
)
from hetgen.frontend.integrity import check_initializers, check_tensor_data, check_text, check_wiring
from hetgen.frontend.onnx_checks import check_with_onnx
from hetgen.frontend.work import DEFAULT_DOMAINS
from hetgen.ir import DType

MIN_OPSET = 7
# Opsets 7..21 are the tested range; newer opsets of the installed onnx are accepted too (the
# operators hetgen supports changed only by gaining element types since 21).
MAX_OPSET = max(21, onnx.defs.onnx_opset_version())

Shapes = dict  # input name -> tuple of ints
MAX_PROTOBUF_BYTES = 2 << 30  # protobuf cannot parse a larger message; reading it would only waste memory


def read_model(model: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The model proto and how messages name it (its path, or "model 'graph name'")."""
    if isinstance(model, onnx.ModelProto):
        check_text(model, "the model")
        source = f"model '{model.graph.name or 'unnamed'}'"
        if any(is_external(t) for t in model_tensors(model)):
            model = onnx.ModelProto.FromString(model.SerializeToString())  # the caller's proto stays as it was
            load_external_data(model, None, source)
        return model, source
    path = Path(model)
    if not path.exists():
        raise ModelError(f"{path}: no such model file; give the path of an .onnx file")
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        raise ModelError(f"{path}: is {what}; give the path of an .onnx file")
    if path.stat().st_size >= MAX_PROTOBUF_BYTES:
        raise ModelError(
            f"{path}: {path.stat().st_size} bytes, past protobuf's 2 GiB limit for one message; "
            "save the weights as external data (onnx.save_model(..., save_as_external_data=True))"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read the model: {exc.strerror}") from None
    try:
        proto = onnx.ModelProto.FromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise ModelError(f"{path}: not an ONNX model (the protobuf does not parse: {exc})") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise ModelError(f"{path}: not an ONNX model (no graph or no opset_import); was the file truncated?")
    check_text(proto, str(path))
    resolve_external_data(proto, path, str(path))  # initializers stay external: see external_data
    return proto, str(path)


def check_model(proto: onnx.ModelProto, source: str) -> None:
    opset = next((o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS), None)
    if opset is None:
        raise ModelError(f"{source}: the model imports no default ('ai.onnx') opset")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelError(
            f"{source}: opset {opset} is not supported; hetgen accepts opsets {MIN_OPSET} to {MAX_OPSET} "
            f"(convert with onnx.version_converter.convert_version(model, {MAX_OPSET}))"
        )
    check_tensor_data(proto, source)
    check_wiring(proto.graph, source)
    check_initializers(proto, source)
    check_with_onnx(proto, source)  # on a skeleton: external and large weights stay in their file
    if not proto.graph.output:
        raise ModelError(f"{source}: the graph has no outputs; there is nothing to compute")


def prepare(proto: onnx.ModelProto, source: str, shapes: Shapes | None) -> onnx.ModelProto:
    """A copy of the model with initializers removed from the inputs and static input shapes."""
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    real_inputs = [vi for vi in graph.input if vi.name not in initializers]
    del graph.input[:]
    graph.input.extend(real_inputs)
    proto.ir_version = max(proto.ir_version, 4)  # initializers are constants from here on
    if shapes:
        _override_shapes(graph, source, dict(shapes), initializers)
    _check_inputs(graph, source)
    return proto


def _override_shapes(graph: onnx.GraphProto, source: str, shapes: Shapes, initializers: set[str]) -> None:
    inputs = {vi.name: vi for vi in graph.input}
    for name, dims in shapes.items():
        if name not in inputs:
            what = "a constant (initializer)" if name in initializers else "not a graph input"
            accepted = ", ".join(repr(n) for n in inputs) or "none"
            raise ModelError(f"{source}: shapes names {name!r}, which is {what}; graph inputs: {accepted}")
        tensor = inputs[name].type.tensor_type
        dims = tuple(int(d) for d in dims)
        if tensor.HasField("shape") and len(tensor.shape.dim) != len(dims):
            raise ModelError(
                f"{source}: shapes gives input {name!r} rank {len(dims)} {dims}, but the model declares rank "
                f"{len(tensor.shape.dim)}"
            )
        if any(d < 0 for d in dims):
            raise ModelError(f"{source}: shapes gives input {name!r} a negative dimension {dims}")
        _check_static_dims(tensor, name, dims, source)
        tensor.shape.Clear()
        tensor.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=d) for d in dims)
    # Shapes recorded for the old input shapes would now contradict the new ones.
    del graph.value_info[:]
    for vi in graph.output:
        vi.type.tensor_type.ClearField("shape")


def _check_static_dims(tensor: onnx.TypeProto.Tensor, name: str, dims: tuple[int, ...], source: str) -> None:
    """`shapes` fixes dynamic dimensions only: a dimension the model declares is the model's."""
    if not tensor.HasField("shape"):
        return
    declared = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
    changed = [
        axis for axis, (was, now) in enumerate(zip(declared, dims, strict=True)) if was is not None and was != now
    ]
    if changed:
        model_dims = "x".join("?" if d is None else str(d) for d in declared)
        axes = ", ".join(f"axis {axis} is {declared[axis]}, not {dims[axis]}" for axis in changed)
        raise ModelError(
            f"{source}: shapes gives input {name!r} {'x'.join(map(str, dims))}, but the model declares "
            f"{model_dims} and only its dynamic (?) dimensions can be fixed ({axes}); "
            "to change a static dimension, export the model again"
        )


def _shapes_hint(graph: onnx.GraphProto) -> str:
    """How to fix dynamic shapes, on the command line and in Python, with a dimension of 1 where the
    model declares none."""
    fixed = {}
    for vi in graph.input:
        dims = vi.type.tensor_type.shape.dim
        fixed[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
    cli = " ".join(f"--shape {name}={'x'.join(map(str, dims))}" for name, dims in fixed.items())
    return f"{cli} (hetgen build, generate, explain), or shapes={fixed!r} (hetgen.compile, import_model)"


def _check_inputs(graph: onnx.GraphProto, source: str) -> None:
    problems = []
    for vi in graph.input:
        if not vi.type.HasField("tensor_type"):
            problems.append(f"input {vi.name!r} is not a tensor; hetgen accepts tensor inputs only")
            continue
        tensor = vi.type.tensor_type
        if DType.from_onnx(tensor.elem_type) is None:
            accepted = ", ".join(d.label for d in DType)
            kind = helper.tensor_dtype_to_string(tensor.elem_type).removeprefix("TensorProto.").lower()
            problems.append(f"input {vi.name!r} has element type {kind}; hetgen accepts {accepted}")
        if not tensor.HasField("shape"):
            problems.append(f"input {vi.name!r} has no shape; hetgen needs static shapes")
            continue
        for axis, dim in enumerate(tensor.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value < 0:
                problems.append(f"input {vi.name!r} dimension {axis} is {dim.dim_value}; dimensions cannot be negative")
            if dim.HasField("dim_value"):
                continue
            what = f"dynamic ({dim.dim_param!r})" if dim.dim_param else "unknown"
            problems.append(f"input {vi.name!r} dimension {axis} is {what}; hetgen needs static shapes")
    if not problems:
        return
    hint = ""
    if any("static shapes" in p for p in problems):
        hint = "\n  fix them with " + _shapes_hint(graph)
    body = problems[0] if len(problems) == 1 else "\n  " + "\n  ".join(problems)
    raise ModelError(f"{source}: {body}{hint}")
