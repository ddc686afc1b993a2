"""Bare-metal roots: a controller whose toolchain targets no operating system (`arm-none-eabi`, a
Cortex-M microcontroller) gets a board program of its own in place of the hosted example.

The generated library is the same everywhere (one header, weights const in .rodata, one static
workspace, no heap and no OS calls); what a bare-metal board adds is its program: a main that reads
its inputs and writes its outputs through semihosting (templates/baremetal/main.c.j2), the startup
code and board support (templates/baremetal/hg_board.c: vector table, reset handler, semihosting,
SysTick ticks, stack high-water mark) and a linker script from the platform's memory map
(templates/baremetal/link.ld.j2). The native build keeps compiling the hosted example, so Python
still loads and verifies the same model on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hetgen.codegen.project import BareMetalProgram, GeneratedFile, Sources
from hetgen.codegen.render import render
from hetgen.errors import HetgenError
from hetgen.lower.program import Lowered
from hetgen.names import c_comment
from hetgen.platform.model import Target
from hetgen.templates_dir import templates_dir

BOARD_RUNTIME = ("hg_board.c", "hg_board.h")  # copied into runtime/; hg_board.c is compiled for the board only
MEMORY_ATTRIBUTES = ("flash_origin", "flash_kib", "ram_origin", "ram_kib", "stack_kib")
KIB = 1024


def is_bare_metal(target: Target) -> bool:
    """A target built for no operating system: its toolchain's triple names the system `none`
    (arm-none-eabi). Its board program needs startup code and a linker script, and may call no OS."""
    return "none" in target.toolchain.triple.split("-")[1:]


@dataclass(frozen=True)
class MemoryMap:
    """A bare-metal target's memory, from its kind's attributes (the board's map)."""

    flash_origin: int
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    stack_bytes: int


def memory_map(target: Target) -> MemoryMap:
    missing = [name for name in MEMORY_ATTRIBUTES if name not in target.attrs]
    if missing:
        raise HetgenError(
            f"{target.source.file}: target {target.path_str} (kind {target.kind.name}) is built for no operating "
            f"system ({target.toolchain.triple}) but its kind has no memory map ({', '.join(missing)}); "
            "use a kind that refines cortex-m, or declare these attributes"
        )
    attrs = target.attrs
    return MemoryMap(
        flash_origin=int(attrs["flash_origin"]),
        flash_bytes=int(attrs["flash_kib"]) * KIB,
        ram_origin=int(attrs["ram_origin"]),
        ram_bytes=int(attrs["ram_kib"]) * KIB,
        stack_bytes=int(attrs["stack_kib"]) * KIB,
    )


def program_name(prefix: str) -> str:
    return f"{prefix}_main.elf"


def _buffers(kind: str, tensors) -> list[dict]:
    # A zero-sized tensor still gets a one-byte buffer: C has no zero-length arrays.
    return [{"name": f"{kind}_{index}", "size": max(spec.type.nbytes, 1)} for index, spec in enumerate(tensors)]


def with_board_support(lowered: Lowered, sources: Sources) -> Sources:
    """`sources` with a bare-metal root's board program added (unchanged for any other root)."""
    root = lowered.root
    if not is_bare_metal(root.target):
        return sources
    layout = memory_map(root.target)
    root_sources = sources.targets[0]
    folder, prefix = root_sources.path, root_sources.prefix
    common = {
        "model_name": c_comment(lowered.model_name),
        "target_path": c_comment(root.target.path_str),
        "prefix": prefix,
        "PREFIX": prefix.upper(),
    }
    exe_name = program_name(prefix)
    main = render(
        "baremetal/main.c.j2",
        exe_name=exe_name,
        input_buffers=_buffers("input", root.inputs),
        output_buffers=_buffers("output", root.outputs),
        **common,
    )
    script = render(
        "baremetal/link.ld.j2",
        kind=c_comment(root.target.kind.name),
        flash_origin=f"0x{layout.flash_origin:08x}",
        flash_bytes=layout.flash_bytes,
        ram_origin=f"0x{layout.ram_origin:08x}",
        ram_bytes=layout.ram_bytes,
        stack_bytes=layout.stack_bytes,
        **common,
    )
    board_dir = templates_dir() / "baremetal"
    files = [
        GeneratedFile(f"{folder}/board_main.c", main.encode()),
        GeneratedFile(f"{folder}/link.ld", script.encode()),
        *(GeneratedFile(f"runtime/{name}", (board_dir / name).read_bytes()) for name in BOARD_RUNTIME),
    ]
    program = BareMetalProgram(
        name=exe_name,
        sources=(f"{folder}/board_main.c", "runtime/hg_board.c"),
        linker_script=f"{folder}/link.ld",
    )
    targets = (replace(root_sources, bare_metal=program), *sources.targets[1:])
    return replace(sources, files=(*sources.files, *files), targets=targets)
