"""Placement for concurrency: the exact search minimises the serial sum of group and copy times (a
proxy: it cannot see that work on two devices overlaps), so its choice is refined by the makespan
the placement is priced at (hetgen/partition/timeline.py): a hill climb that moves one group at a
time to another target that runs exactly its operators, and keeps a move when the makespan drops.

The climb is bounded by a number of makespan evaluations proportional to 1 / groups (each
evaluation schedules the whole program), so it is deterministic and its work stays linear in the
graph; graphs of over 1,000 groups get none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hetgen.partition.assemble import chosen_makespan
from hetgen.partition.space import Candidate, SearchSpace

EVALUATION_BUDGET = 20_000  # makespan evaluations x groups: about 400 moves tried on a ResNet-18
EPSILON_US = 1e-6
MIN_EVALUATIONS = 20  # below this (over 1,000 groups) no climb at all


def improve_makespan(
    space: SearchSpace, candidates: tuple[Candidate, ...], chosen: Sequence[int]
) -> tuple[list[int], float, float]:
    """(the improved choice, its makespan, the makespan it started from)."""
    chosen = list(chosen)
    evaluations = EVALUATION_BUDGET // max(len(chosen), 1)
    if evaluations < MIN_EVALUATIONS:  # too big a graph for the climb to try its heavy groups
        return chosen, 0.0, 0.0
    start = chosen_makespan(space, candidates, chosen)
    chosen, best = climb(
        candidates,
        chosen,
        start,
        lambda trial: chosen_makespan(space, candidates, trial),
        lambda a, b: a < b - EPSILON_US,
        evaluations,
    )
    return chosen, best, start


def climb(
    candidates: tuple[Candidate, ...],
    chosen: Sequence[int],
    score: Any,
    score_of: Callable[[list[int]], Any],
    better: Callable[[Any, Any], bool],
    evaluations: int,
) -> tuple[list[int], Any]:
    """A first-improvement climb over single moves (one group to another target), at most
    `evaluations` scores: (the choice it ends at, its score). `score` is `chosen`'s; `better(a, b)`
    says a beats b. The heaviest groups are tried first (moving them changes the most), each
    group's alternatives cheapest first."""
    chosen = list(chosen)
    by_nodes: dict[tuple[int, ...], list[Candidate]] = {}
    for c in candidates:
        by_nodes.setdefault(c.nodes, []).append(c)
    by_id = {c.id: c for c in candidates}
    improved = True
    while improved and evaluations > 0:
        improved = False
        for cid in sorted(chosen, key=lambda i: (-by_id[i].compute_us, i)):
            if cid not in chosen:
                continue
            here = by_id[cid]
            for other in sorted(by_nodes[here.nodes], key=lambda c: (c.compute_us, c.id)):
                if other.id == cid or other.loc == here.loc or evaluations <= 0:
                    continue
                evaluations -= 1
                trial = [other.id if i == cid else i for i in chosen]
                trial_score = score_of(trial)
                if better(trial_score, score):
                    chosen, score, improved = trial, trial_score, True
                    break
    return chosen, score
