"""Workspace sizing and generate-time packing for `hg_sgemm_ex` (templates/runtime/hg_gemm.c).

The panel and split constants are hetgen/abi.py's, which the C runtime reads from the generated
hg_constants.h (`HG_SGEMM_*`); the cache blocks are hg_kernels.h's defaults or hg_gemm_config.h's. Every kernel that calls the
GEMM checks its workspace against the C macro with a `_Static_assert`, so a mismatch fails the
build instead of overrunning memory.

A constant operand (a convolution's or matrix product's weights) is packed here, once, into the
panels every ISA's micro-kernel reads (hg_sgemm_tile.h), so no run does it again: A as panels of
PANEL_M rows stored column after column, B as panels of PANEL_N columns stored row after row,
zero-padded, each panel spanning all of k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetgen.abi import GEMM_PANEL_M, GEMM_PANEL_N, GEMM_PART_MIN, GEMM_PARTS_PER_THREAD, GEMM_SPLIT_MACS
from hetgen.ir import DType
from hetgen.ops._common import literal

PANEL_M, PANEL_N = GEMM_PANEL_M, GEMM_PANEL_N
HELPER = "hg_gemm.c"


@dataclass(frozen=True)
class GemmBlocks:
    """The GEMM's cache blocks: A blocks of mc x kc (L2), B blocks of kc x nc (L3), per platform.

    The defaults suit a core with 1-2 MiB of L2; `hetgen tune` measures better ones for the machine
    at hand and writes them as `options: {tuning: {mc, kc, nc}}`, which the generated
    runtime/hg_gemm_config.h and every kernel's workspace (`pack_bytes`) then follow."""

    mc: int = 128
    kc: int = 256
    nc: int = 1024

    def problems(self) -> list[str]:
        """What makes these blocks unusable, as (key, what is wrong) lines; empty when they are fine."""
        wrong = []
        for key, value, multiple, low, high in (
            ("mc", self.mc, PANEL_M, PANEL_M, MAX_BLOCK["mc"]),
            ("kc", self.kc, 1, 8, MAX_BLOCK["kc"]),
            ("nc", self.nc, PANEL_N, PANEL_N, MAX_BLOCK["nc"]),
        ):
            if not low <= value <= high or value % multiple:
                wrong.append(f"'{key}' must be a multiple of {multiple} from {low} to {high}, not {value}")
        return wrong


# Past these a block no longer fits any cache level it is meant for, and the workspace grows for nothing.
MAX_BLOCK = {"mc": 1024, "kc": 2048, "nc": 8192}
DEFAULT_BLOCKS = GemmBlocks()


def pack_bytes(
    m: int, n: int, k: int, blocks: GemmBlocks = DEFAULT_BLOCKS, a_packed: bool = False, b_packed: bool = False
) -> int:
    """Bytes of packing workspace hg_sgemm needs for an m x n x k product (64-byte aligned), with
    the cache blocks the generated runtime/hg_gemm_config.h gives HG_SGEMM_MC/KC/NC; an operand
    packed at generate time needs no buffer (HG_SGEMM_PACK_BYTES_FOR)."""
    kc = min(k, blocks.kc)
    a_floats = 0 if a_packed else (min(m, blocks.mc) + PANEL_M) * kc
    b_floats = 0 if b_packed else (min(n, blocks.nc) + PANEL_N) * kc
    floats = a_floats + b_floats
    return align(4 * floats + 128)


# A layer's own blocks (smaller_blocks) go no lower: nc one B panel, the micro-kernel's width; kc
# enough rows that each tile's loads and stores of C stay a small part of its multiply-adds.
KC_FLOOR = 64


def smaller_blocks(blocks: GemmBlocks) -> list[GemmBlocks]:
    """Blocks that need less workspace than `blocks`: nc halved (in whole B panels) down to one
    panel and kc halved down to KC_FLOOR, in every combination, the largest kc x nc first.
    hetgen/lower/prepack.py gives a layer the one whose workspace is the largest within its cap: a
    smaller block costs a pass over C per kc rows and a re-read of the A panels (from cache) per
    nc columns, so the largest block that fits costs least."""
    ncs, kcs = [blocks.nc], [blocks.kc]
    while ncs[-1] > PANEL_N:
        ncs.append(max(PANEL_N, ncs[-1] // 2 // PANEL_N * PANEL_N))
    while kcs[-1] > KC_FLOOR:
        kcs.append(max(KC_FLOOR, kcs[-1] // 2))
    found = [GemmBlocks(blocks.mc, kc, nc) for kc in kcs for nc in ncs if (kc, nc) != (blocks.kc, blocks.nc)]
    return sorted(found, key=lambda b: (-b.kc * b.nc, -b.kc))


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


# hg_sgemm_ex (templates/runtime/hg_gemm.c) splits a product of at least this many multiply-adds
# between the pool's threads (HG_SGEMM_SPLIT_MACS of the generated hg_constants.h).
SPLIT_MACS = GEMM_SPLIT_MACS
PARTS_PER_THREAD = GEMM_PARTS_PER_THREAD
PART_MIN = GEMM_PART_MIN


def gemm_parallelism(m: int, n: int, k: int, threads: int, a_packed: bool = False, b_packed: bool = False) -> float:
    """How many threads' worth of speed one m x n x k hg_sgemm_ex call gets from a pool of
    `threads`: hg_gemm.c's own rule. Below SPLIT_MACS, or with fewer panels on the split side than
    threads, it runs on the caller (1). Else it cuts the side whose repeated work is smaller (the
    unsplit operand is read, and packed unless it came packed, by every part: packing counts as
    three reads) into parts of whole panels (PANEL_M rows or PANEL_N columns): a whole number per
    thread, up to PARTS_PER_THREAD, each of at least PART_MIN rows or columns per read of the
    repeated operand. The threads take the parts in turn; the busiest one's panels set the time.
    The small-m path (m <= PANEL_M) cuts its columns the same way."""
    if threads <= 1 or m * n * k < SPLIT_MACS:
        return 1.0
    row_panels, col_panels = -(-m // PANEL_M), -(-n // PANEL_N)
    repeat_by_cols = m * (1 if a_packed else 3)
    repeat_by_rows = n * (1 if b_packed else 3)
    split_rows = col_panels < threads or (row_panels >= threads and repeat_by_rows < repeat_by_cols)
    panels = row_panels if split_rows else col_panels
    if panels < threads:
        return 1.0
    reads = 1 if (b_packed if split_rows else a_packed) else 3
    per_thread = min(PARTS_PER_THREAD, max(1, (m if split_rows else n) // (PART_MIN * reads * threads)))
    parts = min(panels, per_thread * threads)
    # part p holds panels [p * panels // parts, (p + 1) * panels // parts), as sgemm_part cuts them
    sizes = [(p + 1) * panels // parts - p * panels // parts for p in range(parts)]
    return panels / max(sum(sizes[t::threads]) for t in range(threads))


# hg_sgemm_finish's clamps (hg_kernels.h), by the fused activation they compute bit for bit.
FINISH_CLAMPS = {"Relu": "HG_SGEMM_CLAMP_RELU", "Clip": "HG_SGEMM_CLAMP_CLIP"}


def finish(epilogue) -> dict | None:
    """The view of an `hg_sgemm_finish` that applies a GEMM's bias, residual and fused `epilogue`
    (a tuple of `_activation.Epilogue`) in the micro-kernel's registers: None where the activation
    is none the micro-kernel computes (then the C epilogue does it all, on every ISA). No activation,
    one Relu or one Clip (its bounds as float literals, infinities included)."""
    if len(epilogue) > 1 or any(e.kind not in FINISH_CLAMPS for e in epilogue):
        return None
    if not epilogue:
        return {"clamp": "HG_SGEMM_CLAMP_NONE", "lo": "0.0f", "hi": "0.0f"}
    (e,) = epilogue
    lo, hi = (e.alpha, e.beta) if e.kind == "Clip" else (0.0, 0.0)
    return {"clamp": FINISH_CLAMPS[e.kind], "lo": literal(lo, DType.FLOAT32), "hi": literal(hi, DType.FLOAT32)}
