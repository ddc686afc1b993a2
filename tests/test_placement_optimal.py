""" "exact" means the least makespan (hetgen/partition/optimal.py): brute force over every placement
of small random graphs, each priced at its makespan, agrees with every placement that claims it;
where none is claimed, the printed gap is measured against a bound no placement beats."""

from __future__ import annotations

import random

import pytest

from hetgen.partition import place
from hetgen.partition.assemble import chosen_makespan
from hetgen.partition.cost import Calibration
from hetgen.partition.explain import explain_text
from hetgen.partition.optimal import EXHAUSTIVE_PLACEMENTS
from hetgen.partition.space import SearchSpace
from hetgen.spec import build_kernel_specs
from partition_fixtures import conv_relu_net, random_dag, random_platform, soc


class _TooMany(Exception):
    pass


def every_makespan(graph, platform, limit: int | None = None) -> list[float] | None:
    """The makespan of every placement: each way the candidate groups cover the nodes, priced as
    `assemble` prices a placement (shared with the search: the candidates and the timeline). None
    when there are more than `limit` placements: they are counted before any is priced, and the
    count stops there (pricing them is most of the brute force's time)."""
    space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
    starts: dict[int, list] = {}
    for c in space.candidates:
        starts.setdefault(c.nodes[0], []).append(c)
    covers = []

    def cover(covered: frozenset, chosen: list) -> None:
        free = next((i for i in range(len(graph.nodes)) if i not in covered), None)
        if free is None:
            covers.append(chosen)
            if limit is not None and len(covers) > limit:
                raise _TooMany
            return
        for c in starts.get(free, ()):
            if covered.isdisjoint(c.nodes):
                cover(covered | set(c.nodes), [*chosen, c])

    try:
        cover(frozenset(), [])
    except _TooMany:
        return None
    return [chosen_makespan(space, tuple(space.candidates), [c.id for c in chosen]) for chosen in covers]


@pytest.mark.parametrize("block", range(2))
def test_exact_is_the_least_makespan_and_the_bound_holds(block):
    claimed = unclaimed = 0
    for seed in range(block * 100, block * 100 + 100):
        rng = random.Random(seed)
        graph, platform = random_dag(rng, rng.randint(2, 8)), random_platform(rng)
        makespans = every_makespan(graph, platform, limit=400)
        if makespans is None:  # more than 400 placements: keep the brute force fast
            continue
        best = min(makespans)
        placement = place(graph, platform)
        assert placement.bound_us <= best * (1 + 1e-9), f"seed {seed}: the bound is above the optimum"
        assert placement.searched_us >= best * (1 - 1e-9), f"seed {seed}: faster than every placement"
        text = explain_text(placement, graph)
        if placement.optimal:
            claimed += 1
            assert placement.searched_us == pytest.approx(best, rel=1e-9), f"seed {seed}: 'exact' but not least"
            assert "(cost mode, exact" in text
        else:
            unclaimed += 1
            assert placement.gap > 0 and "exact" not in text.split(")")[0]
            assert f"within {placement.gap:.1%} of the lower bound" in text
        if len(makespans) <= EXHAUSTIVE_PLACEMENTS:  # every placement was priced
            assert placement.optimal, f"seed {seed}"
    assert claimed >= 50  # most small graphs are proven
    if block == 1:  # seed 147 is not (the search misses the optimum): the gap is printed instead
        assert unclaimed >= 1


def test_a_strict_chain_is_exact_by_its_serial_sum():
    """Nothing in a chain can run at once, so the search's serial optimum is the makespan's."""
    graph = conv_relu_net(12)
    placement = place(graph, soc())
    assert placement.optimal and placement.gap == 0.0
