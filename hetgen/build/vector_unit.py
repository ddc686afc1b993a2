"""The vector unit a controller's kind declares (`vector:`), made to take effect in the board build.

The micro-kernels (templates/runtime/hg_sgemm_tile.h) pick their ISA from the compiler's own macros,
so what a target receives is decided by its flags alone. This module turns the kind's attribute into
those flags and refuses flags that contradict it, so a core declared without a vector unit never
receives a vector instruction, and one declared with it gets the kernels that use it:

- riscv64 `vector: rvv`: V is added to the single-letter extensions of `-march` (rv64gc -> rv64gcv;
  the compiler then defines `__riscv_v`), and qemu-riscv64 is given `-cpu rv64,v=true,vext_spec=v1.0,vlen=N`
  unless the platform's emulator already names a CPU.
- riscv64 `vector: none`: an `-march` in the platform's flags that enables V (or a Zve subset) is
  refused, naming the target and the flag.

Cortex-M needs nothing here: its kind's `-mcpu` is its vector unit (cortex-m55 has Helium, M4 and M7
have the DSP extension only), and the kernels follow the compiler's `__ARM_FEATURE_MVE`.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from hetgen.errors import HetgenError
from hetgen.platform.model import Target

# A RISC-V ISA string: base, single-letter extensions, then `_`-separated multi-letter ones.
_MARCH = re.compile(r"-march=(rv(?:32|64))([a-z]*)((?:_[a-z0-9]+)*)\Z")
# Single-letter extensions in the canonical order compilers require; V goes before any that follow it.
_CANONICAL = "iemafdgqlcbkjtpvnh"
_VECTOR_SUBSET = re.compile(r"_zve\d+[xfd]\b")


def vector_cflags(target: Target, cflags: tuple[str, ...]) -> tuple[str, ...]:
    """`cflags` with the target's vector unit enabled (or checked absent) in its `-march`."""
    vector = target.attrs.get("vector")
    if vector is None or not target.toolchain.triple.startswith("riscv"):
        return cflags
    marches = [i for i, flag in enumerate(cflags) if flag.startswith("-march=")]
    if not marches:  # the compiler's default ISA (rv64gc for Debian's riscv64-linux-gnu-gcc)
        return (*cflags, "-march=rv64gcv") if vector == "rvv" else cflags
    last = marches[-1]  # the one the compiler obeys
    match = _MARCH.match(cflags[last])
    if match is None:
        raise HetgenError(
            f"{target.source.file}: target {target.path_str} (kind {target.kind.name}, vector: {vector}) has "
            f"'{cflags[last]}' in its cflags, which is not a RISC-V ISA string such as -march=rv64gc; "
            "write the base (rv64), the single-letter extensions, then _-separated ones"
        )
    base, singles, multi = match.groups()
    has_vector = "v" in singles or _VECTOR_SUBSET.search(multi) is not None
    if vector == "none":
        if has_vector:
            raise HetgenError(
                f"{target.source.file}: target {target.path_str} (kind {target.kind.name}) declares vector: none "
                f"but its cflags' '{cflags[last]}' enables the vector extension; set vector: rvv on the target, "
                "or drop V from -march"
            )
        return cflags
    if "v" in singles:
        return cflags
    after = [i for i, letter in enumerate(singles) if _CANONICAL.find(letter) > _CANONICAL.index("v")]
    at = after[0] if after else len(singles)
    march = f"-march={base}{singles[:at]}v{singles[at:]}{multi}"
    return (*cflags[:last], march, *cflags[last + 1 :])


def vector_emulator(target: Target, emulator: tuple[str, ...]) -> tuple[str, ...]:
    """The emulator command with the target's vector unit switched on (qemu-user has none by default)."""
    if target.attrs.get("vector") != "rvv" or not emulator or "-cpu" in emulator:
        return emulator
    if PurePath(emulator[0]).name != "qemu-riscv64":
        return emulator
    cpu = f"rv64,v=true,vext_spec=v1.0,vlen={int(target.attrs.get('vlen_bits', 128))},elen=64"
    return (emulator[0], "-cpu", cpu, *emulator[1:])
