"""The placement search: `place(graph, platform) -> Placement`.

cost mode (Collage-style) finds the placement of least estimated total latency, exactly under the
cost model, by dynamic programming over the graph's topological order (`hetgen.partition.exact`);
a beam (`max_states`, and a budget of states over the whole search) bounds pathological widths and
is reported as `Placement.exact = False` with a `search_note`; such a result is compared with the
greedy placement and the cheaper kept, so the cost mode is never worse than greedy.

greedy mode is BYOC-style: in topological order, the largest match on the first accelerator that
claims a node wins; everything else falls back to the root controller.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from hetgen.errors import PlacementError
from hetgen.ir import Graph
from hetgen.partition.assemble import assemble, chosen_makespan, makespan_floor
from hetgen.partition.cascades import with_cascades
from hetgen.partition.choices import with_choices
from hetgen.partition.cost import Calibration, calibrate
from hetgen.partition.energy import EnergyPrices, energy_search, placement_energy
from hetgen.partition.exact import ExactSearch
from hetgen.partition.optimal import judged
from hetgen.partition.overlap import improve_makespan
from hetgen.partition.pins import resolve_pins, restrict
from hetgen.partition.placement import MODES, Placement
from hetgen.partition.reported import Reported, finished
from hetgen.partition.space import Candidate, SearchSpace
from hetgen.partition.throughput import for_throughput, period_bound, placement_pipeline
from hetgen.platform.loader import objective_problem
from hetgen.platform.model import Platform
from hetgen.spec import KernelTable, build_kernel_specs
from hetgen.spec.fits import check_graph_fits

DEFAULT_MAX_STATES = 1024


# Greedy's and the cascade-priced search's placements are finished beside the search's only up to
# this many nodes: at 5,000 (benchmarks/bench_scale.py, mixed on soc) the second search and the
# two extra finishes took generation from 8.5 to 11.1 CPU s. Larger graphs keep the search's
# placement, whose reported total is never claimed least there (the gap is printed).
OTHER_STARTS_NODES = 1000


def cycle_collection_paused(function):
    """`function` run with CPython's cycle collector paused, and resumed after as it was.

    The collector runs when allocations outnumber frees, and a full collection walks every live
    object: the graph, the kernel table, the search's states, and whatever else the process holds.
    Placing a 5,000-node graph allocates millions of tuples and keeps many (states, candidates,
    the schedule), so it set off about six full collections: a sixth of its time in a process that
    holds only that graph, 40 % in benchmarks/bench_placement.py, which holds six. What it
    allocates is freed by reference counting; a cycle, if any, is collected after it returns."""

    @functools.wraps(function)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return function(*args, **kwargs)
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@cycle_collection_paused
def place(
    graph: Graph,
    platform: Platform,
    *,
    mode: str | None = None,
    pins: Mapping[str, str] = MappingProxyType({}),
    calibration: Calibration | Mapping[str, float] | None = None,
    max_states: int = DEFAULT_MAX_STATES,
    kernels: KernelTable | None = None,
    objective: str | None = None,
) -> Placement:
    """Place every operator of `graph` on a target of `platform`.

    `mode` and `pins` are what the caller (CLI, API) asked for; this is the one place they meet the
    platform file's `options`: an explicit `mode` beats `options.placement`, which beats "cost"; `pins`
    add to `options.pins`, a pin for the same key replacing the file's. `pins` map a node name, an
    ONNX node name or a pattern label to a target path. `calibration` scales group times per kind or
    target path. `kernels`: the graph's kernel table (hetgen/spec), built here when not given.
    `objective`: what cost mode minimises (an explicit one beats `options.objective`, which beats
    "latency"); "energy": the energy per inference (hetgen/partition/energy.py); "throughput": the
    period of frames pipelined across devices (hetgen/partition/throughput.py).
    """
    mode, pins = placement_request(platform, mode, pins)
    objective = objective_request(platform, objective)
    if mode not in MODES:
        raise PlacementError(f"unknown placement mode {mode!r}; accepted: {', '.join(MODES)}")
    if not isinstance(calibration, Calibration):
        calibration = calibrate(calibration or {})
    check_graph_fits(graph, platform)  # before any cost or table is computed for an impossible tensor
    if kernels is None:  # the same table the pipeline builds and passes: one path, built here for a direct caller
        kernels = build_kernel_specs(graph, platform)
    space = SearchSpace(graph, platform, calibration, kernels)
    pinned = resolve_pins(space, pins)
    candidates = restrict(space, pinned)
    if mode != "cost":
        chosen = search_greedy(space, candidates)
        placement = assemble(space, candidates, chosen, mode=mode, exact=False, pins=pinned)
        placement = with_cascades(with_choices(graph, platform, placement, calibration), graph, platform).verify(graph)
        return replace(placement, energy=placement_energy(placement, graph, platform, "latency"))
    if objective == "energy":  # checked before the latency search: a platform without figures fails fast
        prices = EnergyPrices(space, candidates)
    search = ExactSearch(space, candidates)
    chosen, exact = search.run(max_states)
    placement = assemble(space, candidates, chosen, mode=mode, exact=exact, pins=pinned)
    greedy = _greedy_or_none(space, candidates)  # what cost mode must never be worse than
    if not exact:
        placement = _no_worse_than_greedy(space, candidates, pinned, placement, search, greedy)
        if "greedy placement was cheaper" in placement.search_note:
            chosen = greedy
    improved, after, before = improve_makespan(space, candidates, chosen)
    if after < before - 1e-6:  # moving groups lets devices overlap; `exact` stays the search's own
        note = f"then moved {len(set(improved) - set(chosen))} groups so devices overlap (makespan {before:.1f} -> {after:.1f} us)"
        moved = assemble(space, candidates, improved, mode=mode, exact=placement.exact, pins=pinned)
        placement = replace(moved, search_note="; ".join(filter(None, (placement.search_note, note))))
        chosen = improved
    placement = _makespan_no_worse_than_greedy(space, candidates, pinned, chosen, placement, greedy)
    if objective == "throughput":
        return _for_throughput(space, candidates, pinned, placement, chosen, greedy, search, exact, calibration)
    placement = judged(space, candidates, pinned, placement)
    # judged by the total it reports: cascades and kernel choices included
    reported = Reported(space, candidates, pinned, calibration)
    starts = [("search's", choice_of(space, candidates, placement))]
    if len(graph.nodes) <= OTHER_STARTS_NODES:
        starts.append(("greedy", greedy))
        if reported.repriceable:  # a search that sees what a cascade (or on one CPU any kernel choice) saves
            floored = reported.floor_prices()
            optimistic = ExactSearch(space, reported.optimistic)
            cascaded, proven = optimistic.run(max_states)
            reported.floor(cascaded, optimistic.best_cost if proven else None)
            starts.append((f"{'least' if floored else 'cascade'}-priced search's", cascaded))
    finished_latency = reported.least(placement, starts)
    if objective == "latency":
        return finished_latency
    placement = _least_energy(space, candidates, pinned, prices, placement, greedy, max_states)
    placement = finished(graph, platform, placement, calibration)
    # cascades and kernel choices re-price both: the latency placement may end lower
    if finished_latency.energy.total_nj < placement.energy.total_nj * (1 - 1e-12):
        note = "the latency placement uses less energy once cascades and kernel choices priced it, and is used"
        placement = replace(
            finished_latency, objective="energy", search_note="; ".join(filter(None, (placement.search_note, note)))
        )
        placement = replace(placement, energy=replace(placement.energy, objective="energy"), optimal=False)
    return placement


def choice_of(space: SearchSpace, candidates: tuple[Candidate, ...], placement: Placement) -> list[int]:
    """The candidate ids that make up `placement`'s groups."""
    by_nodes = {(g.target, g.label, tuple(g.nodes)) for g in placement.groups}
    names = space.graph.nodes
    return [
        c.id for c in candidates if (space.paths[c.loc], c.label, tuple(names[n].name for n in c.nodes)) in by_nodes
    ]


def objective_request(platform: Platform, objective: str | None) -> str:
    """The objective cost mode minimises: the caller's, else the platform's `options.objective`,
    else latency. One the loader would refuse is refused here too (the command line's)."""
    chosen = objective if objective is not None else platform.options.get("objective") or "latency"
    problem = objective_problem(chosen)
    if problem is not None:
        raise PlacementError(problem)
    return chosen


def _least_energy(space, candidates, pinned, prices: EnergyPrices, latency: Placement, greedy, max_states) -> Placement:
    """The placement of least energy per inference (hetgen/partition/energy.py): the DP at energy
    prices, refined under the energy at the makespan and compared with the latency placement's
    choice and greedy's. `exact` is the DP's; `optimal`: every cover was priced."""
    search = ExactSearch(prices.search_space, prices.search_candidates)
    chosen, exact = search.run(max_states)
    best, _, exhaustive, note = energy_search(prices, chosen, (choice_of(space, candidates, latency), greedy))
    placement = assemble(space, candidates, best, mode="cost", exact=exact, pins=pinned)
    notes = [] if exact else [f"energy search beam-bounded (widest frontier {search.widest})"]
    return replace(
        placement,
        search_note="; ".join(filter(None, (*notes, note))),
        searched_us=placement.total_us,
        optimal=exhaustive,
        bound_us=placement.total_us if exhaustive else 0.0,
        objective="energy",
    )


def _for_throughput(space, candidates, pinned, placement, chosen, greedy, search, exact, calibration) -> Placement:
    """The placement of least steady-state period (hetgen/partition/throughput.py), climbing from
    the latency search's choice and greedy's; its pipeline attached for explain, codegen and bench."""
    graph, platform = space.graph, space.platform
    starts = [chosen] + ([greedy] if greedy is not None and sorted(greedy) != sorted(chosen) else [])
    best, period, latency_period = for_throughput(space, candidates, starts)
    bound = period_bound(space, search.best_cost) if exact else 0.0
    note = (
        f"throughput: period {period:.1f} us (the latency placement's {latency_period:.1f} us), "
        f"a climb from the latency and greedy placements" + (f"; no period is below {bound:.1f} us" if bound else "")
    )
    placed = assemble(space, candidates, best, mode=placement.mode, exact=False, pins=pinned)
    placed = replace(placed, search_note="; ".join(filter(None, (placement.search_note, note))))
    placed = with_cascades(with_choices(graph, platform, placed, calibration), graph, platform).verify(graph)
    pipeline = placement_pipeline(placed, graph, platform, bound, period)
    # The climb prices groups as the search does; kernel choices and cascades re-price both
    # placements, so the latency placement, re-priced the same way, is kept where its period is less.
    latency = with_cascades(with_choices(graph, platform, placement, calibration), graph, platform).verify(graph)
    latency_pipeline = placement_pipeline(latency, graph, platform, bound, latency_period)
    if (latency_pipeline.period_us, latency.total_us) < (pipeline.period_us - 1e-6, placed.total_us):
        note = f"{placement.search_note}; throughput: the latency placement's period is the least found".lstrip("; ")
        placed, pipeline = replace(latency, search_note=note), latency_pipeline
    pipeline = replace(pipeline, latency_period_us=latency_pipeline.period_us)
    return replace(placed, objective="throughput", pipeline=pipeline)


def _greedy_or_none(space: SearchSpace, candidates: tuple[Candidate, ...]) -> list[int] | None:
    try:
        return search_greedy(space, candidates)
    except PlacementError:  # pins greedy cannot honour
        return None


def _makespan_no_worse_than_greedy(space, candidates, pinned, chosen, placement: Placement, greedy) -> Placement:
    """The search minimises the sum of group and copy times, a proxy for the makespan the placement
    is priced at (devices run concurrently: hetgen/partition/timeline.py). Greedy's placement,
    re-priced by its makespan, is kept when it runs faster, so cost mode is never worse than greedy.
    Its makespan is computed only when its busiest target's work alone does not rule that out."""
    if greedy is None or sorted(greedy) == sorted(chosen):
        return placement
    if makespan_floor(candidates, greedy) >= placement.total_us - 1e-9:
        return placement
    if chosen_makespan(space, candidates, greedy) >= placement.total_us - 1e-9:
        return placement
    faster = assemble(space, candidates, greedy, mode="cost", exact=False, pins=pinned)
    note = "; ".join(filter(None, (placement.search_note, "the greedy placement's makespan was shorter and is used")))
    return replace(faster, search_note=note)


def _no_worse_than_greedy(
    space, candidates, pinned, placement: Placement, search: ExactSearch, greedy: list[int] | None
) -> Placement:
    """A beam-cut search can lose to greedy: price greedy's placement too and keep the cheaper.

    Greedy's choice is priced by the same search restricted to it (one state a step, no beam), so
    it is assembled only when it wins. `greedy` is None where pins keep greedy from placing: the
    beam's placement stands.
    """
    widest = f"frontier of {search.widest} live tensors" if search.widest else "beam cut"
    note = f"{widest}, {search.expanded} states searched"
    if greedy is not None:
        by_id = {c.id: c for c in candidates}
        replay = ExactSearch(space, tuple(by_id[i] for i in greedy), like=search)
        replay.run(1)
        if replay.best_cost < search.best_cost:
            chosen = assemble(space, candidates, greedy, mode="cost", exact=False, pins=pinned)
            return replace(chosen, search_note=f"{note}; the greedy placement was cheaper and is used")
    return replace(placement, search_note=f"{note}; no worse than greedy")


def placement_request(platform: Platform, mode: str | None, pins: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The search mode and pins in force: the caller's, over the platform file's, over the default."""
    options = platform.options if isinstance(platform.options, Mapping) else {}
    chosen = mode if mode is not None else options.get("placement") or "cost"
    return chosen, {**(options.get("pins") or {}), **pins}


def search_greedy(space: SearchSpace, candidates: tuple[Candidate, ...]) -> list[int]:
    starts = _starts(space, candidates)
    accelerators = set(space.accelerators)
    taken = [False] * len(space.graph.nodes)
    chosen = []
    for i in range(len(taken)):
        if taken[i]:
            continue
        free = [c for c in starts[i] if not any(taken[n] for n in c.nodes)]
        options = (
            [c for c in free if c.loc in accelerators]
            or [c for c in free if c.loc == space.root]
            or [c for c in free if c.loc in space.controllers]
            or free
        )
        if not options:
            node = space.graph.nodes[i]
            raise PlacementError(f"greedy placement cannot place {node.label}: its pins leave no free group")
        best = max(options, key=lambda c: len(c.nodes))  # ties: the first target in platform order
        for n in best.nodes:
            taken[n] = True
        chosen.append(best.id)
    return chosen


def _starts(space: SearchSpace, candidates: tuple[Candidate, ...]) -> list[list[Candidate]]:
    starts: list[list[Candidate]] = [[] for _ in space.graph.nodes]
    for candidate in candidates:
        starts[candidate.nodes[0]].append(candidate)
    return starts
