"""Lay out one generated project: per target, its kernels, program, header, weights and example."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hetgen.codegen.kernels import kernel_source
from hetgen.codegen.render import render
from hetgen.codegen.viewmodel import program_view
from hetgen.lower.program import Lowered, Program
from hetgen.templates_dir import templates_dir

# Runtime sources every generated project carries, so a board project needs no Python.
RUNTIME_FILES = ("hg_runtime.h", "hg_device.h", "hg_kernels.h", "hg_graph.c", "hg_vm.c")
RUNTIME_VERSION = 1


@dataclass(frozen=True)
class GeneratedFile:
    path: str  # relative to the output folder, '/'-separated
    content: bytes


@dataclass(frozen=True)
class TargetSources:
    """What the build stage needs to know about one target's files."""

    path: str  # target folder, e.g. "soc/vdevice0"
    prefix: str  # C API prefix, e.g. "hg_soc"
    kernels: tuple[str, ...]  # kernel .c files
    program: str  # model.c
    weights_asm: str  # weights.S
    weights_blob: str  # weights.bin
    example: str  # main.c ("" = none)
    helpers: tuple[str, ...]  # runtime/*.c the kernels need


@dataclass(frozen=True)
class Sources:
    files: tuple[GeneratedFile, ...]
    targets: tuple[TargetSources, ...]
    runtime: tuple[str, ...]  # runtime/*.c shared by all targets
    manifest: dict


def _program_files(program: Program, model_name: str, folder: str, prefix: str, is_root: bool):
    files: list[GeneratedFile] = []
    kernel_paths = []
    helpers: set[str] = set()
    extra = (program.target.kind.templates,) if program.target.kind.templates else ()
    for unit in program.units:
        path = f"{folder}/kernels/{unit.fn}.c"
        text = kernel_source(unit.kernel, unit.fn, unit.label, extra)
        files.append(GeneratedFile(path, text.encode()))
        kernel_paths.append(path)
        helpers.update(unit.kernel.helpers)
    view = program_view(program, model_name, prefix, RUNTIME_VERSION)
    files.append(GeneratedFile(f"{folder}/{prefix}.h", render("model/model.h.j2", **view).encode()))
    files.append(GeneratedFile(f"{folder}/model.c", render("model/model.c.j2", **view).encode()))
    blob = f"{folder}/weights.bin"
    files.append(GeneratedFile(blob, program.weights.blob))
    asm = render(
        "model/weights.S.j2",
        model_name=model_name,
        target_path=program.target.path_str,
        weights_size=program.weights.size,
        symbol=f"{prefix}_weights",
        blob_path=blob,
    )
    files.append(GeneratedFile(f"{folder}/weights.S", asm.encode()))
    example = ""
    if is_root:
        example = f"{folder}/main.c"
        files.append(GeneratedFile(example, render("model/main.c.j2", exe_name=f"{prefix}_main", **view).encode()))
    sources = TargetSources(
        path=folder,
        prefix=prefix,
        kernels=tuple(kernel_paths),
        program=f"{folder}/model.c",
        weights_asm=f"{folder}/weights.S",
        weights_blob=blob,
        example=example,
        helpers=tuple(sorted(helpers)),
    )
    return files, sources, view


def generate(lowered: Lowered) -> Sources:
    files: list[GeneratedFile] = []
    targets = []
    helpers: set[str] = set()
    manifest_targets = []
    for index, program in enumerate(lowered.programs):
        folder = program.target.path_str
        prefix = f"hg_{lowered.name}" if index == 0 else "hg_" + "_".join(program.target.path)
        program_files, sources, view = _program_files(program, lowered.model_name, folder, prefix, index == 0)
        files.extend(program_files)
        targets.append(sources)
        helpers.update(sources.helpers)
        manifest_targets.append(
            {
                "path": folder,
                "prefix": prefix,
                "runtime": program.runtime.value,
                "arena_size": program.memory.arena_size,
                "intermediate_bytes": program.memory.total_bytes,
                "liveness_lower_bound": program.memory.lower_bound,
                "weights_bytes": program.weights.size,
                "kernels": len(program.units),
            }
        )
    runtime_dir = templates_dir() / "runtime"
    runtime_c = []
    for name in sorted(set(RUNTIME_FILES) | helpers):
        files.append(GeneratedFile(f"runtime/{name}", (runtime_dir / name).read_bytes()))
        if name.endswith(".c"):
            runtime_c.append(f"runtime/{name}")
    root = lowered.root
    manifest = {
        "hetgen_manifest": 1,
        "platform": lowered.name,
        "model": lowered.model_name,
        "prefix": targets[0].prefix,
        "inputs": [_tensor_json(t) for t in root.inputs],
        "outputs": [_tensor_json(t) for t in root.outputs],
        "targets": manifest_targets,
    }
    return Sources(tuple(files), tuple(targets), tuple(runtime_c), manifest)


def _tensor_json(spec) -> dict:
    return {"name": spec.name, "dtype": spec.type.dtype.label, "shape": list(spec.type.shape)}


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
