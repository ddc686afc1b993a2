"""The board build: each controller compiled by its own (cross) toolchain, for the board it runs on.

Per controller, a static library `board/lib/lib<prefix>.a` holding its own code, the accelerators it
drives in-process (a simulated NPU is a C device model, compiled into its driver), the board-only
sources codegen gives it (e.g. remote-device stubs), and the runtime built with its toolchain.

Programs, linked statically (`-static`, so qemu-user or a board runs them without searching for a C
library): the root's example program `board/bin/<prefix>_main IN.bin OUT.bin`, and the programs
codegen lists per target (`TargetSources.board_programs`, e.g. a co-processor's device server).

A program can link in-process only the child controllers built for its own ISA (same triple). A
child built for another ISA can only be reached over the out-of-process transport, when codegen
says so (`TargetSources.remote_children`, served by its `board_sources`: today the root's own
co-processors, each a device-server program of its own); otherwise the program is not built, and
the plan says why (build.ninja comments, hetgen's output, hetgen.json).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.build.baremetal import link_flags, map_path
from hetgen.build.graph import GraphWriter, TargetScope
from hetgen.build.toolchain import BOARD_PROGRAM_LDFLAGS, BuildOptions, board_toolchain
from hetgen.codegen.project import Sources, TargetSources
from hetgen.names import ninja_command, ninja_comment
from hetgen.platform.baremetal import MemoryMap, is_bare_metal, memory_map
from hetgen.platform.model import Platform

BOARD_DIR = "board"
# The transport's shared secret (docs/transport.md, "Authentication"): drawn at build time, not at
# generation, so the generated project stays byte-for-byte reproducible and every build has a key
# of its own; mode 0600, which both programs insist on.
TRANSPORT_KEY = f"{BOARD_DIR}/transport.key"
TRANSPORT_KEY_COMMAND = "rm -f $out && (umask 077 && dd if=/dev/urandom of=$out bs=32 count=1 2>/dev/null)"


def board_object(source: str) -> str:
    return f"{BOARD_DIR}/obj/{source}.o"


def target_board_object(target: str, source: str) -> str:
    """A source's board object for `target`: one outside the target's folder (a shared runtime file,
    e.g. the transport's, that both ends of a link compile) gets an object per target, since each
    target compiles it with its own toolchain."""
    return board_object(source) if source.startswith(f"{target}/") else f"{BOARD_DIR}/obj/{target}/{source}.o"


def board_library(prefix: str) -> str:
    return f"{BOARD_DIR}/lib/lib{prefix}.a"


def board_program(name: str) -> str:
    return f"{BOARD_DIR}/bin/{name}"


@dataclass(frozen=True)
class PlannedProgram:
    name: str
    path: str  # e.g. "board/bin/hg_soc_main"
    target: str  # the target whose toolchain builds it
    kind: str  # "root" (the model's example program) or "program" (TargetSources.board_programs)
    sources: tuple[str, ...]
    libraries: tuple[str, ...]  # the target's board library, then those of its in-process children
    emulator: tuple[str, ...]  # how to run it on this machine, e.g. ("qemu-aarch64", "-L", "/usr/...")
    # A bare-metal ELF (hetgen/build/baremetal.py): its linker script and the board's memory map;
    # it runs under a system emulator with semihosting.
    linker_script: str = ""
    memory: MemoryMap | None = None


@dataclass(frozen=True)
class PlannedLibrary:
    target: str
    path: str
    triple: str  # "" = this machine's
    cc: str


@dataclass(frozen=True)
class BoardPlan:
    libraries: tuple[PlannedLibrary, ...]
    programs: tuple[PlannedProgram, ...]
    notes: tuple[str, ...]  # what the board build leaves out, and why
    transport_key: str = ""  # TRANSPORT_KEY where programs meet over the transport, else ""

    def root_program(self) -> PlannedProgram | None:
        return next((p for p in self.programs if p.kind == "root"), None)

    def manifest(self) -> dict:
        """The plan as hetgen.json records it (verify --emulate finds the programs there)."""
        return {
            "libraries": [
                {"target": lib.target, "path": lib.path, "triple": lib.triple, "cc": lib.cc} for lib in self.libraries
            ],
            "programs": [
                {
                    "name": p.name,
                    "path": p.path,
                    "target": p.target,
                    "kind": p.kind,
                    "emulator": list(p.emulator),
                    **({"semihosting": True, "memory": _memory_json(p.memory)} if p.memory else {}),
                }
                for p in self.programs
            ],
            "notes": list(self.notes),
            **({"transport_key": self.transport_key} if self.transport_key else {}),
        }


def _triple(platform: Platform, path: str) -> str:
    return platform.target(path).toolchain.triple


def _in_process(
    owner: TargetSources, by_path: dict[str, TargetSources], platform: Platform
) -> tuple[list[TargetSources], list[str]]:
    """The controllers a program of `owner` links in (owner first), and why it cannot be linked
    (one line per child controller built for another ISA and not reached over the transport)."""
    linked, blockers = [owner], []
    for child_path in owner.children:
        child = by_path[child_path]
        if not child.is_controller or child_path in owner.remote_children:
            continue  # accelerators are in their driver's library; remote children are separate programs
        mine, theirs = _triple(platform, owner.path), _triple(platform, child_path)
        if theirs != mine:
            bare = [p for p in (child_path, owner.path) if is_bare_metal(platform.target(p))]
            why = f" ({' and '.join(bare)}: bare metal, no OS for a transport)" if bare else ""
            blockers.append(
                f"{child_path} is built for {theirs or 'this machine'} and {owner.path} for {mine or 'this machine'}{why}"
            )
            continue
        more, more_blockers = _in_process(child, by_path, platform)
        linked += more
        blockers += more_blockers
    return linked, blockers


def board_plan(sources: Sources, platform: Platform, options: BuildOptions) -> BoardPlan:
    by_path = {t.path: t for t in sources.targets}
    libraries, programs, notes = [], [], []
    for target_sources in sources.targets:
        if not target_sources.is_controller:
            continue
        toolchain = board_toolchain(platform.target(target_sources.path), options)
        libraries.append(
            PlannedLibrary(target_sources.path, board_library(target_sources.prefix), toolchain.triple, toolchain.cc)
        )
        wanted = [(p.name, "program", p.sources, p.linker_script) for p in target_sources.board_programs]
        bare_metal = target_sources.bare_metal
        if bare_metal is not None:  # its own main, startup and linker script (hetgen/codegen/baremetal.py)
            wanted.insert(0, (bare_metal.name, "root", bare_metal.sources, bare_metal.linker_script))
        elif target_sources.example:
            wanted.insert(0, (f"{target_sources.prefix}_main", "root", (target_sources.example,), ""))
        if not wanted:
            continue
        linked, blockers = _in_process(target_sources, by_path, platform)
        for name, kind, program_sources, script in wanted:
            if blockers:
                notes.append(
                    f"no board program {name}: {'; '.join(blockers)}; they can only meet over the out-of-process "
                    "transport, which hetgen builds only between the root and its own co-processors "
                    "(docs/transport.md; the board libraries are built per controller)"
                )
                continue
            programs.append(
                PlannedProgram(
                    name=name,
                    path=board_program(name),
                    target=target_sources.path,
                    kind=kind,
                    sources=tuple(program_sources),
                    libraries=tuple(board_library(t.prefix) for t in linked),
                    emulator=toolchain.emulator,
                    **_bare_metal_fields(script, platform, target_sources.path),
                )
            )
    remote = any(t.remote_children for t in sources.targets)
    return BoardPlan(tuple(libraries), tuple(programs), tuple(notes), TRANSPORT_KEY if remote else "")


def _bare_metal_fields(linker_script: str, platform: Platform, path: str) -> dict:
    """A bare-metal ELF's (a bare-metal root's program, or a bare-metal co-processor's server)."""
    if not linker_script:
        return {}
    return {"linker_script": linker_script, "memory": memory_map(platform.target(path))}


def _memory_json(memory: MemoryMap) -> dict:
    found = {"flash_bytes": memory.flash_bytes, "ram_bytes": memory.ram_bytes, "stack_bytes": memory.stack_bytes}
    if memory.banks:  # declared memories replace flash and RAM (hetgen/platform/banks.py)
        found["banks"] = [{"name": b.name, "origin": b.origin, "size": b.size} for b in memory.banks]
    return found


def _library_objects(target_sources: TargetSources, by_path: dict[str, TargetSources]) -> list[TargetSources]:
    """A controller and the accelerators it drives in-process (child controllers have their own)."""
    found = [target_sources]
    for child in target_sources.children:
        if not by_path[child].is_controller:
            found += _library_objects(by_path[child], by_path)
    return found


def board_graph(
    graph: GraphWriter, sources: Sources, platform: Platform, options: BuildOptions, plan: BoardPlan
) -> list[str]:
    """Write the board build's edges; return its outputs (what `ninja board` builds)."""
    ninja = graph.ninja
    ninja.comment("board: each controller by its own toolchain; objects, libraries and programs under board/")
    for note in plan.notes:
        ninja.comment(ninja_comment(note))
    ninja.newline()
    by_path = {t.path: t for t in sources.targets}
    scopes: dict[str, TargetScope] = {}
    objects: dict[str, list[str]] = {}
    for target_sources in sources.targets:
        scope = graph.target_scope(
            "board", target_sources, board_toolchain(platform.target(target_sources.path), options)
        )
        scopes[target_sources.path] = scope
        own = [graph.compile(scope, src, board_object(src)) for src in target_sources.kernels]
        own.append(graph.compile(scope, target_sources.program, board_object(target_sources.program)))
        weights = target_sources.weights_asm
        own.append(graph.compile(scope, weights, board_object(weights), implicit=(target_sources.weights_blob,)))
        own += [
            graph.compile(scope, src, target_board_object(target_sources.path, src))
            for src in target_sources.board_sources
        ]
        if target_sources.is_controller:
            own += [
                graph.compile(scope, src, f"{BOARD_DIR}/obj/{target_sources.path}/{src}.o")
                for src in sorted(set(sources.runtime))
            ]
        objects[target_sources.path] = own
        ninja.newline()

    outputs = []
    for library in plan.libraries:
        members = [obj for t in _library_objects(by_path[library.target], by_path) for obj in objects[t.path]]
        outputs.append(graph.archive(scopes[library.target], library.path, members))
    static = ninja_command(BOARD_PROGRAM_LDFLAGS)
    compiled: set[str] = set()  # programs may share sources (a transport, a driver): one edge each
    for program in plan.programs:
        scope = scopes[program.target]
        main_objects = []
        for src in program.sources:
            obj = target_board_object(program.target, src)  # per target: each compiles with its own toolchain
            if obj not in compiled:
                compiled.add(graph.compile(scope, src, obj))
            main_objects.append(obj)
        inputs = [*main_objects, *program.libraries]
        if program.linker_script:  # a bare-metal ELF: its own link flags, script and map file
            flags = ninja_command((*link_flags(program.linker_script, map_path(program.path)),))
            outputs.append(
                graph.link(
                    scope,
                    "board_link",
                    program.path,
                    inputs,
                    f"{scope.ref('cflags')} {flags}",
                    implicit=(program.linker_script,),
                    implicit_outputs=(map_path(program.path),),
                )
            )
            continue
        outputs.append(graph.link(scope, "board_link", program.path, inputs, static))
    if plan.transport_key:
        ninja.newline()
        ninja.comment("the transport's key, drawn once per build (delete it to draw another); see docs/transport.md")
        ninja.rule("transport_key", TRANSPORT_KEY_COMMAND, description="KEY $out")
        ninja.build(plan.transport_key, "transport_key")
        outputs.append(plan.transport_key)
    ninja.newline()
    return outputs
