"""The board build of a bare-metal root (a Cortex-M, arm-none-eabi): how its ELF links, whether the
model fits the board before anything is built, and what the image takes after.

- `link_flags`: the ELF links with the target's own code-generation flags (so the linker picks the
  newlib built for that core and float ABI), without the C library's startup files (hg_board.c has
  the reset handler), with the generated linker script, unused sections dropped and a map file.
  Nothing provides the OS calls newlib's stdio or malloc would need (`_sbrk`, `_write`, `_open`),
  so code that reached for them would not link.
- `check_board_fit`: the RAM the plan needs (the workspace: the arena and the devices' state; the
  example's input and output buffers; the stack) and the flash it needs (every program's weights)
  against the platform's ram_kib and flash_kib, refused with the numbers before anything is built.
  Code and constants are placed by the linker, which refuses an overflow of either region.
- `image_sizes`: text/data/bss of the linked ELF (the sections `size` counts), read from its section
  headers, and the RAM it takes at its peak: data + bss (the arena is in bss) + the reserved stack.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from hetgen.errors import HetgenError
from hetgen.lower.program import Lowered
from hetgen.platform.banks import bank_of
from hetgen.platform.baremetal import is_bare_metal, memory_map
from hetgen.platform.model import Bank, Platform

BARE_METAL_LDFLAGS = ("-nostartfiles", "-Wl,--gc-sections")


def link_flags(linker_script: str, map_file: str) -> tuple[str, ...]:
    return (*BARE_METAL_LDFLAGS, "-T", linker_script, f"-Wl,-Map={map_file}")


def map_path(program_path: str) -> str:
    return program_path.removesuffix(".elf") + ".map"


@dataclass(frozen=True)
class BoardFit:
    """What a bare-metal root needs of its board's memory before code is counted."""

    target: str
    kind: str
    workspace: int  # the library's static workspace: the arena and the devices' state blocks
    arena: int
    io_buffers: int  # the example program's input and output buffers
    stack: int
    weights: int  # every program's weights, all in flash
    ram: int
    flash: int

    @property
    def ram_needed(self) -> int:
        return self.workspace + self.io_buffers + self.stack

    def problems(self) -> list[str]:
        found = []
        if self.ram_needed > self.ram:
            found.append(
                f"RAM: {self.ram_needed} bytes needed (workspace {self.workspace}: arena {self.arena} and device "
                f"state {self.workspace - self.arena}; input/output buffers {self.io_buffers}; stack {self.stack}) "
                f"but the board has {self.ram} (ram_kib {self.ram // 1024})"
            )
        if self.weights > self.flash:
            found.append(
                f"flash: the weights alone take {self.weights} bytes but the board has {self.flash} "
                f"(flash_kib {self.flash // 1024})"
            )
        return found


def board_fit(lowered: Lowered, platform: Platform) -> BoardFit | None:
    """The memory a bare-metal root needs, or None when the root is not bare metal."""
    root = lowered.root
    if not is_bare_metal(root.target):
        return None
    layout = memory_map(root.target)
    return BoardFit(
        target=root.target.path_str,
        kind=root.target.kind.name,
        workspace=root.workspace.size,
        arena=root.memory.arena_size,
        io_buffers=sum(max(spec.type.nbytes, 1) for spec in (*root.inputs, *root.outputs)),
        stack=layout.stack_bytes,
        weights=sum(program.weights.size for program in lowered.programs),
        ram=layout.ram_bytes,
        flash=layout.flash_bytes,
    )


def bank_needs(lowered: Lowered) -> list[tuple[Bank, int, list[str]]]:
    """A banked bare-metal root's needs per bank before code is counted: (bank, bytes, what)."""
    root = lowered.root
    banks = root.target.memories
    needs = {bank.name: [] for bank in banks}
    weights = bank_of(banks, "weights")
    needs[weights.name].append(("weights", sum(program.weights.size for program in lowered.programs)))
    for index, arena in enumerate(root.banks):
        needs[arena.bank.name].append((f"arena {len(arena.buffers)} buffers", arena.size))
        if index == 0 and root.workspace.size > arena.size:
            needs[arena.bank.name].append(("device state", root.workspace.size - arena.size))
    stack = bank_of(banks, "stack")
    needs[stack.name].append(("stack", memory_map(root.target).stack_bytes))
    io = sum(max(spec.type.nbytes, 1) for spec in (*root.inputs, *root.outputs))
    needs[(root.buffers_bank or stack).name].append(("input/output buffers", io))
    return [
        (
            bank,
            sum(nbytes for _, nbytes in needs[bank.name]),
            [f"{what} {nbytes:,} B" for what, nbytes in needs[bank.name]],
        )
        for bank in banks
    ]


def bank_problems(lowered: Lowered) -> list[str]:
    found = []
    for bank, needed, parts in bank_needs(lowered):
        if needed > bank.size:
            found.append(
                f"bank '{bank.name}' ({bank.size // 1024} KiB) overflows by {needed - bank.size:,} B: "
                f"{needed:,} B needed ({', '.join(parts)})"
            )
    return found


MAP_FIX = "Use a smaller model or input shapes, or a board with more memory (ram_kib, flash_kib, stack_kib in the platform file)"
BANKS_FIX = (
    "Fix: use a smaller model or input shapes, give the bank more kib, or add a bank that holds the arena "
    "(memories: in the platform file)"
)


def check_board_fit(lowered: Lowered, platform: Platform) -> None:
    """Refuse, with the numbers, a model that cannot fit its bare-metal board's RAM or flash (each
    of its banks, where it declares memories)."""
    fit = board_fit(lowered, platform)
    if fit is None:
        return
    problems = bank_problems(lowered) if lowered.root.target.memories else fit.problems()
    if problems:
        raise HetgenError(
            f"{platform.file}: model {lowered.model_name!r} does not fit target {fit.target} (kind {fit.kind}): "
            + "; ".join(problems)
            + ". Nothing was built. "
            + (BANKS_FIX if lowered.root.target.memories else MAP_FIX)
        )


@dataclass(frozen=True)
class ImageSizes:
    text: int  # code, constants and weights (flash)
    data: int  # initialised data: RAM, with its initial values in flash too
    bss: int  # zeroed data: the workspace (the arena) and the example's buffers
    stack: int  # the stack reserved by the linker script

    @property
    def flash(self) -> int:
        return self.text + self.data

    @property
    def peak_ram(self) -> int:
        return self.data + self.bss + self.stack


SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHT_NOBITS = 8
STACK_SECTION = ".stack"


def section_headers(elf: Path) -> list[tuple[str, int, int, int, int]]:
    """The allocated sections of a 32-bit little-endian ELF: (name, address, size, flags, type)."""
    blob = elf.read_bytes()
    if blob[:4] != b"\x7fELF" or blob[4] != 1 or blob[5] != 1:
        raise HetgenError(f"{elf}: not a 32-bit little-endian ELF file")
    (section_offset,) = struct.unpack_from("<I", blob, 0x20)
    entry_size, count, names_index = struct.unpack_from("<HHH", blob, 0x2E)
    headers = [struct.unpack_from("<IIIIIIIIII", blob, section_offset + i * entry_size) for i in range(count)]
    names_offset = headers[names_index][4]
    found = []
    for header in headers:
        if header[2] & SHF_ALLOC:
            start = names_offset + header[0]
            name = blob[start : blob.index(b"\0", start)].decode("ascii", "replace")
            found.append((name, header[3], header[5], header[2], header[1]))
    return found


def bank_usage(elf: Path, banks: list[dict]) -> list[tuple[dict, int, list[str]]]:
    """Per declared bank (the manifest's banks), the bytes of the ELF's sections whose addresses lie
    in it, and their names."""
    sections = section_headers(elf)
    usage = []
    for bank in banks:
        inside = [s for s in sections if bank["origin"] <= s[1] < bank["origin"] + bank["size"] and s[2]]
        usage.append((bank, sum(s[2] for s in inside), [s[0] for s in inside]))
    return usage


def image_sizes(elf: Path) -> ImageSizes:
    """Sizes of a 32-bit little-endian ELF's allocated sections, counted as binutils' `size` does
    (read-only: text; writable with contents: data; writable without: bss), the stack apart."""
    text = data = bss = stack = 0
    for name, _, size, flags, kind in section_headers(elf):
        if name == STACK_SECTION:
            stack += size
        elif not flags & SHF_WRITE:
            text += size
        elif kind == SHT_NOBITS:
            bss += size
        else:
            data += size
    return ImageSizes(text, data, bss, stack)


def image_report(out_dir: Path, manifest) -> list[str]:
    """One line per bare-metal program of a built project (its `Manifest`, hetgen/codegen/manifest.py):
    its sizes against the board's memory."""
    lines = []
    arenas = {target.path: target.arena_size for target in manifest.targets}
    for program in (manifest.board or {}).get("programs", []):
        memory = program.get("memory")
        elf = out_dir / program["path"]
        if memory is None or not elf.is_file():
            continue
        sizes = image_sizes(elf)
        if memory.get("banks"):
            per_bank = "; ".join(
                f"{bank['name']} {used} of {bank['size']} B ({', '.join(names) or 'empty'})"
                for bank, used, names in bank_usage(elf, memory["banks"])
            )
            lines.append(
                f"{program['path']}: text {sizes.text} B, data {sizes.data} B; per bank: {per_bank}; map {map_path(program['path'])}"
            )
            continue
        lines.append(
            f"{program['path']}: text {sizes.text} B, data {sizes.data} B, bss {sizes.bss} B; "
            f"flash {sizes.flash} of {memory['flash_bytes']} B; peak RAM {sizes.peak_ram} of {memory['ram_bytes']} B "
            f"(data + bss {sizes.data + sizes.bss}, holding the arena {arenas[program['target']]}; stack {sizes.stack}); "
            f"map {map_path(program['path'])}"
        )
    return lines
