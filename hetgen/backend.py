"""An `onnx.backend.base.Backend` over hetgen, so the ONNX backend test suite can drive it.

hetgen compiles for static shapes and needs some inputs (a Reshape's shape, a Slice's starts) at
compile time. The backend therefore compiles lazily, at the first `run`, when it knows the input
values: inputs that feed such positions are frozen into initializers, and the compiled project is
cached per (model, frozen values).
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep

import hetgen
from hetgen.build import BuildOptions, library_path
from hetgen.build.ninja_file import run_ninja
from hetgen.codegen.manifest import read_manifest
from hetgen.ops.registry import const_inputs
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.loader import load

NATIVE_PLATFORM = "name: backend\ntarget: {kind: native, runtime: graph}\n"
# Conformance runs compile thousands of tiny models: optimise little, build only the library.
FAST_BUILD = BuildOptions(opt=("-O1",), native_tuning=False)


def constant_inputs(model: onnx.ModelProto) -> set[str]:
    """Graph inputs that some node needs as a compile-time constant."""
    names = {vi.name for vi in model.graph.input}
    frozen = set()
    for node in model.graph.node:
        for index in const_inputs(node.op_type):
            if index < len(node.input) and node.input[index] in names:
                frozen.add(node.input[index])
    return frozen


def freeze(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    frozen = onnx.ModelProto.FromString(model.SerializeToString())
    keep = [vi for vi in frozen.graph.input if vi.name not in values]
    for name, value in sorted(values.items()):
        frozen.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    del frozen.graph.input[:]
    frozen.graph.input.extend(keep)
    return frozen


class HetgenRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, workdir: Path):
        self.model = model
        self.workdir = workdir
        self.frozen_names = constant_inputs(model)
        self.input_names = [vi.name for vi in model.graph.input]
        self._compiled: dict[str, object] = {}

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            feeds = dict(zip(self.input_names, inputs if isinstance(inputs, (list, tuple)) else [inputs]))
        frozen = {name: feeds.pop(name) for name in sorted(self.frozen_names) if name in feeds}
        digest = hashlib.sha256(self.model.SerializeToString())
        for name, value in frozen.items():
            digest.update(name.encode() + np.asarray(value).tobytes() + str(np.asarray(value).shape).encode())
        key = digest.hexdigest()[:16]
        compiled = self._compiled.get(key)
        if compiled is None:
            out = self.workdir / key
            platform = load_platform_text(NATIVE_PLATFORM)
            # The simulation's shared library only, which is what `load` opens: a board build would
            # compile every case twice, and the static library and example program (a third of the
            # native build's commands) would be linked for nothing.
            hetgen.compile(
                platform,
                freeze(self.model, frozen),
                out=out,
                opt=FAST_BUILD.opt,
                native_tuning=False,
                native_only=True,
                build=False,
            )
            run_ninja(out, targets=(library_path(read_manifest(out).prefix),))
            compiled = self._compiled[key] = load(out)
        results = compiled.run(feeds)
        return tuple(results[o.name] for o in compiled.outputs if o.name in results)  # not run-time shapes


class HetgenBackend(Backend):
    _workdir: Path | None = None

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> HetgenRep:
        if cls._workdir is None:
            cls._workdir = Path(tempfile.mkdtemp(prefix="hetgen-backend-"))
            atexit.register(shutil.rmtree, cls._workdir, True)
        return HetgenRep(model, cls._workdir)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"
