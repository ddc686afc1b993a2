"""External data: tensor bytes an ONNX model keeps in files beside it, read only from its own folder.

`onnx.save_model(..., save_as_external_data=True)` writes large tensors to a file next to the model
and records, per tensor, a `location` relative to the model's folder with an `offset` and a
`length`. A model is input from anyone, so a location is a path an attacker chose: an absolute
path, a `../`, or a symlink could make hetgen read (and compile into a library) any file the user
can read. Every location must therefore resolve, symlinks followed, to a regular file inside the
model's folder, and the bytes it names must be there, as many as the tensor's shape declares;
anything else is a one-line `ModelError` naming the model and the tensor.

The graph's own initializers are the weights, and can be larger than one protobuf message (2 GiB):
they stay external in the proto, so the checker, shape inference and every copy of the proto see
a small message, and become memory-mapped arrays when the frontend reads them (`tensor_array`):
importing a model costs the pages its folding really reads, not its weights' size twice over. The
few other tensors (node attributes, subgraph initializers, sparse tensors) are read into the proto,
where the passes that read them expect their bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hetgen.errors import ModelError

ACCEPTED_KEYS = ("location", "offset", "length", "checksum", "basepath")
# External initializers up to this size are read into the proto, as long as all those read stay
# within IN_PROTO_BUDGET: shape inference propagates their values (a Reshape's target shape),
# which it cannot for a tensor left external. Larger ones are weights, and stay in their file.
IN_PROTO_LIMIT = 1 << 20
IN_PROTO_BUDGET = 64 << 20


@dataclass(frozen=True)
class ExternalBytes:
    """Where one tensor's bytes lie, checked: a regular file inside the model's folder."""

    path: Path
    offset: int
    nbytes: int


def is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == onnx.TensorProto.EXTERNAL


def model_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of the model: initializers and tensor attributes, subgraphs included."""
    yield from _graph_tensors(proto.graph)


def _graph_tensors(graph: onnx.GraphProto, initializers: bool = True) -> Iterator[onnx.TensorProto]:
    if initializers:
        yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _graph_tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _graph_tensors(subgraph)


def model_folder(model) -> Path | None:
    """The folder a model's external data is read from: a path's own folder; None for a proto."""
    return Path(model).resolve().parent if isinstance(model, (str, Path)) else None


def resolve_external_data(proto: onnx.ModelProto, model_path: Path | None, source: str) -> None:
    """Check every external tensor's location (in place); read all but the graph's initializers.

    `model_path` is None for a model given in memory: it has no folder, so external data is refused.
    The initializers stay external, to be mapped by `tensor_array` with the same folder.
    """
    folder = model_path.resolve().parent if model_path is not None else None
    small, budget = [], IN_PROTO_BUDGET
    for tensor in proto.graph.initializer:
        if is_external(tensor):
            nbytes = locate(tensor, folder, source).nbytes
            if nbytes <= min(IN_PROTO_LIMIT, budget):
                small.append(tensor)
                budget -= nbytes
    _read_into_proto(iter(small), folder, source)
    _read_into_proto(_graph_tensors(proto.graph, initializers=False), folder, source)


def load_external_data(proto: onnx.ModelProto, model_path: Path | None, source: str) -> None:
    """Read every external tensor's bytes into the proto (in place), from inside the model's folder:
    a self-contained copy of the model, for what needs one (the model copy verify compares with)."""
    _read_into_proto(model_tensors(proto), model_path.resolve().parent if model_path else None, source)


def _read_into_proto(tensors: Iterator[onnx.TensorProto], folder: Path | None, source: str) -> None:
    for tensor in tensors:
        if not is_external(tensor):
            continue
        where = locate(tensor, folder, source)
        with where.path.open("rb") as stream:
            stream.seek(where.offset)
            tensor.raw_data = stream.read(where.nbytes)
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]


def gather_external_data(proto: onnx.ModelProto, folder: Path, source: str, data_name: str) -> bytes:
    """Point the proto's external initializers (in place) at one data file `data_name`, and return
    that file's bytes: each tensor's bytes, 64-byte aligned, read straight from where `locate`
    finds them. The model keeps its small message; the weights are read once, never serialised."""
    external = [(t, locate(t, folder, source)) for t in proto.graph.initializer if is_external(t)]
    offsets, size = [], 0
    for _, where in external:
        size += -size % 64  # aligned, as onnx and onnxruntime like to map it
        offsets.append(size)
        size += where.nbytes
    data = bytearray(size)
    for (tensor, where), offset in zip(external, offsets):
        with where.path.open("rb") as stream:
            stream.seek(where.offset)
            stream.readinto(memoryview(data)[offset : offset + where.nbytes])
        del tensor.external_data[:]
        for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(where.nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return bytes(data)


def tensor_array(tensor: onnx.TensorProto, folder: Path | None, source: str) -> np.ndarray:
    """A tensor's value; external bytes are memory-mapped copy-on-write (a pass that writes into
    its constant gets private pages; the file is never changed), read only where they are used."""
    if not is_external(tensor):
        return numpy_helper.to_array(tensor)
    where = locate(tensor, folder, source)
    dtype = _mappable_dtype(tensor.data_type)
    if dtype is None:  # stored in another width than numpy computes in (bfloat16, float8): convert
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        _read_into_proto(iter([copy]), folder, source)
        return numpy_helper.to_array(copy)
    shape = tuple(tensor.dims)
    if where.nbytes == 0:
        return np.zeros(shape, dtype)
    return np.memmap(where.path, dtype=dtype, mode="c", offset=where.offset, shape=shape)


def _mappable_dtype(elem: int) -> np.dtype | None:
    """The little-endian numpy type whose bytes are the ONNX raw data, where numpy_helper reads
    them as they are (it converts bfloat16, float8, int4 and strings)."""
    plain = (
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.INT8,
        onnx.TensorProto.UINT8,
        onnx.TensorProto.INT16,
        onnx.TensorProto.UINT16,
        onnx.TensorProto.INT32,
        onnx.TensorProto.UINT32,
        onnx.TensorProto.INT64,
        onnx.TensorProto.UINT64,
        onnx.TensorProto.BOOL,
    )
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem)).newbyteorder("<") if elem in plain else None


def locate(tensor: onnx.TensorProto, folder: Path | None, source: str) -> ExternalBytes:
    """Where the tensor's bytes are, checked; raises ModelError naming the model and the tensor."""
    where = f"{source}: tensor '{tensor.name or '(unnamed)'}'"
    if folder is None:
        raise ModelError(
            f"{where} keeps its data in an external file, and a model given in memory has no folder to "
            "read it from; pass the model's path instead"
        )
    fields = {entry.key: entry.value for entry in tensor.external_data}
    location = fields.get("location", "")
    if not location:
        raise ModelError(f"{where} is marked as external data but names no file (no 'location')")
    offset, length = _int_field(fields, "offset", where), _int_field(fields, "length", where)
    shown = f"external data file '{location}'"
    if "\0" in location or os.path.isabs(location) or Path(location).is_absolute() or location.startswith("\\"):
        raise ModelError(f"{where}: {shown} is an absolute path; external data is read only from the model's folder")
    path = (folder / location).resolve()
    if not path.is_relative_to(folder):
        raise ModelError(
            f"{where}: {shown} resolves outside the model's folder ({path}); "
            "external data is read only from the model's folder"
        )
    if not path.exists():
        raise ModelError(f"{where}: {shown} does not exist in {folder}")
    if not path.is_file():
        raise ModelError(f"{where}: {shown} is not a regular file")
    size = path.stat().st_size
    end = size if length is None else offset + length
    if offset > size or end > size:
        wanted = f"bytes {offset} to {end}" if length is not None else f"data from offset {offset}"
        raise ModelError(f"{where}: {shown} has {size} bytes, but the model reads {wanted}; is the file truncated?")
    declared = _declared_bytes(tensor)
    if declared is not None and end - offset != declared:
        raise ModelError(
            f"{where} declares shape {tuple(tensor.dims)}, {declared} bytes, but its {shown} holds {end - offset} "
            f"bytes from offset {offset}"
        )
    return ExternalBytes(path, offset, end - offset)


def _declared_bytes(tensor: onnx.TensorProto) -> int | None:
    """The bytes the tensor's shape and element type take as raw data; None where not fixed."""
    dtype = _mappable_dtype(tensor.data_type)
    if dtype is None or any(d < 0 for d in tensor.dims):
        return None
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * dtype.itemsize


def _int_field(fields: dict[str, str], key: str, where: str) -> int | None:
    text = fields.get(key)
    if text is None:
        return None if key == "length" else 0
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ModelError(f"{where}: external data '{key}' is {text!r}; it must be a non-negative integer")
    return value
