"""The vector register file a CPU kernel's register blocking is sized for (`VectorRegisters`).

A direct kernel written as plain C loops over small arrays of accumulators (templates/kernels/
conv_small.c.j2) gets them in registers only where the compiler can map them onto the register
file it builds for; past it, every multiply-add reloads and stores its accumulator. So a kernel whose
blocking depends on the register file plans once per file (`FILES`), and each plan is taken only
on the CPUs that have that file (hetgen/platform/registers.py says which, from the target's kind).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VectorRegisters:
    """A CPU's float registers as a C compiler vectorizes for them: `count` registers of `lanes` floats."""

    name: str
    lanes: int
    count: int
    # an FMA reads its broadcast weight from memory (AVX-512's embedded broadcast, {1to16}):
    # a kernel's broadcast weights cost it no instructions of their own
    broadcast_fma: bool = False


# x86-64 cores: AVX-512's 32 zmm of 16 floats (hetgen's x86 choice, which AVX2 builds run as pairs of ymm)
AVX512 = VectorRegisters("avx512", lanes=16, count=32, broadcast_fma=True)
# AArch64 cores: NEON's 32 q registers of 4 floats
NEON = VectorRegisters("neon", lanes=4, count=32)
# cores whose C kernels are scalar (rv64gc, RISC-V's F/D: 32 float registers)
SCALAR = VectorRegisters("scalar", lanes=1, count=32)
FILES = (AVX512, NEON, SCALAR)
