"""Where a banked root's storage lands (`memories:`, hetgen/lower/banks.py): the C names and
sections of its banks, which model.c, the weights file and the bare-metal linker script share.

- The first arena bank holds the caller's workspace (its static copy in that bank's section);
  every further arena bank that received spilled buffers is a static array of its own, named
  `<prefix>_bank_<name>`. A buffer's offset in bank k's range of the program's plan becomes
  `<prefix>_bank_<name> + (offset - base)`.
- Bare metal: a writable bank's storage is in the input section `.bss.hg_bank_<name>` (a name GCC
  makes NOBITS, so a megabyte bank costs no bytes in the object file), gathered by the linker
  script into the output section `.hg_bank_<name>` (NOLOAD) in the bank's MEMORY region. Weights in
  a read-only bank other than the code's are in `.hg_bank_<name>` (loaded with the image).
- A hosted root's banks have no sections: the arrays are ordinary static storage.
"""

from __future__ import annotations

from hetgen.platform.banks import bank_of
from hetgen.platform.baremetal import is_bare_metal


def output_section(name: str) -> str:
    return f".hg_bank_{name}"


def ram_input_section(name: str) -> str:
    return f".bss.hg_bank_{name}"


def spill_banks(program, prefix: str) -> list[dict]:
    """The static arrays of a banked root's spill banks (none for any other program)."""
    bare = is_bare_metal(program.target)
    found = []
    for arena in program.banks[1:]:
        if not arena.size:
            continue
        section = f', section("{ram_input_section(arena.bank.name)}")' if bare else ""
        buffers = [
            {"name": name, "offset": offset - arena.base, "nbytes": nbytes}
            for name, offset, nbytes in program.memory.buffers
            if arena.base <= offset < arena.end
        ]
        found.append(
            {
                "name": arena.bank.name,
                "symbol": f"{prefix}_bank_{arena.bank.name}",
                "base": arena.base,
                "end": arena.end,
                "size": arena.size,
                "attributes": f"aligned(64){section}",
                "buffers": buffers,
            }
        )
    return found


def workspace_attributes(program) -> str:
    """The static workspace's attributes: in the first arena bank's section on a banked bare-metal root."""
    if not program.banks or not is_bare_metal(program.target):
        return "aligned(64)"
    return f'aligned(64), section("{ram_input_section(program.banks[0].bank.name)}")'


def weights_section(program) -> str:
    """The weights' section: .rodata (the code's bank), or their own bank's where that differs."""
    if not program.banks or not is_bare_metal(program.target):
        return ".rodata"
    weights, code = bank_of(program.target.memories, "weights"), bank_of(program.target.memories, "code")
    return ".rodata" if weights is None or weights == code else output_section(weights.name)
