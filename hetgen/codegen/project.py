"""Lay out one generated project: per target, its kernels, program, header, weights and example."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hetgen.abi import STATS_NAMES
from hetgen.codegen import coproc
from hetgen.codegen.banks import weights_section
from hetgen.codegen.constants import constants_header
from hetgen.codegen.kernel_files import program_kernels
from hetgen.codegen.manifest import (
    Manifest,
    RemoteDeviceEntry,
    TargetEntry,
    TensorEntry,
    estimate_entries,
    simulator_entry,
)
from hetgen.codegen.remote import (
    CLIENT_RUNTIME,
    RUNTIME_SOURCES,
    SERVER_RUNTIME,
    RemoteDevice,
    plan_hash,
    remote_devices,
    remote_devices_source,
    server_source,
)
from hetgen.codegen.render import forget_templates, render
from hetgen.codegen.viewmodel import program_view
from hetgen.errors import InternalError
from hetgen.lower.memory import ALIGNMENT
from hetgen.lower.program import Lowered, Program, ProgramRole
from hetgen.names import c_comment, c_string, is_path_component, target_prefix
from hetgen.ops._gemm_plan import DEFAULT_BLOCKS, GemmBlocks
from hetgen.progress import Progress
from hetgen.templates_dir import templates_dir

# Runtime sources every generated project carries, so a board project needs no Python.
CONSTANTS_HEADER = "hg_constants.h"  # generated: hetgen/codegen/constants.py
RUNTIME_FILES = (CONSTANTS_HEADER, "hg_runtime.h", "hg_device.h", "hg_kernels.h", "hg_graph.c", "hg_vm.c")
# The device drivers a program of each role is run by (its model.c lays out their configuration).
ROLE_FILES = {
    ProgramRole.ACCELERATOR: {"hg_sim.c", "hg_sim.h"},
    ProgramRole.COPROCESSOR: {"hg_coproc.c", "hg_coproc.h"},
}
# The device workers of a root that runs frames pipelined (hetgen/spec/frames.py).
FRAMES_FILES = {"hg_frames.c", "hg_frames.h"}
# Headers that travel only with their role's programs, or with frames (every other shared header
# always travels).
HEADERS_WHERE_USED = {"hg_coproc.h", "hg_frames.h"}
RUNTIME_VERSION = 2
# Runtime sources that another runtime source calls: the GEMM splits its work over the worker pool.
POOL_SOURCE = "hg_threads.c"
RUNTIME_NEEDS = {"hg_gemm.c": (POOL_SOURCE,)}


# hg_device_stats (hg_constants.h, generated from hetgen/abi.py), field by field in order.
STATS_FIELDS = STATS_NAMES


@dataclass(frozen=True)
class GeneratedFile:
    path: str  # relative to the output folder, '/'-separated
    content: bytes


@dataclass(frozen=True)
class BoardProgram:
    """A program of the board build, linked from `sources` and its target's board library (e.g. a
    co-processor's device server)."""

    name: str  # the executable's file name, e.g. "hg_soc_vdevice0_host_server"
    sources: tuple[str, ...]  # .c files compiled with the target's board toolchain
    linker_script: str = ""  # a bare-metal ELF's (hetgen/codegen/coproc.py), linked as a bare-metal root's


@dataclass(frozen=True)
class BareMetalProgram:
    """A bare-metal root's board program (hetgen/codegen/baremetal.py): its own main, startup and
    linker script in place of the hosted example, linked into an ELF with a map file."""

    name: str  # the ELF's file name, e.g. "hg_mcu_main.elf"
    sources: tuple[str, ...]  # the semihosting main and the board support, compiled for the board only
    linker_script: str  # e.g. "mcu/link.ld"


@dataclass(frozen=True)
class TargetSources:
    """What the build stage needs to know about one target's files."""

    path: str  # target folder, e.g. "soc/vdevice0"
    prefix: str  # C API prefix, e.g. "hg_soc"
    kernels: tuple[str, ...]  # kernel .c files (hetgen/codegen/kernel_files.py)
    program: str  # model.c
    weights_asm: str  # weights.S (or weights.c for C-array weights)
    weights_blob: str  # weights.bin
    example: str  # main.c ("" = none)
    helpers: tuple[str, ...]  # runtime/*.c the kernels need
    children: tuple[str, ...] = ()  # target folders of the devices this target drives
    is_controller: bool = True
    # The board build only (cross toolchains, programs for the board); the native build ignores them.
    board_sources: tuple[str, ...] = ()  # extra .c files in this target's board library (e.g. remote-device stubs)
    board_programs: tuple[BoardProgram, ...] = ()  # programs linked against this target's board library
    # Child controllers the board build reaches over the transport (their device calls are served by
    # `board_sources`), so they are not linked into this target's programs.
    remote_children: tuple[str, ...] = ()
    bare_metal: BareMetalProgram | None = None  # a bare-metal root: the board program replaces `example`
    frame_depth: int = 0  # a root that runs frames pipelined: its frames in flight (hetgen/spec/frames.py)


@dataclass(frozen=True)
class Sources:
    files: tuple[GeneratedFile, ...]
    targets: tuple[TargetSources, ...]
    runtime: tuple[str, ...]  # runtime/*.c shared by all targets
    manifest: Manifest  # hetgen.json, but for what the build stage adds


def _weights_file(program: Program, model_name: str, prefix: str, folder: str, weights: str) -> GeneratedFile:
    """The weights linked into the library: a blob pulled in by `.incbin`, or a C array."""
    common = {
        "model_name": c_comment(model_name),
        "target_path": c_comment(program.target.path_str),
        "weights_size": program.weights.size,
        "symbol": f"{prefix}_weights",
    }
    section = weights_section(program)  # .rodata, or a bank of their own (hetgen/codegen/banks.py)
    own = section != ".rodata"
    if weights == "c_array":
        blob = program.weights.blob
        rows = [", ".join(f"0x{byte:02x}" for byte in blob[i : i + 16]) + "," for i in range(0, len(blob), 16)]
        attributes = f'aligned(64), section("{section}")' if own else "aligned(64)"
        return GeneratedFile(
            f"{folder}/weights.c", render("model/weights.c.j2", rows=rows, attributes=attributes, **common).encode()
        )
    directive = f'{section}, "a", %progbits' if own else section
    asm = render("model/weights.S.j2", blob_path=c_string(f"{folder}/weights.bin"), section=directive, **common)
    return GeneratedFile(f"{folder}/weights.S", asm.encode())


def _program_files(
    program: Program,
    model_name: str,
    prefix: str,
    children: list[dict],
    simulated: list[dict],
    weights: str = "blob",
    rendered=None,
    frames: bool = False,
):
    folder = program.target.path_str
    kernels = program_kernels(program, rendered)  # identical kernels once, in a bounded number of files
    files = [GeneratedFile(path, text.encode()) for path, text in kernels.files(folder)]
    kernel_paths = [file.path for file in files]
    frames = frames and program.role is ProgramRole.ROOT
    view = program_view(program, model_name, prefix, RUNTIME_VERSION, children, simulated, kernels, frames)
    is_root = program.role is ProgramRole.ROOT
    if is_root:
        files.append(GeneratedFile(f"{folder}/{_file_name(prefix, '.h')}", render("model/model.h.j2", **view).encode()))
    else:
        files.append(
            GeneratedFile(f"{folder}/{_file_name(prefix, '_device.h')}", render("model/device.h.j2", **view).encode())
        )
    template = "model/accelerator.c.j2" if program.role is ProgramRole.ACCELERATOR else "model/model.c.j2"
    files.append(GeneratedFile(f"{folder}/model.c", render(template, **view).encode()))
    blob = f"{folder}/weights.bin"
    files.append(GeneratedFile(blob, program.weights.blob))
    weights_source = _weights_file(program, model_name, prefix, folder, weights)
    files.append(weights_source)
    example = ""
    if is_root:
        example = f"{folder}/main.c"
        files.append(GeneratedFile(example, render("model/main.c.j2", exe_name=f"{prefix}_main", **view).encode()))
    sources = TargetSources(
        frame_depth=len(view["frame_stages"]),
        path=folder,
        prefix=prefix,
        kernels=tuple(kernel_paths),
        program=f"{folder}/model.c",
        weights_asm=weights_source.path,
        weights_blob=blob,
        example=example,
        helpers=kernels.helpers,
        children=tuple(child["path"] for child in children),
        is_controller=program.role is not ProgramRole.ACCELERATOR,
    )
    return files, sources


def generate(
    lowered: Lowered,
    weights: str = "blob",
    gemm_blocks: GemmBlocks = DEFAULT_BLOCKS,
    progress: Progress | None = None,
) -> Sources:
    """All files of the project, in memory. `weights`: "blob" (linked by .incbin) or "c_array";
    `gemm_blocks`: the platform's `options.tuning`, the GEMM's cache blocks (hg_gemm_config.h);
    `progress` hears how many of the kernels are rendered."""
    forget_templates()  # a kind's folder may have changed since the last generation in this process
    total = sum(len(program.units) for program in lowered.programs)
    done = 0

    def rendered(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress.step("rendering kernels", done, total)

    files: list[GeneratedFile] = []
    targets = []
    # objective throughput: the root also runs frames pipelined (hetgen/spec/frames.py)
    frames = getattr(lowered.placement, "objective", "latency") == "throughput"
    frame_depth = 0
    helpers: set[str] = set()
    manifest_targets = []
    # Which `<prefix>_device_stats(workspace, device, ...)` index reads each simulated device.
    stats_index = {device.path: index for index, device in enumerate(lowered.simulated)}
    state_offsets = {device.path: device.offset for device in lowered.simulated}
    prefixes = {
        program.target.path_str: target_prefix(lowered.name, program.target.path) for program in lowered.programs
    }
    arenas = {program.target.path_str: program.memory.arena_size for program in lowered.programs}
    simulated = [
        {"path": device.path, "prefix": prefixes[device.path], "offset": device.offset} for device in lowered.simulated
    ]
    for program in lowered.programs:
        children = [
            {
                "path": child.path,
                "prefix": prefixes[child.path],
                "PREFIX": prefixes[child.path].upper(),
                "header": _file_name(prefixes[child.path], "_device.h"),
                "arena_size": arenas[child.path],
                "offset": child.offset,
                "size": child.size,
            }
            for child in program.workspace.children
        ]
        is_root = program is lowered.root
        program_files, sources = _program_files(
            program,
            lowered.model_name,
            prefixes[program.target.path_str],
            children,
            simulated if is_root else [],
            weights,
            rendered,
            frames,
        )
        if is_root:
            frame_depth = sources.frame_depth
        files.extend(program_files)
        files.append(_threads_config(program))
        targets.append(sources)
        helpers.update(sources.helpers)
        model = program.device_model
        manifest_targets.append(
            TargetEntry(
                path=program.target.path_str,
                prefix=sources.prefix,
                role=program.role.value,
                runtime=program.runtime.value,
                arena_size=program.memory.arena_size,
                intermediate_bytes=program.memory.total_bytes,
                liveness_lower_bound=program.memory.lower_bound,
                weights_bytes=program.weights.size,
                kernels=len(program.units),
                estimated_us=round(program.estimated_us, 3),
                clock_mhz=model.clock_mhz
                if model
                else (program.counted_link.clock_mhz if program.counted_link else None),
                capacity_bytes=model.capacity if model else None,
                stats_device=stats_index.get(program.target.path_str),
                simulator=simulator_entry(program, state_offsets[program.target.path_str]) if model else None,
            )
        )
    remote = remote_devices(lowered, prefixes)
    runtime_dir = templates_dir() / "runtime"
    # Every shared header travels (kernels may include any); C sources only when something needs them.
    needed = set(RUNTIME_FILES) | helpers | {path.name for path in runtime_dir.glob("*.h")} - HEADERS_WHERE_USED
    needed |= {extra for name, extras in RUNTIME_NEEDS.items() if name in needed for extra in extras}
    for program in lowered.programs:
        needed |= ROLE_FILES.get(program.role, set())
    if lowered.root.pool:  # the root's `_run` keeps the workers up for the run (hg_threads.h)
        needed.add(POOL_SOURCE)
    if frame_depth:  # the root's `_run_frames` drives each device from a worker thread
        needed |= FRAMES_FILES
    board_only = set(RUNTIME_SOURCES) if remote else set()
    runtime_c = []
    for name in sorted(needed | board_only):
        if name == CONSTANTS_HEADER:  # written from hetgen/abi.py, not copied
            files.append(GeneratedFile(f"runtime/{name}", constants_header().encode()))
            continue
        files.append(GeneratedFile(f"runtime/{name}", (runtime_dir / name).read_bytes()))
        if name.endswith(".c") and name not in board_only:
            runtime_c.append(f"runtime/{name}")
    files.append(_gemm_config(gemm_blocks))
    # Last: the transport's two ends carry the plan hash of everything generated before them.
    files_remote, targets, hashed = _remote_files(
        lowered, prefixes, targets, remote, plan_hash((f.path, f.content) for f in files)
    )
    files.extend(files_remote)
    root = lowered.root
    manifest = Manifest(
        platform=lowered.name,
        model=lowered.model_name,
        prefix=targets[0].prefix,
        inputs=tuple(_tensor_entry(t) for t in root.inputs),
        outputs=tuple(_tensor_entry(t) for t in root.outputs),
        targets=tuple(manifest_targets),
        estimates=estimate_entries(lowered),
        energy=_energy_entry(lowered.placement),
        estimate_us=lowered.estimate_us,
        program=lowered.timed_program(),  # bench's replay
        workspace_size=root.workspace.size,
        workspace_align=ALIGNMENT,
        # The board build's co-processors, each a server program the root reaches over the transport.
        remote_devices=tuple(
            RemoteDeviceEntry(device.name, device.program, device.server, device.env_name, hashed) for device in remote
        ),
        frame_depth=frame_depth,
        pipeline=lowered.placement.pipeline.to_json() if frames and lowered.placement.pipeline is not None else None,
    )
    return Sources(tuple(files), tuple(targets), tuple(runtime_c), manifest)


def _threads_config(program: Program) -> GeneratedFile:
    """<program folder>/hg_threads_config.h: the program's own worker pool, its default thread count
    (the controller's `threads:`, else `options.threads`) and whether it has a pool at all (not on
    bare metal, nor an accelerator: hetgen.platform.threads). runtime/hg_threads.h finds it through
    the program's include path (hetgen/build/graph.py: `-I <folder>` before its children's)."""
    what = program.target.path_str
    text = render("model/hg_threads_config.h.j2", target=what, threads=program.threads, pool=int(program.pool))
    return GeneratedFile(f"{what}/hg_threads_config.h", text.encode())


def _gemm_config(blocks: GemmBlocks) -> GeneratedFile:
    """runtime/hg_gemm_config.h: the GEMM's cache blocks, the same the kernels' workspaces were sized for."""
    text = render("model/hg_gemm_config.h.j2", mc=blocks.mc, kc=blocks.kc, nc=blocks.nc)
    return GeneratedFile("runtime/hg_gemm_config.h", text.encode())


def _remote_files(
    lowered: Lowered,
    prefixes: dict[str, str],
    targets: list[TargetSources],
    remote: tuple[RemoteDevice, ...],
    project_hash: bytes,
):
    """The board build's transport: the root's remote devices and each co-processor's server, both
    carrying `project_hash`; and the hash as hetgen.json records it ("" without a transport)."""
    if not remote:
        return [], targets, ""
    root_folder = lowered.root.target.path_str
    source = remote_devices_source(lowered, remote, prefixes, project_hash)
    files = [GeneratedFile(f"{root_folder}/remote_devices.c", source.encode())]
    servers = {}
    for device in remote:
        path = f"{device.program}/server_main.c"
        files.append(GeneratedFile(path, server_source(lowered, device, project_hash).encode()))
        if device.bare_metal:  # an ELF serving its UART (hetgen/codegen/coproc.py)
            files += bare_metal_server_files(lowered, device, prefixes, files)
            servers[device.program] = BoardProgram(
                device.server, (path, *coproc.SERVER_SOURCES), linker_script=f"{device.program}/link.ld"
            )
            continue
        servers[device.program] = BoardProgram(device.server, (path, *SERVER_RUNTIME))
    updated = []
    for sources in targets:
        if sources.path == root_folder:
            sources = replace(
                sources,
                board_sources=(*sources.board_sources, f"{root_folder}/remote_devices.c", *CLIENT_RUNTIME),
                remote_children=tuple(device.program for device in remote),
            )
        elif sources.path in servers:
            sources = replace(sources, board_programs=(*sources.board_programs, servers[sources.path]))
        updated.append(sources)
    return files, updated, project_hash.hex()


def bare_metal_server_files(
    lowered: Lowered, device: RemoteDevice, prefixes: dict[str, str], files: list[GeneratedFile]
) -> list[GeneratedFile]:
    """A bare-metal server's linker script, and the runtime files it needs that are not there yet."""
    target = next(p.target for p in lowered.programs if p.target.path_str == device.program)
    script = coproc.linker_script(target, prefixes[device.program], lowered.model_name)
    have = {f.path for f in files}
    extra = [GeneratedFile(f"{device.program}/link.ld", script.encode())]
    extra += [GeneratedFile(path, content) for path, content in coproc.support_files() if path not in have]
    return extra


def _file_name(stem: str, suffix: str) -> str:
    """A generated file's name from a C identifier (a kernel function, a target prefix)."""
    name = stem + suffix
    if not is_path_component(name):
        raise InternalError(f"{name!r} is not a safe file name; C identifiers should be")
    return name


def _tensor_entry(spec) -> TensorEntry:
    return TensorEntry(spec.name, spec.type.dtype.label, tuple(spec.type.shape))


def _energy_entry(placement) -> dict | None:
    """The manifest's energy section: only where the placement minimised energy (a latency
    project's hetgen.json stays as it was)."""
    report = getattr(placement, "energy", None)
    if report is None or getattr(placement, "objective", "latency") != "energy":
        return None
    return report.to_manifest()
