"""Bare-metal targets: a controller whose toolchain targets no operating system (arm-none-eabi, a
Cortex-M microcontroller), and its memory map from its kind's attributes (the board's flash and RAM).

Codegen gives such a root its own board program (hetgen/codegen/baremetal.py), links its
co-processors in-process (a core without an OS has no pipes or sockets for the transport), and the
build checks the model against the map before building (hetgen/build/baremetal.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.errors import HetgenError
from hetgen.platform.model import Target, Toolchain

KIB = 1024
MEMORY_ATTRIBUTES = ("flash_origin", "flash_kib", "ram_origin", "ram_kib", "stack_kib")
MEMORY_MAP_ATTRIBUTES = MEMORY_ATTRIBUTES[:4]  # what `memories:` replaces (hetgen/platform/banks.py)


def is_bare_metal(target: Target) -> bool:
    """A target built for no operating system: its toolchain's triple names the system `none`
    (arm-none-eabi, aarch64-none-elf) or only an object format (riscv64-unknown-elf). Its board
    program needs startup code and a linker script, and may call no OS."""
    return is_bare_metal_toolchain(target.toolchain)


def is_bare_metal_toolchain(toolchain: Toolchain) -> bool:
    """Whether code built by `toolchain` runs on no operating system (see `is_bare_metal`)."""
    parts = toolchain.triple.split("-")
    return len(parts) > 1 and ("none" in parts[1:] or parts[-1] == "elf")


@dataclass(frozen=True)
class MemoryMap:
    """A bare-metal target's memory, from its kind's attributes (the board's map)."""

    flash_origin: int
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    stack_bytes: int
    banks: tuple = ()  # its declared memories (hetgen/platform/banks.py), which replace flash and RAM


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
        banks=target.memories,
    )
