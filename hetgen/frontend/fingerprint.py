"""The model's fingerprint: a SHA-256 of the bytes hetgen reads, recorded in a generated project's
hetgen.json so that a command given a project and a model (`explain --built`) can tell whether the
project was built from that model. Graph names do not tell: every torch export is `main_graph`.

A model file is hashed as it lies on disk, with the external data files it names (each once, by
location, in sorted order, streamed); an in-memory ModelProto as the bytes `onnx.save` would write for it, so `hetgen.compile(proto)` and
the saved file agree (external data aside).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx

from hetgen.frontend.external_data import is_external, model_tensors

_CHUNK = 1 << 20


def model_sha256(model: str | Path | onnx.ModelProto) -> str:
    digest = hashlib.sha256()
    if isinstance(model, onnx.ModelProto):  # the bytes onnx.save would write: a saved copy hashes the same
        digest.update(b"model\0")
        digest.update(model.SerializeToString())
        return digest.hexdigest()
    path = Path(model)
    data = path.read_bytes()
    digest.update(b"model\0")
    digest.update(data)
    if b"location" in data:  # only then can a tensor name an external file (its key is spelled so)
        proto = onnx.ModelProto.FromString(data)
        locations = sorted({_location(t) for t in model_tensors(proto) if is_external(t)} - {""})
        for location in locations:
            digest.update(b"\0external\0" + location.encode() + b"\0")
            _update_from_file(digest, path.parent / location)
    return digest.hexdigest()


def _location(tensor: onnx.TensorProto) -> str:
    return next((entry.value for entry in tensor.external_data if entry.key == "location"), "")


def _update_from_file(digest, path: Path) -> None:
    try:
        with open(path, "rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        digest.update(b"\0unreadable\0")  # the frontend refuses such a model; the hash need not
