"""Which cache blocks to measure, and how: one block size at a time (kc, then mc, then nc), each
chosen with the others held at the best so far, as BLIS-style tuners do: the three interact only
weakly (kc x 8 floats of A and kc x 32 of B share L1; mc x kc of A fills L2; kc x nc of B sits in
L3), so a few candidates each find what a full grid would, in a tenth of the runs.

The micro-tile (8 x 32, the panel layout every ISA's micro-kernel reads: hg_sgemm_tile.h) is not a
candidate: it is the contract between generate-time packing and the micro-kernels, fixed per ISA.

The score is the total time of a set of products shaped like the models' work: convolutions (A:
the weights as panels, B: activations packed at run time) and transformer matrix products (B: the
weights as panels).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from hetgen.ops._gemm_plan import DEFAULT_BLOCKS, GemmBlocks
from hetgen.tune.measure import GemmShape


@dataclass(frozen=True)
class Plan:
    """What a tune run measures: the candidates of each block size and the products that score them."""

    candidates: tuple[tuple[str, tuple[int, ...]], ...]
    shapes: tuple[GemmShape, ...]
    repeats: int  # runs of each product per score (the best counts)
    rounds: int = 1  # the candidates of one block size are scored round-robin this often (the best counts)


FULL = Plan(
    candidates=(("kc", (128, 192, 256, 384, 512)), ("mc", (64, 96, 128, 192, 256)), ("nc", (512, 1024, 2048, 4096))),
    shapes=(
        GemmShape(64, 3136, 576, a_packed=True),  # ResNet stage 1: 3x3, 64 -> 64 channels, 56 x 56
        GemmShape(256, 196, 2304, a_packed=True),  # ResNet stage 3: 3x3, 256 -> 256 channels, 14 x 14
        GemmShape(128, 1024, 256, a_packed=False),  # a transformer's FFN up-projection, 128 tokens
        GemmShape(128, 256, 1024, a_packed=False),  # ... and down-projection
    ),
    repeats=3,
    rounds=3,
)
# seconds, for tests: two candidates of kc, one product
QUICK = Plan(candidates=(("kc", (128, 256)),), shapes=(GemmShape(64, 512, 288, a_packed=True),), repeats=3)


@dataclass(frozen=True)
class Trial:
    blocks: GemmBlocks
    seconds: float


def search(plan: Plan, score: Callable[[GemmBlocks], float]) -> tuple[GemmBlocks, tuple[Trial, ...]]:
    """The best blocks `score` (seconds, lower is better) finds, and every trial in order. The
    candidates of one block size are scored in `plan.rounds` interleaved rounds, so a burst of load
    from another process slows one round of all of them rather than all rounds of one."""
    best = DEFAULT_BLOCKS
    trials: dict[GemmBlocks, float] = {}
    for key, values in plan.candidates:
        for _ in range(plan.rounds):
            for value in values:
                blocks = dataclasses.replace(best, **{key: value})
                trials[blocks] = min(trials.get(blocks, float("inf")), score(blocks))
        best = min((b for b in trials if _same_but(b, best, key)), key=lambda b: trials[b])
    return best, tuple(Trial(b, s) for b, s in trials.items())


def _same_but(blocks: GemmBlocks, best: GemmBlocks, key: str) -> bool:
    return all(getattr(blocks, k) == getattr(best, k) for k in ("mc", "kc", "nc") if k != key)
