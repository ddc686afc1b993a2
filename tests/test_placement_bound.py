"""The placement bound (hetgen/partition/bound.py) is a true lower bound: no placement the search
returns is faster, and on a case that can be worked by hand it is the exact figure."""

from __future__ import annotations

import math
import random
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from hetgen.frontend import import_model
from hetgen.partition import place
from hetgen.partition.assemble import chosen_makespan
from hetgen.partition.bound import critical_path_bound, makespan_bound, placement_bound
from hetgen.partition.cost import Calibration
from hetgen.partition.search import search_greedy
from hetgen.partition.space import SearchSpace
from hetgen.platform import load_platform_text
from hetgen.spec import build_kernel_specs
from partition_fixtures import conv_relu_net, random_dag, random_platform, residual_net, soc, transformer
from tests.test_baremetal import COMPOSITE

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("seed", range(12))
def test_no_searched_placement_beats_the_bound(seed):
    rng = random.Random(seed)
    graph, platform = random_dag(rng, rng.randint(6, 14)), random_platform(rng)
    space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
    searched = place(graph, platform)
    floor = placement_bound(space)
    assert floor <= searched.searched_us * (1 + 1e-9)  # at the search's prices: kernel choices come after
    assert floor > 0


@pytest.mark.parametrize(
    "graph", [conv_relu_net(4), residual_net(3), transformer(1)], ids=["chain", "residual", "transformer"]
)
def test_bound_holds_on_model_shapes(graph):
    platform = soc()
    space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
    bound = placement_bound(space)
    assert max(makespan_bound(space), critical_path_bound(space)) * (1 - 1e-9) <= bound * (1 + 1e-12)
    # at the search's prices, as the bound prices them (kernel choices made after placement can be faster)
    assert bound <= place(graph, platform).searched_us * (1 + 1e-9)
    greedy = search_greedy(space, space.candidates)
    assert bound <= chosen_makespan(space, space.candidates, greedy) * (1 + 1e-9)


def _space(times: list[list[float]]):
    """A stand-in for a SearchSpace: node i alone on target t takes times[i][t]."""
    candidates = [
        SimpleNamespace(loc=t, nodes=(i,), compute_us=us) for i, row in enumerate(times) for t, us in enumerate(row)
    ]
    return SimpleNamespace(graph=SimpleNamespace(nodes=times), targets=times[0], candidates=candidates)


def _two_target_optimum(times: list[list[float]]) -> float:
    """The LP's optimum for two targets, worked directly: nodes in order of comparative advantage,
    target 0 takes a prefix (the last node possibly split) until the two loads meet."""
    order = sorted(times, key=lambda row: row[0] / row[1])
    best = float("inf")
    for cut in range(len(order) + 1):
        a = sum(row[0] for row in order[:cut])
        b = sum(row[1] for row in order[cut:])
        best = min(best, max(a, b))
        if cut < len(order):  # split node `cut`: a + f*t0 = b - f*t1
            t0, t1 = order[cut]
            b_rest = b - t1
            f = (b_rest + t1 - a) / (t0 + t1)
            if 0 <= f <= 1:
                best = min(best, a + f * t0)
    return best


def test_split_bound_is_the_parallel_rate_when_every_node_has_the_same_speed_ratio():
    # One target k times slower on every node: sharing perfectly gives W * k / (k + 1).
    work = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    bound = makespan_bound(_space([[w, 7.0 * w] for w in work]))
    assert bound == pytest.approx(sum(work) * 7.0 / 8.0, rel=2e-3)
    assert bound <= sum(work) * 7.0 / 8.0 * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_split_bound_reaches_the_two_target_optimum_and_never_passes_it(seed):
    rng = random.Random(seed)
    times = [[rng.uniform(1, 100), rng.uniform(1, 100)] for _ in range(rng.randint(3, 40))]
    optimum = _two_target_optimum(times)
    bound = makespan_bound(_space(times))
    assert bound <= optimum * (1 + 1e-12)
    assert bound >= optimum * (1 - 5e-3)


def _brute_force_cases(seeds):
    """(space, the least makespan of every placement) for the small random graphs whose
    placements can all be priced (tests/test_placement_optimal.py's brute force)."""
    from test_placement_optimal import every_makespan

    for seed in seeds:
        rng = random.Random(seed)
        graph, platform = random_dag(rng, rng.randint(2, 8)), random_platform(rng)
        makespans = every_makespan(graph, platform, limit=150)
        if makespans is not None:
            yield seed, SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform)), min(makespans)


def test_the_bound_never_passes_the_brute_forced_optimum_and_mostly_meets_it():
    """On small random graphs and platforms, every placement priced at its makespan: the bound is
    never above the least of them, and (groups priced whole, copies the root must make, a chain's
    sum) it meets it on most. The bound of issue #23 (busiest target with shares, critical path
    with copies free) had a median of 0.66 of the optimum here."""
    ratios = []
    for seed, space, best in _brute_force_cases(range(300, 345)):
        bound = placement_bound(space)
        assert bound <= best * (1 + 1e-9), f"seed {seed}: the bound {bound} is above the optimum {best}"
        ratios.append(bound / best)
    ratios.sort()
    assert len(ratios) >= 30
    assert ratios[len(ratios) // 2] >= 0.99  # the median meets the optimum
    assert ratios[0] > 0.5


def test_a_chain_is_bounded_by_its_least_sum_of_groups_and_copies():
    """Nothing in a chain runs at once: the bound is the serial optimum, not a max over targets."""
    graph, platform = conv_relu_net(6), soc()
    space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
    placement = place(graph, platform)
    assert placement.gap == 0.0  # a strict chain: the serial optimum is the least makespan at the search's prices
    assert placement_bound(space) == pytest.approx(placement.searched_us, rel=1e-8)
    assert makespan_bound(space) < 0.9 * placement.searched_us  # the busiest target alone says much less


# tests/test_baremetal.py's Cortex-M7 root whose accelerator has a Cortex-M4 co-processor
CORTEX_M_COPROCESSOR = COMPOSITE


def test_a_slow_controller_gives_a_finite_bound_without_warnings():
    """The Cortex-M4 takes hundreds of times the npu's time: the weights' update once overflowed
    exp, and inf / inf made them NaN ("invalid value encountered in divide")."""
    graph = import_model(REPO / "examples" / "resnet_tiny.onnx")
    platform = load_platform_text(CORTEX_M_COPROCESSOR)
    space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        split = makespan_bound(space)
        bound = placement_bound(space)
    assert math.isfinite(split) and 0 < split <= bound
    assert bound <= place(graph, platform).searched_us * (1 + 1e-9)
    # and the stand-in: one target a thousand times slower than the others
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stand_in = makespan_bound(_space([[1.0, 1e3, 2.0], [1.0, 1e3, 3.0], [2.0, 1e3, 1.0]]))
    assert 1.6 <= stand_in <= 2.0  # nodes 0 and 1 on target 0, node 2 on target 2: 2
