"""Compose the stages: platform → frontend → partition → lower → codegen → build.

Each stage is a plain function of the previous stage's value; this module only wires them and
decides where files go. The CLI and `hetgen.compile` call it.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import external_data_helper

from hetgen import codegen, frontend, lower
from hetgen.build import BuildOptions, Regenerate, board_plan, build_files, require_tools, run_ninja
from hetgen.build.baremetal import check_board_fit
from hetgen.build.output import BUILD_LOG, commit, discard, failed_dir, keep_failed, stage, write_project, writing
from hetgen.codegen.project import GeneratedFile
from hetgen.errors import BuildError
from hetgen.frontend.external_data import gather_external_data, is_external, model_folder, model_tensors
from hetgen.frontend.fingerprint import model_sha256
from hetgen.frontend.load import read_model
from hetgen.ir import Graph
from hetgen.lower.feature_maps import place_feature_maps
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform
from hetgen.platform.model import Platform
from hetgen.platform.tuning import gemm_blocks
from hetgen.progress import Progress, counted
from hetgen.runtime.verify import MODEL_COPY
from hetgen.spec import build_kernel_specs
from hetgen.spec.fits import check_graph_fits
from hetgen.templates_dir import templates_dir


@dataclass(frozen=True)
class CompileOptions:
    out: Path | None = None  # default: generated/<platform name>
    build: bool = True
    placement: str | None = None  # "cost" | "greedy"; None: the platform's options.placement, else "cost"
    pins: Mapping[str, str] = field(default_factory=dict)  # added to the platform's options.pins
    objective: str | None = None  # "latency" | "energy" | "throughput"; None: options.objective, else latency
    search_path: tuple[str, ...] = ()
    build_options: BuildOptions = BuildOptions()
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    weights: str = "blob"  # "blob": weights.bin linked by .incbin; "c_array": a const array in C
    # Update the folder in place instead of staging and swapping it: build.ninja's regenerate rule
    # runs inside the folder, under a ninja that reloads build.ninja from it.
    in_place: bool = False
    # Only the native build (this machine, one process): no board build, so no cross toolchain needed.
    native_only: bool = False
    # Stage reports (hetgen/progress.py): the CLI's prints to stderr; None: silent, times still kept.
    progress: Progress | None = field(default=None, compare=False)


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


def options_argv(options: CompileOptions) -> list[str]:
    """`hetgen generate` arguments that reproduce `options` (all but `out`, `build` and the search
    path, which the regenerate rule fixes itself): what build.ninja re-runs must build the same."""
    build = options.build_options
    argv = ["--weights", options.weights, f"--opt={shlex.join(build.opt)}"]
    if options.placement is not None:  # otherwise the platform file decides, as it did the first time
        argv += ["--placement", options.placement]
    if options.objective is not None:  # likewise
        argv += ["--objective", options.objective]
    for node, target in sorted(options.pins.items()):
        argv += ["--pin", f"{node}={target}"]
    for name, dims in sorted(options.input_shapes.items()):
        argv += ["--shape", f"{name}={format_dims(dims)}"]
    if not build.native_tuning:
        argv.append("--no-native-tuning")
    if build.werror:
        argv.append("--werror")
    if build.sanitize:
        argv.append(f"--sanitize={','.join(build.sanitize)}")
    # Always written, even empty: the regenerated project must not pick up whatever $HETGEN_LAUNCHER
    # the shell that runs ninja happens to have.
    argv.append(f"--launcher={shlex.join(build.launcher)}")
    if build.extra_cflags:
        argv.append(f"--cflags={shlex.join(build.extra_cflags)}")
    if options.native_only:
        argv.append("--native-only")
    return argv


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
        *options_argv(options),
        "--in-place",
    ]
    templates = sorted(str(p) for p in templates_dir().rglob("*") if p.is_file())
    inputs = [str(Path(platform.file).resolve()), str(Path(model).resolve()), *templates]
    return Regenerate(tuple(command), tuple(inputs))


def generate_files(
    platform: Platform, graph: Graph, options: CompileOptions, model, out_dir: Path, progress: Progress | None = None
):
    progress = progress or Progress()
    nodes = counted(len(graph.nodes), "node")
    with progress.stage("kernels", f"lowering the kernels of {nodes}"):
        check_graph_fits(graph, platform)  # before any kernel is lowered for an impossible tensor
    with progress.stage("placement", f"placing {nodes}"):
        # an npu's feature maps in its cache or in DRAM (hetgen/lower/feature_maps.py): the platform
        # of the chosen configuration is the one lowering and code generation read
        platform, placement, _ = place_and_choose(
            graph, platform, options.placement, options.pins, objective=options.objective
        )
    with progress.stage("lowering", f"planning the programs of {nodes}"):
        lowered = lower.lower(graph, platform, placement)
        if not options.native_only:
            check_board_fit(lowered, platform)  # a bare-metal board's flash and RAM, before anything is built
    units = sum(len(program.units) for program in lowered.programs)
    with progress.stage("codegen", f"rendering {counted(units, 'kernel')}"):
        sources = codegen.generate(
            lowered, weights=options.weights, gemm_blocks=gemm_blocks(platform), progress=progress
        )
    with progress.stage("build_files", "writing the build graph"):
        regenerate = regenerate_rule(platform, model, out_dir, options)
        board = None if options.native_only else board_plan(sources, platform, options.build_options)
        build = build_files(sources, platform, options.build_options, regenerate, out_dir.resolve(), board)
        # The loader needs to know a library was built with sanitizers before it dlopens it; verify
        # --emulate finds the board programs and their emulators under "board".
        manifest = dataclasses.replace(
            sources.manifest,
            sanitize=tuple(options.build_options.sanitize),
            board=board.manifest() if board is not None else None,
            model_sha256=model_sha256(model),
        )
        manifest_file = GeneratedFile("hetgen.json", manifest.to_bytes())
        model_copy = model_copy_files(model)  # what verify and bench compare against
    return lowered.placement, lowered, (*sources.files, *build, manifest_file, *model_copy)


def place_and_choose(
    graph: Graph, platform: Platform, mode: str | None, pins: Mapping[str, str], objective: str | None = None
):
    """The placement, with each npu that may keep its feature maps in its cache in the configuration
    chosen for this network (hetgen/lower/feature_maps.py): (platform so configured, placement, the
    choices made: FeatureMapChoice each)."""
    chosen = place_feature_maps(
        graph,
        platform,
        lambda p: place(graph, p, mode=mode, pins=pins, kernels=build_kernel_specs(graph, p), objective=objective),
    )
    return chosen.platform, chosen.placement, chosen.choices


def format_dims(dims) -> str:
    """`1x3x224x224`, the form `--shape NAME=DIMS` takes."""
    return "x".join(str(d) for d in dims)


PROTOBUF_LIMIT = 2**31 - 1  # a serialized ModelProto cannot be larger
EXTERNAL_THRESHOLD = 1024  # tensors at least this large go to the data file of a large model


def model_copy_files(model, limit: int = PROTOBUF_LIMIT) -> tuple[GeneratedFile, ...]:
    """The model as verify and bench read it, independent of the user's files: small external
    tensors embedded, large ones (external_data.IN_PROTO_LIMIT) copied from their files into
    `model.onnx.data` beside it; an in-memory model too large for one protobuf keeps its tensors there too."""
    if isinstance(model, (str, Path)):
        data = Path(model).read_bytes()
        proto = onnx.ModelProto.FromString(data)
        if not any(is_external(t) for t in model_tensors(proto)):
            return (GeneratedFile(MODEL_COPY, data),)  # the user's bytes, unchanged
        proto, source = read_model(model)  # the frontend's reader: small external tensors read in
        if not any(is_external(t) for t in proto.graph.initializer):
            return (GeneratedFile(MODEL_COPY, proto.SerializeToString()),)
        data_name = f"{MODEL_COPY}.data"  # the large ones: copied from their files, not through protobuf
        data = gather_external_data(proto, model_folder(model), source, data_name)
        return GeneratedFile(MODEL_COPY, proto.SerializeToString()), GeneratedFile(data_name, data)
    else:
        proto = model
    if proto.ByteSize() <= limit:
        return (GeneratedFile(MODEL_COPY, proto.SerializeToString()),)
    return _with_data_file(proto)


def _with_data_file(proto: onnx.ModelProto) -> tuple[GeneratedFile, GeneratedFile]:
    copied = onnx.ModelProto()
    copied.CopyFrom(proto)  # the caller's proto stays as it was
    proto = copied
    data_name = f"{MODEL_COPY}.data"
    data = bytearray()
    for tensor in model_tensors(proto):
        if tensor.HasField("raw_data") and len(tensor.raw_data) >= EXTERNAL_THRESHOLD:
            data += bytes(-len(data) % 64)  # aligned, as onnx and onnxruntime like to map it
            external_data_helper.set_external_data(tensor, data_name, offset=len(data), length=len(tensor.raw_data))
            data += tensor.raw_data
            tensor.ClearField("raw_data")
    return GeneratedFile(MODEL_COPY, proto.SerializeToString()), GeneratedFile(data_name, bytes(data))


def compile_model(
    platform: str | Path | Platform, model: str | Path | onnx.ModelProto, options: CompileOptions = CompileOptions()
) -> Compiled:
    """Generate (and by default build) the project. All or nothing: the project is written and built
    in a staging folder and swapped in on success, so a user error or a failed build leaves the
    destination as it was (a failed build's log and project are kept in `<out>.hetgen-failed/`)."""
    progress = options.progress or Progress()
    try:
        return _compile(platform, model, options, progress)
    finally:
        progress.done()


def _compile(platform, model, options: CompileOptions, progress: Progress) -> Compiled:
    resolved = resolve_platform(platform, options.search_path)
    if not options.native_only:
        require_tools(resolved, options.build_options)  # before anything is generated
    with progress.stage("import", f"reading {_model_label(model)}"):
        graph = import_graph(model, options.input_shapes)
    out_dir = Path(options.out) if options.out is not None else Path("generated") / resolved.name
    destination = out_dir.resolve()  # a symlinked -o: swap the folder it points to, not the link
    with writing(destination):  # one hetgen per -o: a second one is refused at once
        _, _, files = generate_files(resolved, graph, options, model, out_dir, progress)
        writing_files = f"writing {counted(len(files), 'file')}"
        if options.in_place:
            with progress.stage("write", writing_files):
                changed = write_project(out_dir, files)
                _touch_build_file(out_dir)
            return Compiled(out_dir, resolved, graph, changed)
        staging = stage(destination)
        try:
            with progress.stage("write", writing_files):
                changed = write_project(staging, files)
                _touch_build_file(staging)
            if options.build:
                with progress.stage("build", "building with ninja"):
                    _build(staging, destination)
        except BaseException:
            discard(staging)
            raise
        commit(staging, destination)
    return Compiled(out_dir, resolved, graph, changed)


def _model_label(model) -> str:
    return Path(model).name if isinstance(model, (str, Path)) else "the model"


def _touch_build_file(project: Path) -> None:
    # build.ninja is always touched: ninja re-runs its regenerate rule until build.ninja is newer
    # than the platform, model and templates, even when their change did not alter it.
    os.utime(project / "build.ninja")


def _build(staging: Path, destination: Path) -> None:
    failed = failed_dir(destination)
    shutil.rmtree(failed, ignore_errors=True)  # the record of an earlier failure is now stale
    try:
        run_ninja(staging, log=failed / BUILD_LOG)
    except BuildError as error:
        kept = keep_failed(staging, destination)
        first, _, compiler_output = str(error).partition("\n")
        raise BuildError(
            f"{destination}: {first}; the failed project is kept in {kept} and {destination} is unchanged\n"
            f"{compiler_output}"
        ) from None
