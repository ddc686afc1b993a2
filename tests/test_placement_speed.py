"""The shortcuts that keep placement fast must not change a placement: the dominance pass prices a
class of states pair by pair or in arrays with the same floats (numpy's summation order), and the
schedule the price is timed on (`timing_only`) has exactly the steps lowering's schedule has."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hetgen.lower.schedule import SCall, SLoadWeight
from hetgen.partition import exact, place
from hetgen.partition.cost import calibrate
from hetgen.partition.exact import ExactSearch, pairwise_sum
from hetgen.partition.pins import restrict
from hetgen.partition.space import SearchSpace
from hetgen.partition.timeline import placement_schedule
from hetgen.platform.model import Link
from partition_fixtures import flat, residual_net, soc, wide_dag, wide_random_dag


def _rows(rng: random.Random, count: int, size: int) -> np.ndarray:
    density = rng.random()
    return np.array(
        [
            [rng.random() * 10 ** rng.randint(-6, 6) * (rng.random() < density) for _ in range(size)]
            for _ in range(count)
        ]
    )


def test_pairwise_sum_adds_in_numpys_order():
    rng = random.Random(7)
    naive_differs = False
    for _ in range(400):
        size = rng.choice((rng.randint(1, 24), rng.randint(100, 600)))
        rows = _rows(rng, 4, size)
        expected = np.maximum(rows[0] - rows[1:], 0.0).sum(axis=1).tolist()
        for other, want in zip(rows[1:].tolist(), expected):
            terms = [(k, a - b) for k, (a, b) in enumerate(zip(rows[0].tolist(), other)) if a - b > 0.0]
            assert pairwise_sum(terms, 0, size) == want  # the same float, not merely close
            naive_differs |= sum(value for _, value in terms) != want
    assert naive_differs  # the order matters for these rows: a plain sum would not pass


def _search(space, candidates, monkeypatch, pairwise_class: int):
    monkeypatch.setattr(exact, "PAIRWISE_CLASS", pairwise_class)
    dropped = []
    undominated = ExactSearch._undominated

    def counting(self, states):
        kept = undominated(self, states)
        dropped.append(len(states) - len(kept))
        return kept

    monkeypatch.setattr(ExactSearch, "_undominated", counting)
    search = ExactSearch(space, candidates)
    chosen, is_exact = search.run(1024)
    return chosen, is_exact, search.best_cost, search.expanded, sum(dropped)


@pytest.mark.parametrize(
    "graph", [wide_dag(300, 8), wide_random_dag(random.Random(3), 300, 16)], ids=["wide", "random"]
)
def test_dominance_keeps_the_same_states_pair_by_pair_and_in_arrays(graph, monkeypatch):
    space = SearchSpace(graph, soc(), calibrate({}))
    candidates = restrict(space, {})
    by_pairs = _search(space, candidates, monkeypatch, 1 << 30)
    in_arrays = _search(space, candidates, monkeypatch, 0)
    assert by_pairs == in_arrays
    assert by_pairs[-1] > 0  # dominance dropped states: the two ways were really compared


def _steps(entry) -> list:
    """A schedule entry as timing sees it: weight loads are inside the device's time."""
    return [
        SCall(step.unit, ()) if isinstance(step, SCall) else step for step in entry if not isinstance(step, SLoadWeight)
    ]


@pytest.mark.parametrize(
    "platform",
    [soc(), soc(npu_memory=None), flat(npu_link=Link(8.0, 10.0), npu_memory=256 * 1024)],
    ids=["soc-isolated-npu", "soc", "flat-isolated-npu"],
)
@pytest.mark.parametrize("mode", ["cost", "greedy"])
def test_timing_only_schedule_has_every_step_of_lowerings(platform, mode):
    for graph in (residual_net(12), wide_random_dag(random.Random(5), 120, 8)):
        groups = place(graph, platform, mode=mode).groups
        full, kept = placement_schedule(groups, graph, platform)
        timing, kept_too = placement_schedule(groups, graph, platform, timing_only=True)
        assert kept == kept_too
        assert timing.devices == full.devices
        assert timing.entries.keys() == full.entries.keys()
        for target, entries in full.entries.items():
            assert [_steps(entry) for entry in timing.entries[target]] == [_steps(entry) for entry in entries]
        assert len(full.entries) > 1 and full.events and not timing.events  # devices ran; only lowering plans memory
