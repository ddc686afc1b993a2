"""Compose the stages: platform → frontend → partition → lower → codegen → build.

Each stage is a plain function of the previous stage's value; this module only wires them and
decides where files go. The CLI and `hetgen.compile` call it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from hetgen import codegen, frontend, lower
from hetgen.build import BuildOptions, Regenerate, build_files, run_ninja
from hetgen.build.output import write_project
from hetgen.codegen.project import GeneratedFile, manifest_bytes
from hetgen.ir import Graph
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform
from hetgen.platform.model import Platform
from hetgen.runtime.verify import MODEL_COPY
from hetgen.templates_dir import templates_dir


@dataclass(frozen=True)
class CompileOptions:
    out: Path | None = None  # default: generated/<platform name>
    build: bool = True
    placement: str = "cost"  # "cost" | "greedy"
    pins: Mapping[str, str] = field(default_factory=dict)
    search_path: tuple[str, ...] = ()
    build_options: BuildOptions = BuildOptions()
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    weights: str = "blob"  # "blob": weights.bin linked by .incbin; "c_array": a const array in C


@dataclass(frozen=True)
class Compiled:
    out_dir: Path
    platform: Platform
    graph: Graph
    changed: tuple[str, ...]  # files whose content changed in this generation


def resolve_platform(spec: str | Path | Platform, search_path: tuple[str, ...] = ()) -> Platform:
    return spec if isinstance(spec, Platform) else load_platform(str(spec), search_path)


def import_graph(model: str | Path | onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> Graph:
    return frontend.import_model(model, shapes=dict(shapes) or None)


def regenerate_rule(platform: Platform, model, out_dir: Path, options: CompileOptions) -> Regenerate | None:
    if not isinstance(model, (str, Path)) or platform.file.startswith("<"):
        return None  # in-memory inputs cannot be re-read by ninja
    package_root = str(Path(__file__).resolve().parent.parent)
    command = [
        "env",
        f"PYTHONPATH={package_root}",
        sys.executable,
        "-m",
        "hetgen",
        "generate",
        str(Path(platform.file).resolve()),
        str(Path(model).resolve()),
        "-o",
        str(out_dir.resolve()),
    ]
    command += ["--placement", options.placement, "--weights", options.weights]
    for node, target in sorted(options.pins.items()):
        command += ["--pin", f"{node}={target}"]
    templates = sorted(str(p) for p in templates_dir().rglob("*") if p.is_file())
    inputs = [str(Path(platform.file).resolve()), str(Path(model).resolve()), *templates]
    return Regenerate(tuple(command), tuple(inputs))


def generate_files(platform: Platform, graph: Graph, options: CompileOptions, model, out_dir: Path):
    placement = place(
        graph, platform, mode=options.placement, pins=dict(options.pins or platform.options.get("pins", {}))
    )
    lowered = lower.lower(graph, platform, placement)
    sources = codegen.generate(lowered, weights=options.weights)
    regenerate = regenerate_rule(platform, model, out_dir, options)
    build = build_files(sources, platform, options.build_options, regenerate, out_dir.resolve())
    manifest = GeneratedFile("hetgen.json", manifest_bytes(sources.manifest))
    model_copy = GeneratedFile(MODEL_COPY, _model_bytes(model))  # what verify and bench compare against
    return placement, lowered, (*sources.files, *build, manifest, model_copy)


def _model_bytes(model) -> bytes:
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    return Path(model).read_bytes()


def compile_model(
    platform: str | Path | Platform, model: str | Path | onnx.ModelProto, options: CompileOptions = CompileOptions()
) -> Compiled:
    """Generate (and by default build) the project; a user error writes nothing."""
    resolved = resolve_platform(platform, options.search_path)
    graph = import_graph(model, options.input_shapes)
    out_dir = Path(options.out) if options.out is not None else Path("generated") / resolved.name
    _, _, files = generate_files(resolved, graph, options, model, out_dir)
    changed = write_project(out_dir, files)
    # build.ninja is always touched: ninja re-runs its regenerate rule until build.ninja is newer
    # than the platform, model and templates, even when their change did not alter it.
    os.utime(out_dir / "build.ninja")
    if options.build:
        run_ninja(out_dir)
    return Compiled(out_dir, resolved, graph, changed)
