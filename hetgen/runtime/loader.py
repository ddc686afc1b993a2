"""Load a built project through cffi and run it on numpy arrays."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import cffi
import numpy as np

from hetgen.build.ninja_file import library_path
from hetgen.errors import HetgenError
from hetgen.runtime.sanitizers import check_runtime_loaded

MANIFEST = "hetgen.json"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{'x'.join(map(str, self.shape))}]"


class Model:
    """A built model: `run({input name: ndarray}) -> {output name: ndarray}`."""

    def __init__(self, out_dir: Path):
        self.path = out_dir
        manifest_path = out_dir / MANIFEST
        if not manifest_path.is_file():
            raise HetgenError(
                f"{out_dir}: not a hetgen project (no {MANIFEST}); run `hetgen PLATFORM MODEL -o {out_dir}` first"
            )
        self.manifest = json.loads(manifest_path.read_text())
        self.prefix = self.manifest["prefix"]
        self.inputs = tuple(_info(t) for t in self.manifest["inputs"])
        self.outputs = tuple(_info(t) for t in self.manifest["outputs"])
        library = out_dir / library_path(self.prefix)
        check_runtime_loaded(out_dir, self.manifest)  # dlopen would abort the whole process
        if not library.is_file():
            raise HetgenError(f"{library}: the library is not built; run `ninja -C {out_dir}`")
        self._ffi = cffi.FFI()
        self._ffi.cdef(
            f"int {self.prefix}_init(void);"
            f"int {self.prefix}_run(const void *const *inputs, void *const *outputs, void *workspace);"
        )
        self._lib = _load_private_copy(self._ffi, library)
        self._run = getattr(self._lib, f"{self.prefix}_run")
        status = getattr(self._lib, f"{self.prefix}_init")()
        if status != 0:
            raise HetgenError(f"{library}: {self.prefix}_init failed with status {status}")

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"<hetgen model {self.manifest['model']} on {self.manifest['platform']}: ({ins}) -> ({outs})>"

    def _prepare_inputs(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        missing = [t.name for t in self.inputs if t.name not in feeds]
        unknown = sorted(set(feeds) - {t.name for t in self.inputs})
        if missing or unknown:
            raise HetgenError(
                f"run() needs inputs {[t.name for t in self.inputs]}; missing {missing}, unknown {unknown}"
            )
        arrays = []
        for info in self.inputs:
            array = np.ascontiguousarray(feeds[info.name], dtype=info.dtype)
            if array.shape != info.shape and array.size == int(np.prod(info.shape)):
                array = array.reshape(info.shape)  # e.g. a (1,) array for a scalar input
            if array.shape != info.shape:
                raise HetgenError(f"input {info.name!r} has shape {array.shape}; the model was built for {info.shape}")
            arrays.append(array)
        return arrays

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = self._prepare_inputs(feeds)
        results = [np.empty(info.shape, dtype=info.dtype) for info in self.outputs]
        self.run_into(arrays, results)
        return {info.name: array for info, array in zip(self.outputs, results)}

    def function(self, declaration: str, name: str):
        """Another C function of the library, e.g. a simulated device's counters."""
        self._ffi.cdef(declaration)
        return getattr(self._lib, name)

    def run_into(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """Run on prepared contiguous arrays without allocating (used by benchmarks)."""
        ffi = self._ffi
        in_ptrs = ffi.new("void *[]", [ffi.from_buffer(a) for a in inputs] or [ffi.NULL])
        out_ptrs = ffi.new("void *[]", [ffi.from_buffer(a) for a in outputs] or [ffi.NULL])
        status = self._run(in_ptrs, out_ptrs, ffi.NULL)
        if status != 0:
            raise HetgenError(f"{self.prefix}_run failed with status {status}")


def _load_private_copy(ffi: cffi.FFI, library: Path):
    """dlopen caches by path: a rebuilt library at the same path would silently be the old one.
    Load a private copy instead, and unlink it at once (the mapping outlives the file)."""
    handle, copy = tempfile.mkstemp(prefix=f"{library.stem}-", suffix=".so")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(library.read_bytes())
        return ffi.dlopen(copy)
    finally:
        os.unlink(copy)


def _info(entry: dict) -> TensorInfo:
    dtype = np.dtype("bool") if entry["dtype"] == "bool" else np.dtype(entry["dtype"])
    return TensorInfo(entry["name"], tuple(entry["shape"]), dtype)


def load(out_dir: str | Path) -> Model:
    return Model(Path(out_dir))
