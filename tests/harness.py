"""Op-level test harness: compile every node's kernel into one shared library and run the nodes
one by one on numpy buffers. It bypasses the memory planner and runtimes on purpose, so a kernel
can be tested alone; whole-model tests go through `hetgen.compile` instead.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np
import onnx

from hetgen.bounded import trimmed
from hetgen.codegen.kernels import kernel_source
from hetgen.frontend.onnx_import import import_onnx
from hetgen.ir import Graph
from hetgen.ops.base import Kernel, OpInstance, Prepacked
from hetgen.ops.registry import op_def
from hetgen.spec.variants import with_offers
from hetgen.templates_dir import templates_dir

CFLAGS = ["-O1", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"]


def freeze_inputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], names) -> onnx.ModelProto:
    """Turn the named graph inputs into initializers holding the given values."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    keep = [vi for vi in model.graph.input if vi.name not in names]
    for name in names:
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(feeds[name]), name))
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model


def op_instances(graph: Graph):
    for node in graph.nodes:
        yield (
            node,
            OpInstance(
                node=node,
                input_types=tuple(graph.types.get(n) if n else None for n in node.inputs),
                output_types=tuple(graph.types[n] for n in node.outputs if n),
                constants=tuple(graph.constants.get(n) if n else None for n in node.inputs),
            ),
        )


_HELPERS_LOCK = threading.Lock()
_HELPER_OBJECTS: dict[tuple[str, int], Path] = {}  # (source path, its mtime) -> object


def helper_objects(helpers) -> list[Path]:
    """The runtime helpers (templates/runtime/*.c) compiled with CFLAGS, once per process: every
    library that uses hg_gemm.c or hg_threads.c would otherwise compile them again (0.2 and 0.4 s
    of CPU each). Kept in a folder removed when the process exits."""
    runtime = templates_dir() / "runtime"
    objects = []
    with _HELPERS_LOCK:
        for helper in helpers:
            source = runtime / helper
            key = (str(source), source.stat().st_mtime_ns)
            if key not in _HELPER_OBJECTS:
                folder = Path(tempfile.mkdtemp(prefix="hg_harness_helper_"))
                atexit.register(shutil.rmtree, folder, ignore_errors=True)
                obj = folder / f"{source.stem}.o"
                flags = [flag for flag in CFLAGS if flag != "-shared"]
                cmd = ["cc", *flags, "-I", str(runtime), "-c", str(source), "-o", str(obj)]
                result = subprocess.run(cmd, capture_output=True, text=True)
                if result.returncode != 0:
                    raise AssertionError(f"compile failed ({helper}):\n" + result.stderr[-6000:])
                _HELPER_OBJECTS[key] = obj
            objects.append(_HELPER_OBJECTS[key])
    return objects


def preferred_offers(kernel: Kernel, side: str | None) -> tuple[Prepacked, ...]:
    """The offers a CPU controller of `side` ("hosted" or "bare_metal") prefers: the first one
    allowed there for each input (offers for one input are alternatives, the preferred first);
    None: the kernel as lowered, reading the model's layouts."""
    if side is None:
        return ()
    assert side in ("hosted", "bare_metal"), side
    taken: dict[int, Prepacked] = {}
    for offer in kernel.prepacked:
        refused = offer.bare_metal_only if side == "hosted" else offer.hosted_only
        if not refused:
            taken.setdefault(offer.index, offer)
    return tuple(taken.values())


def build_library(graph: Graph, workdir: Path, side: str | None = None, opt: tuple[str, ...] = ("-O1",)):
    """Every node's kernel in one shared library, built at `opt`, each with the offers `side`
    prefers (preferred_offers); the constants those offers lay out are returned in their layouts."""
    sources, kernels = [], []
    helpers: set[str] = set()
    constants = dict(graph.constants)
    for node, instance in op_instances(graph):
        definition = op_def(node.op, node.opset)
        assert definition is not None, f"{node.op} is not registered"
        kernel = definition.lower(instance)
        offers = preferred_offers(kernel, side)
        for offer in offers:
            name = node.inputs[offer.index]
            constants[name] = offer.layout(constants[name])
        kernel = with_offers(kernel, offers)
        fn = f"hg_{node.name}"
        sources.append(kernel_source(kernel, fn, node.label))
        helpers.update(kernel.helpers)
        kernels.append((node, fn, kernel))
    text = "\n".join(sources)
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    c_files = []
    for i, source in enumerate(sources):
        path = workdir / f"k{i}.c"
        path.write_text(source)
        c_files.append(str(path))
    runtime = templates_dir() / "runtime"
    objects = [str(obj) for obj in helper_objects(sorted(helpers))]
    lib = workdir / f"lib{digest}.so"
    flags = [*opt, *(flag for flag in CFLAGS if not flag.startswith("-O"))]
    cmd = ["cc", *flags, "-I", str(runtime), "-o", str(lib), *c_files, *objects, "-lm"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError("compile failed:\n" + result.stderr[-6000:])
    return ctypes.CDLL(str(lib)), kernels, constants


def execute(
    lib: ctypes.CDLL, kernels, graph: Graph, feeds: dict[str, np.ndarray], constants=None
) -> dict[str, np.ndarray]:
    """Call each node's kernel in order on numpy buffers (one per tensor, no planner); `constants`:
    the graph's, some in the layouts of the offers taken (build_library)."""
    # np.array(..., order="C") rather than ascontiguousarray, which turns 0-d arrays into 1-d ones
    constants = graph.constants if constants is None else constants
    values = {name: np.array(array, order="C") for name, array in constants.items()}
    for name in graph.inputs:
        values[name] = np.array(feeds[name], dtype=graph.types[name].dtype.numpy, order="C")
    for node, fn, kernel in kernels:
        for out in filter(None, node.outputs):
            t = graph.types[out]
            values[out] = np.zeros(t.shape, dtype=t.dtype.numpy)
        pointers = [values[n].ctypes.data if n else None for n in (*node.inputs, *node.outputs)]
        scratch = None
        if kernel.scratch_bytes:
            scratch = np.zeros(kernel.scratch_bytes + 64, dtype=np.uint8)
            pointers.append(scratch.ctypes.data)
        args = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        getattr(lib, fn)(args)
    return trimmed({name: values[name].copy() for name in graph.outputs})  # run-time lengths: hetgen/bounded.py


def run_graph(
    graph: Graph, feeds: dict[str, np.ndarray], side: str | None = None, opt: tuple[str, ...] = ("-O1",)
) -> dict[str, np.ndarray]:
    with tempfile.TemporaryDirectory(prefix="hg_harness_") as tmp:
        lib, kernels, constants = build_library(graph, Path(tmp), side, opt)
        return execute(lib, kernels, graph, feeds, constants)


def run_model(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    frozen=(),
    side: str | None = None,
    opt: tuple[str, ...] = ("-O1",),
) -> dict[str, np.ndarray]:
    """Run an ONNX model through the harness, freezing `frozen` inputs into constants; each kernel
    with the offers a `side` controller prefers (preferred_offers), built at `opt`."""
    model = freeze_inputs(model, feeds, frozen)
    graph = import_onnx(model).verify()
    return run_graph(graph, {k: v for k, v in feeds.items() if k not in frozen}, side, opt)
