"""The kernel choice: which variant of each kernel the program runs, decided once after placement,
and the placement priced with it.

Some choices depend on where everything else runs, so they are made once the groups are placed:
on a CPU controller, which layout a unit's constants take (Winograd's transformed weights, GEMM
panels, or the model's: hetgen/partition/prepack.py, within the target's memory budget), its GEMM
cache blocks (the platform's, or smaller where its workspace would lift the activation peak), and
which runs of convolutions go NCHW[V]c, with a reorder kernel at each edge of a run
(hetgen/partition/blocked_layout.py). `choose` records each unit's kernel as the program will run
it (`UnitChoice`: the variant's template, parameters, workspace and work, hetgen/spec/variants.py)
and the reorders; `priced` re-prices every controller group whose kernels differ from the kernel
table's with the cost model (hetgen/partition/cost.py): the group's time is its kernels' times, a
reorder being a kernel of its own in the group of the unit it serves. The placement's total is then
the makespan of those groups in the same program order. So `explain`, `Placement.total_us`, the
manifest's estimates and `hetgen bench` all show the price of the program lowering emits; lowering
takes these choices as they are (hetgen/lower/prepack.py, hetgen/lower/blocked_layout.py) and
decides nothing.

The search itself prices each unit as the table's kernel: the choices cannot be known before the
groups are (a memory budget is per target, a run spans groups), so a placement the search compared
against another was priced without them; the one it returns is priced with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from hetgen.ir import Graph, Node
from hetgen.ops._parallel import SERIAL, Parallel
from hetgen.ops.base import Kernel, Prepacked
from hetgen.partition.blocked_layout import BlockedUnit, Reorder, blocked_units
from hetgen.partition.concat_views import PlacedProgram, View, concat_views
from hetgen.partition.cost import Calibration, Topology, Work, kernel_us, pool_threads, unit_parallel
from hetgen.partition.placement import Group, Placement
from hetgen.partition.prepack import UnitLowerings, taken_offers
from hetgen.partition.price import price
from hetgen.partition.split_views import split_views
from hetgen.partition.timeline import placement_makespan
from hetgen.partition.units import Unit, drop_aliases, ordered_nodes, placed_units
from hetgen.platform.model import Platform, Role
from hetgen.spec import KernelTable
from hetgen.spec.variants import variant_name


@dataclass(frozen=True)
class UnitChoice:
    """One kernel unit of the program as it will run: on `target`, reading `inputs` (the model's
    tensor names, a dropped reshape's output read as its input), `kernel` with every choice applied
    (its flops, bytes and split are the variant's), the offers whose layouts its constants take,
    and, where it runs blocked, how (with the reorders around it)."""

    unit: Unit
    target: str
    inputs: tuple[str, ...]
    kernel: Kernel
    variant: str  # "winograd", "implicit", "pointwise", "direct", "nchw8c", "gemm", ...
    offers: tuple[Prepacked, ...] = ()
    blocked: BlockedUnit | None = None

    @property
    def reorders(self) -> tuple[Reorder, ...]:
        return () if self.blocked is None else (*self.blocked.reorders_in, *self.blocked.reorders_out)


@dataclass(frozen=True)
class Choices:
    """Every kernel unit of the program, in execution order, with its choices; or, where the table
    refuses one of them, the refusals (lowering reports them: the model cannot be generated)."""

    units: tuple[UnitChoice, ...]
    refused: tuple[str, ...] = ()
    # the Concats, Splits and Slices that run nothing (hetgen/partition/concat_views.py,
    # split_views.py): not among `units`
    views: tuple[View, ...] = ()
    # (unit index, input index) -> the constant in the layout its taken offer reads (made once)
    packed: Mapping[tuple[int, int], np.ndarray] = field(
        default_factory=lambda: MappingProxyType({}), repr=False, compare=False
    )

    # head node name -> the positions in `units` of the units it heads (built once: a lookup per
    # group, where a scan of every unit per group made pricing a 5,000-node graph quadratic)
    _by_head: Mapping[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_head: dict[str, list[int]] = {}
        for index, choice in enumerate(self.units):
            by_head.setdefault(choice.unit.head.name, []).append(index)
        object.__setattr__(self, "_by_head", {name: tuple(found) for name, found in by_head.items()})

    @property
    def viewed(self) -> frozenset[str]:
        """The node names of the operators that are views and run nothing."""
        return frozenset(view.node for view in self.views if view.kernel is None)

    def of_group(self, group: Group) -> tuple[UnitChoice, ...]:
        """The units headed by the group's nodes, in execution order."""
        found = sorted(index for name in set(group.nodes) for index in self._by_head.get(name, ()))
        return tuple(self.units[index] for index in found)


def choose(
    graph: Graph, platform: Platform, placement: Placement, kernels: KernelTable, lowerings: UnitLowerings | None = None
) -> Choices:
    """Each kernel unit of `placement`'s program with its variant (module doc). `lowerings`: what
    other placements of `graph` lowered and packed (hetgen/partition/prepack.py `UnitLowerings`)."""
    controllers = {t.path_str for t in platform.targets() if t.role is Role.CONTROLLER}
    all_units = placed_units(graph, placement, kernels, controllers)
    refused = tuple(
        f"{unit.head.label}: {kernels.unit(unit.names).refusal}"
        for unit in all_units
        if kernels.unit(unit.names).kernel is None
    )
    if refused:
        return Choices((), refused)
    _, assignment = ordered_nodes(graph, placement)
    root = platform.root.controller().path_str
    assignment = assignment or {node.name: root for node in graph.nodes}
    units, unit_inputs = drop_aliases(all_units, graph)
    table = tuple(kernels.unit(unit.names).kernel for unit in units)
    taken, offers, layouts = taken_offers(graph, units, table, unit_inputs, assignment, platform, lowerings)
    blocked = blocked_units(graph, units, taken, unit_inputs, assignment, platform)
    run = tuple(taken[index] if index not in blocked else blocked[index].kernel for index in range(len(units)))
    program = PlacedProgram(graph, units, unit_inputs, assignment, platform, run)
    views = concat_views(program)
    views += split_views(program, views)
    viewed = {view.node for view in views if view.kernel is None}
    partly = {view.node: view.kernel for view in views if view.kernel is not None}  # copying the rest
    run = tuple(partly.get(unit.head.name, kernel) for unit, kernel in zip(units, run))
    # a view runs nothing and is no unit of the program (its edges above saw it as a plain reader
    # and writer: a blocked producer's reorder back to NCHW writes a Concat's range, a blocked
    # reader's reorder reads a Split's); the rest keep their order
    kept = [index for index, unit in enumerate(units) if unit.head.name not in viewed]
    position = {index: place for place, index in enumerate(kept)}
    packed = {
        (position[index], offer.index): layouts.packed(index, offer)
        for index, chosen in offers.items()
        for offer in chosen
    }
    choices = []
    for index in kept:
        unit, how, kernel = units[index], blocked.get(index), run[index]
        variant = variant_name(kernel, how.v if how is not None else None)
        choices.append(
            UnitChoice(
                unit, assignment[unit.head.name], unit_inputs[index], kernel, variant, offers.get(index, ()), how
            )
        )
    return Choices(tuple(choices), (), packed=MappingProxyType(packed), views=views)


def with_choices(
    graph: Graph,
    platform: Platform,
    placement: Placement,
    calibration: Calibration | None = None,
    lowerings: UnitLowerings | None = None,
) -> Placement:
    """`placement` (from `place()`, or one edited by hand) with its kernel choices made for its groups
    and priced as the program that runs them; `calibration`: the one it was priced with;
    `lowerings`: kept across the placements of `graph` priced so (`choose`)."""
    kernels = placement.kernels
    calibration = calibration or Calibration()
    choices = choose(graph, platform, placement, kernels, lowerings)
    makespan = placement_makespan_of(graph, platform, placement.cascades)
    return priced(placement, choices, platform, kernels, calibration.scale_for, makespan)


def stale(choices: Choices, placement: Placement) -> str | None:
    """Why `choices` are not those of `placement`'s groups (a unit spanning two groups, or chosen
    for another target than its group's), or None."""
    group_of = {name: group for group in placement.groups for name in group.nodes}
    for choice in choices.units:
        groups = {group_of[name] for name in choice.unit.names if name in group_of}
        unit = " + ".join(choice.unit.names)
        if len(groups) != 1:
            return f"unit {unit} spans groups {', '.join(sorted(g.name for g in groups))}"
        (group,) = groups
        if group.target != choice.target:
            return f"unit {unit} was chosen for {choice.target}; its group runs on {group.target}"
    return None


def priced(
    placement: Placement, choices: Choices, platform: Platform, kernels: KernelTable, scale_for, makespan
) -> Placement:
    """`placement` with each CPU controller group whose kernels are not the table's re-priced as the
    kernels the program runs (`group_price`), its total the makespan of the groups so priced
    (`makespan(groups)`), and `choices` attached. `scale_for(target)`: the calibration's scale."""
    targets = {t.path_str: t for t in platform.targets()}
    groups = []
    changed = False
    for group in placement.groups:
        target = targets[group.target]
        group = replace(group, scale=scale_for(target))
        cost = None
        if target.role is Role.CONTROLLER and choices.units:
            cost = group_price(group, choices, platform, kernels, group.scale)
        if cost is None:
            groups.append(group)
            continue
        changed = True
        units = choices.of_group(group)
        views = tuple(view.kind for view in choices.views if view.node in group.nodes)
        variants = (
            tuple(c.variant for c in units)
            + tuple(f"reorder to {f'nchw{r.v}c' if r.to_blocked else 'nchw'}" for c in units for r in c.reorders)
            + views
        )
        launch = group.launch_us if units else 0.0  # a group of views launches nothing
        groups.append(replace(group, cost_us=cost, variants=variants, searched_us=group.cost_us, launch_us=launch))
    if not changed:
        return replace(placement, groups=tuple(groups), choices=choices)
    total = price(groups, placement.transfers, makespan(groups)).total_us
    return replace(placement, groups=tuple(groups), total_us=total, choices=choices)


def group_kernels(group: Group, choices: Choices, kernels: KernelTable) -> tuple[list[GroupKernel], bool]:
    """The kernels of a controller group as the cost model prices them: its units as one kernel (one
    unit at its variant's work and split; several at their summed work, the table's group work with
    each unit's own replaced by its variant's, as the search priced them), then each reorder as a
    kernel of its own; and whether they differ from the kernel table's (where not, the search's
    price stands). ([], False) for a group with no kernel (an alias lowering drops); ([], True) for
    one whose only kernels were views (the search priced them as copies)."""
    units = choices.of_group(group)
    viewed = bool(choices.views) and not choices.viewed.isdisjoint(group.nodes)
    if not units:
        return [], viewed
    reorders = [r for c in units for r in c.reorders]
    specs = [kernels.unit(c.unit.names) for c in units]
    works = [variant_work(c.kernel, s) for c, s in zip(units, specs)]
    same = all(
        (w.flops, w.bytes, c.kernel.parallel) == (s.flops, s.bytes, s.parallel) for c, s, w in zip(units, specs, works)
    )
    nodes = tuple(node for c in units for node in c.unit.nodes)
    if len(units) == 1:
        work, parallel = works[0], units[0].kernel.parallel
    else:
        flops, nbytes = kernels.group_work(nodes)
        flops += sum(w.flops - s.flops for w, s in zip(works, specs))
        nbytes += sum(w.bytes - s.bytes for w, s in zip(works, specs))
        work, parallel = Work(flops, nbytes), unit_parallel(kernels, nodes)
    found = [GroupKernel(work, parallel, nodes)]
    found += [GroupKernel(Work(r.kernel.flops, r.kernel.bytes_accessed), r.kernel.parallel, ()) for r in reorders]
    return found, not same or bool(reorders) or viewed


@dataclass(frozen=True)
class GroupKernel:
    work: Work
    parallel: Parallel
    nodes: tuple[Node, ...]  # whose operators set its compute rate (int8 or float)


def group_price(group: Group, choices: Choices, platform: Platform, kernels: KernelTable, scale: float) -> float | None:
    """The time of a controller group's kernels as the program runs them (`group_kernels`), or None
    where they are the kernel table's (the search's price stands)."""
    found, differs = group_kernels(group, choices, kernels)
    if not differs:
        return None
    target = next(t for t in platform.targets() if t.path_str == group.target)
    threads = pool_threads(platform, target)
    return sum(
        kernel_us(
            target.figures,
            k.work,
            group.efficiency,
            scale,
            k.nodes,
            k.parallel if threads > 1 else SERIAL,
            threads,
        )
        for k in found
    )


def banked(
    placement: Placement, platform: Platform, traffic: Mapping[str, Mapping[str, tuple[int, int]]], makespan
) -> tuple[Placement, dict[str, tuple[float, int]]]:
    """`placement` with every group of a root that declares memory banks priced at the banks its
    tensors, scratch and weights live in, and its total the makespan of the groups so priced
    (`makespan(groups)`); with each bank's traffic per run, (bytes, accesses), summed over them.

    The bank assignment is made by lowering, after placement (hetgen/lower/banks.py), which passes
    `traffic`: per group, per bank, the bytes of the buffers its kernels read and write there and
    the number of those accesses. A group's memory term is then, in place of its bytes at the CPU's
    one bandwidth, the sum over its banks of `Bank.access_us(share, accesses)`, where a bank's
    share is the group's bytes (its kernels' own count, as the search priced them) in the
    proportion of its buffers' bytes in that bank; the compute and the memory term combine as for
    any CPU group (`kernel_us`: the longer of the two). A reorder kernel's bytes are shared alike;
    the accesses' latency is charged once, to the group's main kernel. So explain's total, the
    placement's `total_us`, the manifest's estimates that `hetgen bench` replays and explain's
    per-bank lines are this one calculation. The search itself compared placements at the plain
    figures (the banks are assigned once the program is scheduled); the placement it returns is
    priced here. A root without banks: `placement` unchanged, and no rows."""
    root = platform.root.controller()
    if not root.memories or not isinstance(placement.choices, Choices):
        return placement, {}
    banks = {bank.name: bank for bank in root.memories}
    threads = pool_threads(platform, root)
    totals = {name: [0.0, 0] for name in banks}
    groups = []
    for group in placement.groups:
        parts = traffic.get(group.name, {})
        found, _ = group_kernels(group, placement.choices, placement.kernels)
        raw = sum(nbytes for nbytes, _ in parts.values())
        if group.target != root.path_str or not found or not raw:
            groups.append(group)
            continue
        cost, spent = 0.0, dict.fromkeys(parts, 0.0)
        for index, k in enumerate(found):
            memory = 0.0
            for name, (nbytes, accesses) in parts.items():
                share, count = k.work.bytes * nbytes / raw, accesses if index == 0 else 0
                us = banks[name].access_us(share, count)
                memory += us
                spent[name] += us
                totals[name][0] += share
                totals[name][1] += count
            split = k.parallel if threads > 1 else SERIAL
            cost += kernel_us(root.figures, k.work, group.efficiency, group.scale, k.nodes, split, threads, memory)
        groups.append(
            replace(group, cost_us=cost, bank_us=tuple((name, spent[name]) for name in banks if name in spent))
        )
    total = price(groups, placement.transfers, makespan(groups)).total_us
    return replace(placement, groups=tuple(groups), total_us=total), {
        name: (nbytes, accesses) for name, (nbytes, accesses) in totals.items()
    }


def placement_makespan_of(graph: Graph, platform: Platform, cascades=()):
    """The makespan function `with_choices` prices a placement's groups with (copies over their
    links and DMA engines; each of `cascades` one invocation, as lowering runs it)."""
    topology = Topology(platform)

    def copy_us(src: str, dst: str, nbytes: int) -> float:
        return sum(hop.us(nbytes) for hop in topology.copies(src, dst))

    return lambda groups: placement_makespan(groups, graph, platform, copy_us, cascades)


def variant_work(kernel: Kernel, spec) -> Work:
    """What the cost model prices a unit's chosen kernel at: its own figures, or (where its lowering
    counts none) the table's estimate from the shapes, as the table prices a kernel."""
    if kernel.flops > 0 or kernel.bytes_accessed > 0:
        return Work(float(kernel.flops), float(kernel.bytes_accessed))
    return Work(spec.flops, spec.bytes)
