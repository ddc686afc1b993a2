"""Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions with constant weights.

Each 2x2 block of output needs 16 multiplications per (input, output) channel pair instead of 36:
the input is transformed tile by tile (V = B^T d B over 4x4 input tiles), the weights once, here
(U = G g G^T), then 16 GEMMs U[xi] [cout x cin] x V[xi] [cin x tiles] run on the micro-kernels,
and the output transform (Y = A^T M A) applies bias and activation. The transforms cost about
16 additions per tile and channel, so it pays only with enough channels on both sides to amortise
them (MIN_CHANNELS, measured); smaller layers keep the implicit GEMM. F(2x2, 3x3)'s constants are
0, +-1 and 1/2, so it stays within float32 rounding of the direct sum (well inside 1e-4).
"""

from __future__ import annotations

import numpy as np

from hetgen.ops import _gemm_plan, _parallel

# Winograd pays from this many input and output channels: measured on Zen 4 (one thread) against
# the implicit GEMM, 16 -> 16 channels at 32x32 took 0.55x the time, 64 -> 64 at 32x32 0.5x,
# 256 -> 256 at 14x14 0.5x; the stem (3 input channels) has too little work per transform.
MIN_CHANNELS = 16
# ... and from this many output tiles: with fewer, the transformed weights (16/9 of the model's)
# are read for too little work (512 -> 512 channels at 4x4 output: 1.8x slower than the GEMM).
MIN_TILES = 16
# V and M of the rows of tiles transformed and multiplied at a time: a couple of L2s, so they are
# re-read from cache rather than memory, and the workspace stays small on large images.
CHUNK_BYTES = 2 * 1024 * 1024
# Additions per 4x4 tile and channel of each transform: V = B^T d B (two passes of 16) on every input
# channel, Y = A^T M A (16 for A^T M, 16 with the bias for the 2x2 outputs) on every output channel.
TRANSFORM_FLOPS = 32
# The products of one chunk: one per position of the 4x4 tile.
PRODUCTS = 16
# Where rows of tiles are the pool's tasks (`tile_tasks`): about this many tiles a task, the GEMMs'
# n, four of the micro-kernel's 32-column panels, so a task's 16 products run whole panels; and no
# fewer than one panel, below which part of every product's panel is padding.
TASK_TILES = 128
MIN_TASK_TILES = _gemm_plan.PANEL_N
TRANSFORM_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)


def eligible(win, groups: int, cin: int, cout: int) -> bool:
    """A 2-D 3x3 convolution with unit strides and dilations, one group, enough channels."""
    return (
        win.kernel == (1, 3, 3)
        and win.in_shape[0] == 1
        and set(win.strides) == {1}
        and set(win.dilations) == {1}
        and groups == 1
        and min(cin, cout) >= MIN_CHANNELS
        and -(-win.out_shape[1] // 2) * -(-win.out_shape[2] // 2) >= MIN_TILES
    )


def plan(
    win, batch: int, cin: int, cout: int, blocks: _gemm_plan.GemmBlocks = _gemm_plan.DEFAULT_BLOCKS
) -> tuple[dict, int]:
    """(template parameters, scratch bytes): tile counts, how many rows of tiles go through the
    transforms and GEMMs at a time (within CHUNK_BYTES and one nc block of tiles, at least one
    row; where rows of tiles are the pool's tasks, one task's rows), and the offsets of V, M and the
    GEMM's workspace in scratch (a task's own, in its thread's scratch)."""
    tiles_h, tiles_w = -(-win.out_shape[1] // 2), -(-win.out_shape[2] // 2)
    row_bytes = 4 * 16 * (cin + cout) * tiles_w  # V and M of one row of tiles
    # at most one nc block of tiles, so a layer's smaller blocks shrink V and M too (prepack.py)
    chunk_rows = max(1, min(tiles_h, CHUNK_BYTES // row_bytes, blocks.nc // tiles_w))
    tasks = tile_tasks(batch, tiles_h, tiles_w, cin, cout, blocks)
    if tasks is not None:
        chunk_rows = -(-tiles_h // (tasks // batch))  # a task's rows of tiles: one chunk
    tiles = chunk_rows * tiles_w  # the GEMMs' n
    v_bytes, m_bytes, pack = chunk_bytes(cin, cout, tiles, blocks)
    params = {
        **(dict.fromkeys(("input_split", "product_split", "output_split")) if tasks else splits(cin, cout, tiles)),
        "tile_tasks": tasks or 0,
        "tasks_per_image": tasks // batch if tasks else 0,
        "w_packed": True,
        "tiles_h": tiles_h,
        "tiles_w": tiles_w,
        "chunk_rows": chunk_rows,
        "tiles": tiles,
        "v_offset": 0,
        "m_offset": v_bytes,
        "wino_pack_offset": v_bytes + m_bytes,
        "wino_pack_bytes": pack,
        "wino_task_bytes": v_bytes + m_bytes + pack,
        "u_block_floats": _gemm_plan.a_panel_floats(cout, cin),
        "padded_cols": 2 * tiles_w + 2,  # a row of tiles' input columns, with a zero on each side
        "out_cols": 2 * tiles_w,
        "v_stride": cin * tiles,  # V[xi]: cin rows of `tiles`
        "m_stride": cout * tiles,  # M[xi]: cout rows of `tiles`
        "image_floats": cin * win.in_size,
        "out_image_floats": cout * win.out_size,
    }
    return params, v_bytes + m_bytes + pack


def chunk_bytes(cin: int, cout: int, tiles: int, blocks: _gemm_plan.GemmBlocks) -> tuple[int, int, int]:
    """V's, M's and the GEMM's workspace bytes for a chunk of `tiles` tiles."""
    v_bytes = _gemm_plan.align(4 * 16 * cin * tiles)
    m_bytes = _gemm_plan.align(4 * 16 * cout * tiles)
    return v_bytes, m_bytes, _gemm_plan.pack_bytes(cout, tiles, cin, blocks, a_packed=True)


def tile_tasks(
    batch: int, tiles_h: int, tiles_w: int, cin: int, cout: int, blocks: _gemm_plan.GemmBlocks
) -> int | None:
    """The pool's tasks where each owns a range of rows of tiles of one image and runs all three
    steps on them (input transform, 16 products, output transform) in its thread's scratch, or
    None: the steps are then shared one by one (`splits`). A thread then reads only the V and M it
    wrote itself; split step by step, each step read what the other thread's step wrote (SqueezeNet's
    conv_9 in the far state: the tasks' busy time 4.2x the 1-thread kernel's). About TASK_TILES tiles
    a task, at least two tasks an image and MIN_TASK_TILES tiles a task, V, M and the products'
    workspace within a worker's scratch (hg_threads.h: one full GEMM block's packing), and a
    product hg_gemm.c would have split (SPLIT_MACS), as the implicit GEMM's bands (conv.band_tasks)."""
    if 16 * cout * cin * tiles_h * tiles_w < _gemm_plan.SPLIT_MACS:
        return None
    per_image = min(_parallel.MAX_TASKS, tiles_h, max(2, tiles_h * tiles_w // TASK_TILES))
    rows = -(-tiles_h // per_image)
    thread_scratch = _gemm_plan.pack_bytes(blocks.mc, blocks.nc, blocks.kc, blocks)
    while rows > 1 and sum(chunk_bytes(cin, cout, rows * tiles_w, blocks)) > thread_scratch:
        rows -= 1
    per_image = -(-tiles_h // rows)
    even = rows
    while -(-tiles_h // even) % 2 and (even - 1) * tiles_w >= MIN_TASK_TILES:
        even -= 1  # an even count where tasks stay large enough: two threads' shares then differ by a row at most
    per_image = -(-tiles_h // even)
    rows = -(-tiles_h // per_image)  # tasks of equal rows, the last at most one short
    fits = sum(chunk_bytes(cin, cout, rows * tiles_w, blocks)) <= thread_scratch
    if per_image < 2 or rows * tiles_w < MIN_TASK_TILES or not fits:
        return None
    return batch * per_image


def splits(cin: int, cout: int, tiles: int) -> dict:
    """How each step of a chunk is cut into the worker pool's tasks (None: serial): the input
    transform by input channels, the 16 products one or more to a task (each a whole GEMM on the
    thread that runs it, in that thread's scratch), the output transform by output channels. The
    chunk's GEMMs are too small for hg_gemm.c to split on their own (squeezenet's 16 -> 32 channels:
    32 x 252 x 16 each), and its transforms are a quarter of the layer; every element is computed
    by the same code whichever task holds it, so any thread count gives the same bits."""
    return {
        "input_split": _parallel.split(cin, TRANSFORM_FLOPS * tiles),
        "product_split": _parallel.split(PRODUCTS, 2 * cout * cin * tiles),
        "output_split": _parallel.split(cout, TRANSFORM_FLOPS * tiles),
    }


def weight_panels(w: np.ndarray) -> np.ndarray:
    """U[xi] = (G g G^T)[xi] for each 4x4 position xi, as 16 blocks of the GEMM's A panels."""
    g = w.astype(np.float64)  # [cout, cin, 3, 3]
    u = np.einsum("pa,ocab,qb->pqoc", TRANSFORM_G, g, TRANSFORM_G)  # [4, 4, cout, cin]
    blocks = u.reshape(16, w.shape[0], w.shape[1]).astype(np.float32)
    return np.concatenate([_gemm_plan.a_panels(block) for block in blocks])
