"""Workspace sizing for `hg_sgemm` (templates/runtime/hg_gemm.c).

The blocking constants mirror `HG_SGEMM_*` in templates/runtime/hg_kernels.h; every kernel that
calls hg_sgemm checks its workspace against the C macro with a `_Static_assert`, so a mismatch
fails the build instead of overrunning memory.
"""

from __future__ import annotations

MC, KC, NC = 144, 256, 2048
MAX_MR, MAX_NR = 16, 32
HELPER = "hg_gemm.c"


def pack_bytes(m: int, n: int, k: int) -> int:
    """Bytes of packing workspace hg_sgemm needs for an m x n x k product (64-byte aligned)."""
    kc = min(k, KC)
    floats = (min(m, MC) + MAX_MR) * kc + (min(n, NC) + MAX_MR + MAX_NR) * kc
    return align(4 * floats + 128)


def align(size: int, to: int = 64) -> int:
    return (size + to - 1) // to * to
