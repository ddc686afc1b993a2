"""Operands for the C GEMM checks (tests/c/gemm_check.c): shared by test_gemm_kernels.py and
test_vector_isa.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hetgen.ops import _gemm_plan


def gemm_operands(tmp_path_factory, shapes, seed: int) -> dict[tuple[int, int, int], Path]:
    """Per shape (m, n, k), a folder of operands, Python-packed panels and numpy's product."""
    rng = np.random.default_rng(seed)
    folders = {}
    for m, n, k in shapes:
        folder = tmp_path_factory.mktemp(f"gemm_{m}x{n}x{k}")
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        a.tofile(folder / "a.bin")
        b.tofile(folder / "b.bin")
        _gemm_plan.a_panels(a).tofile(folder / "a_panels.bin")
        _gemm_plan.b_panels(b).tofile(folder / "b_panels.bin")
        (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32).tofile(folder / "c.bin")
        folders[(m, n, k)] = folder
    return folders
