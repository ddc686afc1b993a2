"""The energy objective: what a placement costs in energy per inference, and the search under it.

Each kind may declare energy figures beside its cost figures (`energy:` in a kind file:
pJ per multiply-accumulate, pJ per byte moved in each memory, static power in mW), and each link
`pj_per_byte`. A placement's energy per inference is

    energy = sum over groups  (MACs x pj_per_mac + bytes moved in each memory x its pj_per_byte)
           + sum over copies  (bytes x the pj_per_byte of every link crossed
                               + bytes x the main-memory pj_per_byte of the accelerator whose DMA moves it)
           + sum over devices static_mw x makespan      (every device is powered for the whole inference)

in nJ (pJ / 1000; mW x us = nJ). A group's MACs are its flops / 2 (an elementwise operator's
flops count as MAC-equivalents). Its bytes: on a tiled accelerator (local SRAM, one kernel unit
per invocation) the SRAM bytes its tiles' kernels read and write (`local`) and what its DMA loads
and stores for them, halos and weight re-loads included (`main`); elsewhere the kernel's memory
traffic, in main memory.

The search (`energy_search`) is the latency search's machinery with other prices: the exact DP
(hetgen/partition/exact.py) over candidates whose price is their dynamic energy plus the static
power of every device times their time, and copies priced the same way; that is exact for
energy with devices one at a time (the serial sum bounds the makespan from above). The choice is
then refined under the energy priced at the makespan (a hill climb over moves of one group, the
latency search's choice and greedy's compared), and a graph with at most
EXHAUSTIVE_PLACEMENTS covers has every cover priced, so its result is the least energy.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from hetgen.errors import PlacementError
from hetgen.ir import Graph
from hetgen.partition.assemble import chosen_makespan
from hetgen.partition.choices import Choices
from hetgen.partition.fused import group_work, legal_fusions
from hetgen.partition.optimal import EXHAUSTIVE_NODES, EXHAUSTIVE_PLACEMENTS, every_cover
from hetgen.partition.space import Candidate, SearchSpace
from hetgen.platform.model import Platform, Role, Target
from hetgen.spec import KernelTable
from hetgen.spec.alias import alias_source
from hetgen.spec.invocation import group_plans, one_unit_per_invocation
from hetgen.spec.tiling import Action, TilePlan

LOCAL, MAIN = "local", "main"  # an accelerator's local memory; the memory controllers and DMA read and write
EVALUATION_BUDGET = 20_000  # energy evaluations x groups for the hill climb (as hetgen/partition/overlap.py)


def energy_problem(platform: Platform) -> str | None:
    """What the platform lacks for the energy objective (None: nothing), naming each kind and link."""
    missing: list[str] = []
    for target in powered(platform):
        energy, what = target.kind.energy, f"kind '{target.kind.name}' (target {target.path_str})"
        needed = ["pj_per_mac", "static_mw"]
        lacks = [key for key in needed if key not in energy]
        per_byte = energy.get("pj_per_byte", {})
        if MAIN not in per_byte:
            lacks.append(f"pj_per_byte.{MAIN}")
        if one_unit_per_invocation(target) and LOCAL not in per_byte:
            lacks.append(f"pj_per_byte.{LOCAL}")
        if lacks:
            missing.append(f"{what} declares no energy {', '.join(lacks)}")
    for target in platform.root.walk():
        if target.link is not None and target.link.pj_per_byte is None:
            missing.append(f"the link of {target.path_str} has no pj_per_byte")
    if not missing:
        return None
    return (
        f"the energy objective needs energy figures on every device and link of platform '{platform.name}': "
        + "; ".join(dict.fromkeys(missing))
        + " (declare `energy: {pj_per_mac, pj_per_byte: {main, local}, static_mw}` on the kind, e.g. in a"
        " kind of the platform file that refines it, and `pj_per_byte` on each link: docs/energy.md)"
    )


def powered(platform: Platform) -> list[Target]:
    """The devices that draw power while the model runs: every target but composites (a composite's
    host and devices are targets of their own)."""
    return [t for t in platform.root.walk() if t.role is not Role.COMPOSITE]


@dataclass(frozen=True)
class Counts:
    """What a group does that costs energy."""

    macs: float
    local_bytes: float
    main_bytes: float

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.macs + other.macs, self.local_bytes + other.local_bytes, self.main_bytes + other.main_bytes)


def plan_counts(plan: TilePlan) -> Counts:
    macs = sum(tile.flops for tile in plan.tiles) / 2
    local = sum(block.nbytes for tile in plan.tiles for block in (*tile.inputs, *tile.outputs) if block is not None)
    return Counts(macs, float(local), float(plan.moved(Action.LOAD) + plan.moved(Action.STORE)))


def group_counts(target: Target, nodes, graph: Graph, kernels: KernelTable) -> Counts:
    """A group's MACs and bytes; none for a group of reshapes lowering drops (nothing runs)."""
    nodes = tuple(nodes)
    if all(alias_source(node, graph) is not None for node in nodes):
        return Counts(0.0, 0.0, 0.0)
    if one_unit_per_invocation(target):
        total = Counts(0.0, 0.0, 0.0)
        for plan in group_plans(nodes, graph, target, kernels):
            if isinstance(plan, TilePlan):
                total = total + plan_counts(plan)
        return total
    flops, nbytes = group_work(kernels, target, nodes)
    return Counts(flops / 2, 0.0, float(nbytes))


def counts_nj(target: Target, counts: Counts) -> float:
    energy = target.kind.energy
    per_byte = energy.get("pj_per_byte", {})
    pj = counts.macs * energy.get("pj_per_mac", 0.0)
    pj += counts.local_bytes * per_byte.get(LOCAL, 0.0) + counts.main_bytes * per_byte.get(MAIN, 0.0)
    return pj / 1000.0


def static_mw(platform: Platform) -> float:
    return sum(t.kind.energy.get("static_mw", 0.0) for t in powered(platform))


@dataclass(frozen=True)
class DeviceEnergy:
    path: str
    macs: float
    local_bytes: float
    main_bytes: float
    compute_nj: float  # its groups: MACs and the bytes they move
    copy_nj: float  # its DMA's share of the copies into and out of its local memory
    static_nj: float  # static power over the makespan

    @property
    def total_nj(self) -> float:
        return self.compute_nj + self.copy_nj + self.static_nj


@dataclass(frozen=True)
class EnergyReport:
    """A placement's energy per inference (nJ), per device and over the links."""

    objective: str
    makespan_us: float
    devices: tuple[DeviceEnergy, ...]
    link_nj: float  # bytes over links x their pj_per_byte
    groups_nj: tuple[tuple[str, float], ...]  # (group name, its dynamic energy, layer by layer: before cascades)
    # The figures it was priced with, for `hetgen bench` to price what the simulator counted:
    # per device (pj_per_mac, pj per local byte, pj per main byte, static mW), per link (the path
    # of the target below it: pj per byte, the bytes the copies move over it)
    figures: tuple[tuple[str, tuple[float, float, float, float]], ...] = ()
    links: tuple[tuple[str, float, int], ...] = ()
    copy_bytes: tuple[tuple[str, int], ...] = ()  # per device: the copies' bytes its DMA moves

    def to_manifest(self) -> dict:
        """What hetgen.json records of it (only under the energy objective: a latency project's
        manifest is unchanged): the estimate and the figures the simulated energy is priced with."""
        return {
            "objective": self.objective,
            "estimate_nj": round(self.total_nj, 3),
            "makespan_us": round(self.makespan_us, 3),
            "devices": {
                d.path: {
                    "macs": round(d.macs),
                    "local_bytes": round(d.local_bytes),
                    "main_bytes": round(d.main_bytes - dict(self.copy_bytes).get(d.path, 0)),
                    "copy_bytes": dict(self.copy_bytes).get(d.path, 0),
                    "compute_nj": round(d.compute_nj, 3),
                    "copy_nj": round(d.copy_nj, 3),
                    "static_nj": round(d.static_nj, 3),
                    "pj_per_mac": figures[0],
                    "pj_per_local_byte": figures[1],
                    "pj_per_main_byte": figures[2],
                    "static_mw": figures[3],
                }
                for d, (_, figures) in zip(self.devices, self.figures)
            },
            "links": {path: {"pj_per_byte": pj, "bytes": nbytes} for path, pj, nbytes in self.links},
            "link_nj": round(self.link_nj, 3),
        }

    @property
    def total_nj(self) -> float:
        return sum(d.total_nj for d in self.devices) + self.link_nj

    @property
    def static_nj(self) -> float:
        return sum(d.static_nj for d in self.devices)

    def to_json(self) -> dict:
        def uj(nj: float) -> float:
            return round(nj / 1000.0, 4)

        return {
            "total_uj": uj(self.total_nj),
            "static_uj": uj(self.static_nj),
            "link_uj": uj(self.link_nj),
            "devices": [
                {
                    "path": d.path,
                    "total_uj": uj(d.total_nj),
                    "compute_uj": uj(d.compute_nj),
                    "copy_uj": uj(d.copy_nj),
                    "static_uj": uj(d.static_nj),
                    "macs": round(d.macs),
                    "local_bytes": round(d.local_bytes),
                    "main_bytes": round(d.main_bytes),
                }
                for d in self.devices
            ],
            "groups": {name: uj(nj) for name, nj in self.groups_nj},
        }


def placement_energy(placement, graph: Graph, platform: Platform, objective: str = "latency") -> EnergyReport | None:
    """The energy per inference of a placement as it will run (its groups after kernel choices,
    its copies, its makespan); None where the platform lacks figures."""
    if energy_problem(platform) is not None:
        return None
    targets = {t.path_str: t for t in platform.root.walk()}
    nodes = {node.name: node for node in graph.nodes}
    kernels = placement.kernels
    counts: dict[str, Counts] = {t.path_str: Counts(0.0, 0.0, 0.0) for t in powered(platform)}
    compute: dict[str, float] = dict.fromkeys(counts, 0.0)
    copies: dict[str, float] = dict.fromkeys(counts, 0.0)
    groups = []
    views = placement.choices.views if isinstance(placement.choices, Choices) else ()
    viewed = {view.node for view in views if view.kernel is None}
    # a Split whose other outputs are views copies only the rest (hetgen/partition/split_views.py)
    partly = {view.node: view.kernel for view in views if view.kernel is not None}
    for group in placement.groups:
        target = targets[group.target]
        # a view runs nothing (hetgen/partition/concat_views.py, split_views.py)
        c = group_counts(target, (nodes[n] for n in group.nodes if n not in viewed and n not in partly), graph, kernels)
        for kernel in (partly[n] for n in group.nodes if n in partly):
            c = c + Counts(kernel.flops / 2, 0.0, float(kernel.bytes_accessed))
        nj = counts_nj(target, c)
        counts[group.target] = counts[group.target] + c
        compute[group.target] += nj
        groups.append((group.name, nj))
    for cascade in placement.cascades:  # run stripe by stripe: less DMA, SRAM-to-SRAM moves instead
        target = targets[cascade.target]
        change = Counts(0.0, float(cascade.move_bytes), -float(cascade.saved_bytes))
        counts[cascade.target] = counts[cascade.target] + change
        compute[cascade.target] += counts_nj(target, change)
    link_nj = 0.0
    link_bytes = {t.path_str: 0 for t in platform.root.walk() if t.link is not None}
    copy_bytes = dict.fromkeys(counts, 0)
    for transfer in placement.transfers:
        for link in transfer.links:
            link_nj += transfer.bytes * (targets[link.below].link.pj_per_byte or 0.0) / 1000.0
            link_bytes[link.below] += transfer.bytes
        for dma in transfer.dma:
            target = targets[dma.target]
            copies[dma.target] += transfer.bytes * target.kind.energy["pj_per_byte"][MAIN] / 1000.0
            counts[dma.target] = counts[dma.target] + Counts(0.0, 0.0, float(transfer.bytes))
            copy_bytes[dma.target] += transfer.bytes
    devices = tuple(
        DeviceEnergy(
            path,
            counts[path].macs,
            counts[path].local_bytes,
            counts[path].main_bytes,
            compute[path],
            copies[path],
            targets[path].kind.energy["static_mw"] * placement.total_us,
        )
        for path in counts
    )
    figures = tuple((path, _figures(targets[path])) for path in counts)
    links = tuple((path, targets[path].link.pj_per_byte, nbytes) for path, nbytes in link_bytes.items())
    return EnergyReport(
        objective, placement.total_us, devices, link_nj, tuple(groups), figures, links, tuple(copy_bytes.items())
    )


def _figures(target: Target) -> tuple[float, float, float, float]:
    energy = target.kind.energy
    per_byte = energy["pj_per_byte"]
    return (energy["pj_per_mac"], per_byte.get(LOCAL, 0.0), per_byte[MAIN], energy["static_mw"])


class EnergyPrices:
    """The search space's candidates and copies priced in energy (nJ)."""

    def __init__(self, space: SearchSpace, candidates: tuple[Candidate, ...]):
        problem = energy_problem(space.platform)
        if problem is not None:
            raise PlacementError(problem)
        self.space = space
        self.candidates = candidates
        self.static_mw = static_mw(space.platform)
        graph, nodes = space.graph, space.graph.nodes
        self.dynamic = {
            c.id: counts_nj(
                space.targets[c.loc],
                group_counts(space.targets[c.loc], [nodes[n] for n in c.nodes], graph, space.kernels),
            )
            for c in candidates
        }
        targets = {t.path_str: t for t in space.platform.root.walk()}
        self.dynamic_space = self._priced(targets, static=False)
        self.search_space = self._priced(targets, static=True)
        # what the DP minimises: dynamic energy plus every device's static power over the group's time
        self.search_candidates = tuple(
            _priced_candidate(c, self.dynamic[c.id] + self.static_mw * c.compute_us) for c in candidates
        )

    def _priced(self, targets, static: bool) -> SearchSpace:
        """A view of the space whose copies cost energy: per copy, its link's and its DMA's pJ a
        byte, and (`static`) every device's static power over the copy's time."""
        space = self.space
        view = copy.copy(space)
        count = len(space.paths)
        power = self.static_mw if static else 0.0
        view.hops = [[()] * count for _ in range(count)]
        view.latency = [[0.0] * count for _ in range(count)]
        view.us_per_byte = [[0.0] * count for _ in range(count)]
        for a in range(count):
            for b in range(count):
                hops = []
                for hop in space.topology.copies(space.paths[a], space.paths[b]):
                    below = targets[hop.below]
                    pj = (hop.link.pj_per_byte or 0.0) if hop.link is not None else 0.0
                    if hop.dma_gbps:
                        pj += below.kind.energy["pj_per_byte"][MAIN]
                    hops.append(
                        (
                            space.loc_of_path.get(hop.src, -1),
                            space.loc_of_path.get(hop.dst, -1),
                            power * hop.latency_us,
                            pj / 1000.0 + power * hop.us_per_byte,
                        )
                    )
                view.hops[a][b] = tuple(hops)
                view.latency[a][b] = sum(h[2] for h in hops)
                view.us_per_byte[a][b] = sum(h[3] for h in hops)
        return view

    def energy_nj(self, chosen: Sequence[int]) -> float:
        """The energy `placement_energy` gives these candidates at the search's prices: dynamic
        energy of groups and copies, and static power over the makespan."""
        space, by_id = self.space, {c.id: c for c in self.candidates}
        legal = legal_fusions(space, self.candidates, chosen)
        loc_of_node = [0] * len(space.graph.nodes)
        for cid in legal:
            for n in by_id[cid].nodes:
                loc_of_node[n] = by_id[cid].loc
        total = sum(self.dynamic[cid] for cid in legal)
        for t in range(len(space.tensor_names)):
            total += sum(nj for _, _, nj in self.dynamic_space.tensor_transfers(t, loc_of_node))
        return total + self.static_mw * chosen_makespan(space, self.candidates, chosen)


def _priced_candidate(c: Candidate, price: float) -> Candidate:
    return Candidate(c.id, c.loc, c.label, c.nodes, price, c.inputs, c.outputs, c.efficiency)


def energy_search(
    prices: EnergyPrices, chosen: list[int], others: Sequence[list[int] | None]
) -> tuple[list[int], float, bool, str]:
    """The least-energy choice from the DP's `chosen`: a hill climb moving one group at a time
    under the energy at the makespan, compared with `others` (the latency search's, greedy's); and
    where the graph is small enough, every cover priced. (choice, its energy, whether every cover was
    priced, a note)."""
    best, best_nj = list(chosen), prices.energy_nj(chosen)
    notes = []
    for other in others:
        if other is None:
            continue
        nj = prices.energy_nj(other)
        if nj < best_nj * (1 - 1e-12):
            best, best_nj = list(other), nj
            notes.append("a latency-priced choice used less energy and is the start")
    best, best_nj = _climb(prices, best, best_nj)
    space = prices.space
    covers = (
        every_cover(space, prices.candidates, EXHAUSTIVE_PLACEMENTS)
        if len(space.graph.nodes) <= EXHAUSTIVE_NODES
        else None
    )
    exhaustive = covers is not None
    if covers is not None:
        for cover in covers:
            nj = prices.energy_nj(cover)
            if nj < best_nj * (1 - 1e-12):
                best, best_nj = cover, nj
        notes.append(f"every one of {len(covers)} placements priced in energy at its makespan")
    return best, best_nj, exhaustive, "; ".join(notes)


def _climb(prices: EnergyPrices, chosen: list[int], start_nj: float) -> tuple[list[int], float]:
    evaluations = EVALUATION_BUDGET // max(len(chosen), 1)
    by_nodes: dict[tuple[int, ...], list[Candidate]] = {}
    for c in prices.candidates:
        by_nodes.setdefault(c.nodes, []).append(c)
    by_id = {c.id: c for c in prices.candidates}
    best = start_nj
    improved = True
    while improved and evaluations > 0:
        improved = False
        for cid in sorted(chosen, key=lambda i: (-prices.dynamic[i], i)):
            if cid not in chosen:
                continue
            here = by_id[cid]
            for other in sorted(by_nodes[here.nodes], key=lambda c: (prices.dynamic[c.id], c.id)):
                if other.id == cid or other.loc == here.loc or evaluations <= 0:
                    continue
                evaluations -= 1
                trial = [other.id if i == cid else i for i in chosen]
                nj = prices.energy_nj(trial)
                if nj < best * (1 - 1e-12):
                    chosen, best, improved = trial, nj, True
                    break
    return chosen, best
