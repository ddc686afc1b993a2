"""The latency placement is judged by the total it reports: the makespan of the program that runs,
with the kernel choices (hetgen/partition/choices.py) and cascades (hetgen/partition/cascades.py)
made after the search.

The search (hetgen/partition/exact.py, then hetgen/partition/overlap.py's climb) prices each group
as the kernel table's kernel, on its own. Choices made once the groups are placed re-price them: a
run of convolutions on a tiled accelerator may run as one cascade (its activations never leave
SRAM), a CPU group may take Winograd's weights or a blocked layout. They re-price another placement
too, and may lower it more: on the shipped platforms the energy placement, which puts more
convolutions on the npu, was up to 20 % faster in its reported total than the latency placement
the search had proven least at its own prices (benchmarks/bench_objectives.py, 12 of 140 cases).

So the latency placement is the least reported total among the placements the search leads to:
its own choice, greedy's, and the choice of the search at cascade-aware prices (`optimistic`: each
re-priceable group on a tiled accelerator at its arithmetic alone), then a climb from the best of
them that moves one group at a time onto or off a re-priceable group and keeps a move when the
reported total drops (`Reported._climb`). A placement is scored by its kernel choices and its
fastest cascades (cascades.py `fastest_cascades`: the total `with_cascades` reports, before
`least_sram` spares SRAM at no cost in time); only the one returned is finished. Each score
prices a whole placement, so the climb works out at most `EVALUATION_BUDGET` of them, tries first
the moves that save the most at the optimistic prices, and skips a start or a move whose
optimistic makespan is no less than the total to beat (a screen, not a proof: the optimistic
prices are not proven a lower bound). The cascades' plans, prices and whole cuts are kept across
placements (cascades.py `_cut`): most runs recur from one placement to the next.

"Exact" is claimed for the reported total only where it is proven (`Reported.least`):

- where no candidate group can be re-priced after the search (`repriceable`): every placement's
  reported total is then its makespan at the search's prices, so the search's own proof stands
  (hetgen/partition/optimal.py);
- where every placement can be priced (at most `EXHAUSTIVE_PLACEMENTS`, graphs of at most
  `FINISHED_NODES` nodes): each is finished and priced (those with no re-priceable group at their
  makespan), and the least is used;
- on one CPU (graphs of at most `FLOORED_NODES` nodes): where the reported total meets the floor,
  the search's optimum with each group at the least price any kernel choice gives it
  (hetgen/partition/least_price.py). Those prices are also the third start's and the screens'.

Otherwise the search's bound and gap are kept as the search measured them, at its prices, and
`explain` says that the least reported total is not proven.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from hetgen.ir import Graph
from hetgen.ops import _gemm_plan
from hetgen.ops.base import Tiling
from hetgen.ops.registry import op_def
from hetgen.partition.assemble import assemble, chosen_makespan
from hetgen.partition.blocked_layout import DEFAULT_LAYOUT, block_width
from hetgen.partition.cascades import cascading, fastest_cascades, with_cascades
from hetgen.partition.choices import with_choices
from hetgen.partition.cost import Calibration
from hetgen.partition.energy import placement_energy
from hetgen.partition.least_price import least_priced
from hetgen.partition.optimal import EXHAUSTIVE_PLACEMENTS, every_cover
from hetgen.partition.placement import Placement
from hetgen.partition.prepack import UnitLowerings
from hetgen.partition.space import Candidate, SearchSpace
from hetgen.platform.model import Platform, Role
from hetgen.spec.invocation import kernel_units_of, one_unit_per_invocation, tile_rates
from hetgen.spec.split_view import may_be_view

# Reported totals the climb may work out: each prices a placement's kernel choices and cascades
# (10-60 ms on the example models: its runs' new cascade windows), so far fewer than overlap.py's
# makespans. Ordered as `Reported._climb` orders its moves, the shipped examples reach their least
# total within 11 (ethos-u65 mobilenet_v1_vww_int8: 8, board-aarch64 mobilenet_v1_vww_int8: 11).
EVALUATION_BUDGET = 12
# Finishing a placement prices each of its kernel choices and cascades, 5-80 ms a placement, so
# every placement is finished only for graphs this small: vgg@64 on one CPU (19 nodes, 128
# placements) took 9.9 CPU s that way against 0.06 s before; the climb's budget bounds the rest.
FINISHED_NODES = 12
# Pricing every kernel choice of every group (least_price.py) takes about 1.4 ms a candidate group
# (densenet121@160 on host: 489 in 0.69 CPU s), so one CPU's floor is made for graphs this small.
FLOORED_NODES = 400
CLIMB_GROUPS = 200  # no climb over more groups: each round orders every move by a makespan
EPSILON_US = 1e-6


def finished(
    graph: Graph, platform: Platform, placement: Placement, calibration: Calibration, priced: dict | None = None
) -> Placement:
    """The placement with its kernel choices and cascades, priced as the program that runs them, and
    its energy where the platform has figures. `priced`: cascade prices kept across calls."""
    return _with_cascades_and_energy(graph, platform, with_choices(graph, platform, placement, calibration), priced)


def _with_cascades_and_energy(graph: Graph, platform: Platform, chose: Placement, priced: dict | None) -> Placement:
    """`finished` of a placement whose kernel choices are made."""
    placement = with_cascades(chose, graph, platform, priced).verify(graph)
    return replace(placement, energy=placement_energy(placement, graph, platform, placement.objective))


def repriceable(space: SearchSpace, candidates: Sequence[Candidate]) -> frozenset[int]:
    """The ids of the candidates whose price the stages after the search may change: a window
    operator on a tiled accelerator (it may join a cascade), and on a CPU controller a unit whose
    kernel offers another layout of its constants, calls the GEMM (its cache blocks are fitted to
    the platform and its workspace), may run blocked, or is a Concat that may be a view
    (hetgen/partition/choices.py)."""
    platform, graph, kernels = space.platform, space.graph, space.kernels
    layout = platform.options.get("layout") or DEFAULT_LAYOUT
    found = set()
    for c in candidates:
        target = space.targets[c.loc]
        nodes = [graph.nodes[n] for n in c.nodes]
        if one_unit_per_invocation(target):
            if cascading(platform) and any(_windowed(node) for node in nodes):
                found.add(c.id)
        elif target.role is Role.CONTROLLER and not space.aliases.issuperset(c.nodes):
            viewable = any(may_be_view(node, graph) for node in nodes)  # choices.py may view it
            if (
                viewable
                or block_width(target, layout) is not None
                or any(
                    _reworked(kernels.unit(tuple(n.name for n in chain)).kernel)
                    for chain, _ in kernel_units_of(nodes, graph, kernels)
                )
            ):
                found.add(c.id)
    return frozenset(found)


def cascaded_candidates(space: SearchSpace, candidates: Sequence[Candidate], repriced: frozenset[int]):
    """The candidates with each re-priceable one on a tiled accelerator at its arithmetic alone
    (its flops at its tiles' rate, as it would run deep inside a cascade: no launch, its activations
    kept in SRAM), where that is less than its price: the prices of a search that sees what a
    cascade saves, if optimistically. Its choice is one more start for `Reported.least`."""
    graph = space.graph
    priced = []
    for c in candidates:
        target = space.targets[c.loc]
        if c.id in repriced and one_unit_per_invocation(target):
            nodes = [graph.nodes[n] for n in c.nodes]
            flops, _ = space.kernels.group_work(nodes)
            arithmetic = flops * tile_rates(target, c.efficiency, nodes).us_per_flop
            if arithmetic < c.compute_us:
                c = replace(c, compute_us=arithmetic)
        priced.append(c)
    return tuple(priced)


def _windowed(node) -> bool:
    definition = op_def(node.op)
    return definition is not None and definition.tiling is Tiling.WINDOW


def _reworked(kernel) -> bool:
    return kernel is not None and (bool(kernel.prepacked) or _gemm_plan.HELPER in kernel.helpers)


class Reported:
    """Placements of one graph priced at their reported totals, each choice finished once."""

    def __init__(self, space: SearchSpace, candidates: tuple[Candidate, ...], pins: Mapping, calibration: Calibration):
        self.space, self.candidates, self.pins, self.calibration = space, candidates, pins, calibration
        self.repriceable = repriceable(space, candidates)
        self._cascades: dict = {}
        self._finished: dict[tuple[int, ...], Placement] = {}
        self._totals: dict[tuple[int, ...], float] = {}
        self._with_choices: dict[tuple[int, ...], tuple[Placement, bool]] = {}  # (it, whether explained)
        self._assembled: dict[tuple[int, ...], Placement] = {}  # the search's own, assembled already
        self._lowerings = UnitLowerings(space.graph)  # each unit's relowerings and packed constants
        # each re-priceable group at its cascade-aware price: the climb's order, a third start (search.py)
        self.optimistic = cascaded_candidates(space, candidates, self.repriceable) if self.repriceable else candidates
        self.floored: tuple[Candidate, ...] | None = None  # `floor_prices`
        self.floor_us: float | None = None  # the least makespan at those prices, once searched (`floor`)

    def floor_prices(self) -> tuple[Candidate, ...] | None:
        """On one CPU, the candidates each at the least price any kernel choice gives it
        (hetgen/partition/least_price.py), made the `optimistic` prices too; else None."""
        space = self.space
        one_cpu = len({c.loc for c in self.candidates}) == 1
        if self.repriceable and one_cpu and len(space.graph.nodes) <= FLOORED_NODES:
            self.floored = least_priced(space, self.candidates, self._lowerings)
            self.optimistic = self.floored or self.optimistic
        return self.floored

    def floor(self, chosen: Sequence[int], proven_us: float | None) -> None:
        """Record the search's choice at the `floor_prices` and the optimum it proved (None: not
        proven): one CPU's makespan is the serial sum the search minimised, so no placement's
        reported total is less (hetgen/partition/optimal.py)."""
        if self.floored is not None and proven_us is not None:
            self.floor_us = min(proven_us, chosen_makespan(self.space, self.floored, chosen))

    def placement(self, chosen: Sequence[int]) -> Placement:
        """`chosen` assembled and finished."""
        key = tuple(sorted(chosen))
        found = self._finished.get(key)
        if found is None:
            space = self.space
            found = _with_cascades_and_energy(space.graph, space.platform, self._chose(key, True), self._cascades)
            self._finished[key] = found
        return found

    def total_us(self, chosen: Sequence[int]) -> float:
        """The reported total of `chosen`: its makespan where none of its groups can be re-priced."""
        if self.repriceable.isdisjoint(chosen):
            return chosen_makespan(self.space, self.candidates, chosen)
        key = tuple(sorted(chosen))
        total = self._totals.get(key)
        if total is None:
            found = self._finished.get(key)
            if found is None:  # its fastest cascades: least_sram keeps their total (cascades.py)
                space = self.space
                found = fastest_cascades(self._chose(key), space.graph, space.platform, self._cascades)
            total = self._totals[key] = found.total_us
        return total

    def _chose(self, key: tuple[int, ...], explained: bool = False) -> Placement:
        """The placement of these candidate ids assembled, its kernel choices made: kept, since the
        one returned is finished from it once scored. A placement only scored is assembled without
        what explain reads (`assemble(explained=False)`: no score reads it); the one returned is
        assembled again with it (`explained`), its kernel choices the same, from `_lowerings`."""
        found = self._with_choices.get(key)
        if found is None or (explained and not found[1]):
            space = self.space
            assembled = self._assembled.get(key)
            if assembled is None:
                assembled = assemble(
                    space, self.candidates, key, mode="cost", exact=False, pins=self.pins, explained=explained
                )
            chose = with_choices(space.graph, space.platform, assembled, self.calibration, self._lowerings)
            found = self._with_choices[key] = (chose, explained or key in self._assembled)
        return found[0]

    def least(self, searched: Placement, starts: Sequence[tuple[str, Sequence[int] | None]]) -> Placement:
        """The least reported total from the search's placement (`searched`, judged at the search's
        prices: hetgen/partition/optimal.py) and `starts` ((name, choice): its own choice first),
        with `optimal` true only where proven for the reported total (module doc)."""
        mine = list(starts[0][1])
        self._assembled[tuple(sorted(mine))] = searched
        if not self.repriceable:  # every placement's reported total is its makespan: the search's proof stands
            return self._judged(mine, searched, searched.optimal, "")
        every = self._every_cover()
        if every is not None:
            best = min(every, key=self.total_us, default=mine)
            if self.total_us(mine) <= self.total_us(best) * (1 + 1e-9):
                best = mine
            note = f"every one of {len(every)} placements priced at its reported total"
            return self._judged(best, searched, True, note)
        best_name, best, best_us = starts[0][0], mine, self.total_us(mine)
        for name, choice in starts[1:]:
            if choice is None or self.optimistic_us(choice) >= best_us - EPSILON_US:
                continue  # not worth finishing: even at cascade-aware prices it is no faster
            if self.total_us(choice) < best_us - EPSILON_US:
                best_name, best, best_us = name, list(choice), self.total_us(choice)
        notes = [] if best_name == starts[0][0] else [f"the {best_name} placement's reported total was less"]
        climbed, climbed_us = self._climb(best, best_us)
        if climbed_us < best_us - EPSILON_US:
            moved = len(set(climbed) - set(best))
            notes.append(
                f"then moved {moved} groups for cascades and kernel choices ({best_us:.1f} -> {climbed_us:.1f} us)"
            )
            best = climbed
        if self.floor_us is not None and self.total_us(best) <= self.floor_us * (1 + 1e-9):
            notes.append("no placement is less: each group at the least price any kernel choice gives it sums to this")
            return self._judged(best, searched, True, "; ".join(notes))
        notes.append("cascades and kernel choices re-price placements after the search: the least total is not proven")
        return self._judged(best, searched, False, "; ".join(notes))

    def optimistic_us(self, chosen: Sequence[int]) -> float:
        """The makespan of `chosen` with its re-priceable groups at their cascade-aware prices
        (`cascaded_candidates`): what the climb's moves and the starts are screened by."""
        return chosen_makespan(self.space, self.optimistic, chosen)

    def _climb(self, chosen: list[int], chosen_us: float) -> tuple[list[int], float]:
        """A first-improvement climb over single moves (one group to another target running exactly
        its operators) onto or off a re-priceable group (the makespan climb, overlap.py, tried the
        others), at most `EVALUATION_BUDGET` reported totals. Each round tries first the moves that
        save the most at cascade-aware prices (`optimistic`: a convolution onto the npu, where a
        cascade may take it), a move that lost in an earlier round after the others, and skips a
        move whose makespan at those prices is no less than the total to beat."""
        touched = {c.nodes for c in self.candidates if c.id in self.repriceable}
        by_nodes: dict[tuple[int, ...], list[Candidate]] = {}
        for c in self.candidates:
            if c.nodes in touched:
                by_nodes.setdefault(c.nodes, []).append(c)
        by_id = {c.id: c for c in self.candidates}
        optimistic = {c.id: c for c in self.optimistic}
        evaluations = EVALUATION_BUDGET if len(chosen) <= CLIMB_GROUPS else 0
        lost: set[int] = set()
        improved = True
        while improved and evaluations > 0:
            improved = False
            trials = []
            for cid in chosen:
                here = by_id[cid]
                for other in by_nodes.get(here.nodes, ()):
                    if other.loc != here.loc:
                        trial = [other.id if i == cid else i for i in chosen]
                        change_us = optimistic[other.id].compute_us - optimistic[cid].compute_us
                        trials.append((other.id in lost, change_us, other.id, trial))
            # a move that lost in an earlier round comes after the others: it mostly loses again
            for _, _, move, trial in sorted(trials, key=lambda t: t[:3]):
                if evaluations <= 0:
                    break
                if self.optimistic_us(trial) >= chosen_us - EPSILON_US:
                    continue
                evaluations -= 1
                trial_us = self.total_us(trial)
                if trial_us < chosen_us - EPSILON_US:
                    chosen, chosen_us, improved = trial, trial_us, True
                    break
                lost.add(move)
        return chosen, chosen_us

    def _every_cover(self) -> list[list[int]] | None:
        """Every placement, where there are few enough to finish each (module doc); else None."""
        space = self.space
        if len(space.graph.nodes) > FINISHED_NODES:
            return None
        return every_cover(space, self.candidates, EXHAUSTIVE_PLACEMENTS)

    def _judged(self, chosen: list[int], searched: Placement, optimal: bool, note: str) -> Placement:
        """`chosen` finished, with the search's judgment (`searched`'s makespan and bound at the
        search's prices, and its notes) and `optimal` for the reported total."""
        placement = self.placement(chosen)
        return replace(
            placement,
            mode=searched.mode,
            exact=searched.exact,
            search_note="; ".join(filter(None, (searched.search_note, note))),
            searched_us=searched.searched_us,
            optimal=optimal,
            bound_us=placement.total_us if optimal else searched.bound_us,
            objective=searched.objective,
        )
