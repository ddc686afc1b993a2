"""Bare-metal roots (hetgen/platform/baremetal.py: a controller whose toolchain targets no operating
system, a Cortex-M microcontroller) get a board program of their own in place of the hosted example.

The generated library is the same everywhere (one header, weights const in .rodata, one static
workspace, no heap and no OS calls); what a bare-metal board adds is its program: a main that reads
its inputs and writes its outputs through semihosting (templates/baremetal/main.c.j2), the startup
code and board support (templates/baremetal/hg_board.c: vector table, reset handler, semihosting,
SysTick ticks, stack high-water mark) and a linker script from the platform's memory map
(templates/baremetal/link.ld.j2). The native build keeps compiling the hosted example, so Python
still loads and verifies the same model on this machine.
"""

from __future__ import annotations

from dataclasses import replace

from hetgen.codegen.banks import output_section, ram_input_section
from hetgen.codegen.project import STATS_FIELDS, BareMetalProgram, GeneratedFile, Sources
from hetgen.codegen.render import render
from hetgen.lower.program import Lowered
from hetgen.names import c_comment
from hetgen.platform.banks import bank_of
from hetgen.platform.baremetal import is_bare_metal, memory_map
from hetgen.templates_dir import templates_dir

BOARD_RUNTIME = ("hg_board.c", "hg_board.h")  # copied into runtime/; hg_board.c is compiled for the board only


def program_name(prefix: str) -> str:
    return f"{prefix}_main.elf"


def _buffers(kind: str, tensors) -> list[dict]:
    # A zero-sized tensor still gets a one-byte buffer: C has no zero-length arrays.
    return [{"name": f"{kind}_{index}", "size": max(spec.type.nbytes, 1)} for index, spec in enumerate(tensors)]


def _buffers_section(root) -> str:
    """The example buffers' section: "" (.bss, beside the stack) unless a banked root's are in
    another bank (hetgen/lower/banks.py `example_buffers_bank`), whose NOLOAD section nothing zeroes."""
    bank = root.buffers_bank
    if bank is None or bank == bank_of(root.target.memories, "stack"):
        return ""
    return ram_input_section(bank.name)


def bank_regions(banks) -> dict:
    """The linker script's view of a banked target (templates/baremetal/link_banks.ld.j2): a MEMORY
    region per bank, a loaded output section per read-only bank that holds weights apart from the
    code, a NOLOAD output section per writable bank that holds arena storage."""
    code, stack = bank_of(banks, "code"), bank_of(banks, "stack")

    def region(bank) -> str:
        return f"BANK_{bank.name.upper()}"

    views = [
        {
            "name": bank.name,
            "region": region(bank),
            "access": "rx" if bank.read_only else "rwx",
            "origin": f"0x{bank.origin:08x}",
            "size": bank.size,
            "holds": ", ".join(bank.holds),
            "section": output_section(bank.name),
            "input": ram_input_section(bank.name),
        }
        for bank in banks
    ]
    return {
        "banks": views,
        "code_region": region(code),
        "stack_region": region(stack),
        "loaded_banks": [view for bank, view in zip(banks, views) if bank.read_only and bank != code],
        "ram_banks": [view for bank, view in zip(banks, views) if "arena" in bank.holds],
    }


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
        buffers_section=_buffers_section(root),
        simulated_devices=len(lowered.simulated),
        stats_fields=STATS_FIELDS,
        **common,
    )
    if root.target.memories:
        script = render(
            "baremetal/link_banks.ld.j2",
            kind=c_comment(root.target.kind.name),
            stack_bytes=layout.stack_bytes,
            **bank_regions(root.target.memories),
            **common,
        )
    else:
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
