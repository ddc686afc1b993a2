"""External data: tensor bytes an ONNX model keeps in files beside it, read only from its own folder.

`onnx.save_model(..., save_as_external_data=True)` writes large tensors to a file next to the model
and records, per tensor, a `location` relative to the model's folder with an `offset` and a
`length`. A model is input from anyone, so a location is a path an attacker chose: an absolute
path, a `../`, or a symlink could make hetgen read (and compile into a library) any file the user
can read. Every location must therefore resolve, symlinks followed, to a regular file inside the
model's folder, and the bytes it names must be there; anything else is a one-line `ModelError`
naming the model and the tensor.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx

from hetgen.errors import ModelError

ACCEPTED_KEYS = ("location", "offset", "length", "checksum", "basepath")


def is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == onnx.TensorProto.EXTERNAL


def model_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of the model: initializers and tensor attributes, subgraphs included."""
    yield from _graph_tensors(proto.graph)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
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


def load_external_data(proto: onnx.ModelProto, model_path: Path | None, source: str) -> None:
    """Read every external tensor's bytes into the proto (in place), from inside the model's folder.

    `model_path` is None for a model given in memory: it has no folder, so external data is refused.
    """
    folder = model_path.resolve().parent if model_path is not None else None
    for tensor in model_tensors(proto):
        if not is_external(tensor):
            continue
        name = tensor.name or "(unnamed)"
        where = f"{source}: tensor '{name}'"
        if folder is None:
            raise ModelError(
                f"{where} keeps its data in an external file, and a model given in memory has no folder to "
                "read it from; pass the model's path instead"
            )
        tensor.raw_data = _read(tensor, folder, where)
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]


def _read(tensor: onnx.TensorProto, folder: Path, where: str) -> bytes:
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
    with path.open("rb") as stream:
        stream.seek(offset)
        return stream.read(end - offset)


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
