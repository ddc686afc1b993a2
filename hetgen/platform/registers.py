"""Which vector register file (hetgen/ops/registers.py) a CPU controller's C kernels are built for.

From the target's toolchain, as the build sees it: an x86-64 triple (or the machine running hetgen,
for a kind built by this machine's compiler, on an x86-64 host) gets AVX-512's file, an AArch64
one NEON's, every other core the scalar float registers: riscv64 with `vector: rvv` too, since the
toolchain's GCC 12 does not auto-vectorize plain C loops for RVV 1.0 (only the hand-written
micro-kernels use it).
"""

from __future__ import annotations

import platform as host_platform

from hetgen.ops.registers import AVX512, NEON, SCALAR, VectorRegisters
from hetgen.platform.model import Target


def vector_registers(target: Target) -> VectorRegisters:
    """The register file `target`'s C kernels are blocked for (module doc)."""
    triple = target.toolchain.triple or host_platform.machine().lower()
    if triple.startswith(("x86_64", "amd64")):
        return AVX512
    if triple.startswith(("aarch64", "arm64")):
        return NEON
    return SCALAR
