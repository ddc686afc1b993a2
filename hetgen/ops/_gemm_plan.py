"""Workspace sizing and generate-time packing for `hg_sgemm_ex` (templates/runtime/hg_gemm.c).

The constants mirror `HG_SGEMM_*` in templates/runtime/hg_kernels.h; every kernel that calls the
GEMM checks its workspace against the C macro with a `_Static_assert`, so a mismatch fails the
build instead of overrunning memory.

A constant operand (a convolution's or matrix product's weights) is packed here, once, into the
panels every ISA's micro-kernel reads (hg_sgemm_tile.h), so no run does it again: A as panels of
PANEL_M rows stored column after column, B as panels of PANEL_N columns stored row after row,
zero-padded, each panel spanning all of k.
"""

from __future__ import annotations

import numpy as np

PANEL_M, PANEL_N = 8, 32
MC, KC, NC = 128, 256, 1024
HELPER = "hg_gemm.c"


def pack_bytes(m: int, n: int, k: int) -> int:
    """Bytes of packing workspace hg_sgemm needs for an m x n x k product (64-byte aligned)."""
    kc = min(k, KC)
    floats = (min(m, MC) + PANEL_M) * kc + (min(n, NC) + PANEL_N) * kc
    return align(4 * floats + 128)


def align(size: int, to: int = 64) -> int:
    return (size + to - 1) // to * to


def a_panels(a: np.ndarray) -> np.ndarray:
    """A [m x k] (float32) as ceil(m / PANEL_M) panels: panel[t][p][i] = A[t * PANEL_M + i][p]."""
    m, k = a.shape
    rows = align(m, PANEL_M)
    padded = np.zeros((rows, k), np.float32)
    padded[:m] = a
    return np.ascontiguousarray(padded.reshape(rows // PANEL_M, PANEL_M, k).transpose(0, 2, 1)).reshape(-1)


def b_panels(b: np.ndarray) -> np.ndarray:
    """B [k x n] (float32) as ceil(n / PANEL_N) panels: panel[t][p][j] = B[p][t * PANEL_N + j]."""
    k, n = b.shape
    cols = align(n, PANEL_N)
    padded = np.zeros((k, cols), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, cols // PANEL_N, PANEL_N).transpose(1, 0, 2)).reshape(-1)


def a_panel_floats(m: int, k: int) -> int:
    """Floats of one A [m x k] packed whole."""
    return align(m, PANEL_M) * k
