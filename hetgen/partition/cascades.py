"""Which consecutive groups on a tiled accelerator run as cascades, and which layer by layer.

A run of groups placed one after the other on the same tiled accelerator (hetgen/spec/invocation.py:
one kernel unit per invocation), each one kernel unit of a window operator (a convolution, a
depthwise convolution, a window pool, with a fused residual Add or not) whose activation is its
predecessor's output and that output's only reader, may run as one cascade: one invocation, stripe
by stripe through SRAM (hetgen/spec/cascade.py). Each run is cut into cascades and single groups
at the least price: a single group at its cost as placed (its tile plan and its launch), a cascade
at one launch and its command list's time (hetgen/spec/cascade_program.py: `program_us`); of the
cuts whose placement is as fast as the cheapest's (SRAM_TOLERANCE: float rounding), the one of least
SRAM peak is kept (`least_sram`: an Ethos-U65's arena cache, which the price does not weigh, is left
free where that costs no time; never traded for time, so more SRAM never makes the placement slower).
`options: {cascade: false}` in the platform file turns it off. This is the one place the choice is made: `with_cascades` puts it in `Placement.cascades`,
which explain shows, and claims it: `place` calls it last, lowering runs each cascade as one
invocation of its command list (hetgen/spec/cascade_program.py; hetgen/lower/__init__.py), so the
placement is priced as that program: the cascade's price is its first group's cost, its later
groups cost nothing of their own (their work is in the cascade's), and the makespan is the
scheduler's program with the cascade's groups in one invocation (hetgen/partition/timeline.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from hetgen.errors import InternalError
from hetgen.ir import Graph
from hetgen.ops.base import Unsupported
from hetgen.partition.cost import Topology
from hetgen.partition.placement import Cascade, Group, Placement, crossing_tensors
from hetgen.partition.price import price
from hetgen.partition.timeline import placement_makespan
from hetgen.platform.model import Platform, Target
from hetgen.spec.cascade import SRAM_TOLERANCE, CascadePlan, Layer, cascade_layer, fitting_plan, stripe_plans
from hetgen.spec.cascade_program import cascade_program, program_us
from hetgen.spec.invocation import group_plans, kernel_units_of, one_unit_per_invocation, tile_rates, unit_inputs
from hetgen.spec.tile_shapes import UnitOp, tensor_names, unit_op
from hetgen.spec.tiling import TilePlan

# A cascade of more layers than this is not tried (its stripes only get shorter and its weights more).
MAX_LAYERS = 8


@dataclass(frozen=True)
class _Link:
    group: Group
    layer: Layer
    plan: TilePlan
    op: UnitOp  # the unit as its tiles see it (its tensors named by position)
    names: Mapping[str, str]  # its position names (in0, out0, ...) -> the graph's tensors
    reads: str  # the unit's activation
    writes: str  # its output
    # the positions of its tensors the controller writes or reads, on a device that keeps those in
    # DRAM in its linear layout (placement.crossing_tensors; empty elsewhere), with their element bytes
    linear: frozenset[tuple[str, int]] = frozenset()


def cascading(platform: Platform) -> bool:
    """Whether the platform file lets cascades be chosen (`options: {cascade: false}` does not)."""
    options = platform.options if isinstance(platform.options, Mapping) else {}
    return bool(options.get("cascade", True))


def with_cascades(placement: Placement, graph: Graph, platform: Platform, priced: dict | None = None) -> Placement:
    """The placement with the cascades its price chooses (none where the platform turns them off),
    claimed: priced as the program lowering emits for them (`claimed`). A placement that already
    holds cascades is returned as it is. `priced`: a dict that keeps each cascade's plan and price
    across calls for placements of one graph on one platform (hetgen/partition/reported.py prices
    many placements that share most of their runs); None: kept for this call only."""
    priced = {} if priced is None else priced
    fastest = fastest_cascades(placement, graph, platform, priced)
    if fastest is placement:  # no cascade pays (or none may be chosen)
        return fastest
    return least_sram(fastest, placement, graph, platform, priced)


def fastest_cascades(placement: Placement, graph: Graph, platform: Platform, priced: dict | None = None) -> Placement:
    """The placement with the cascades of least price, claimed, before `least_sram` spares SRAM:
    its total is `with_cascades`'s within SRAM_TOLERANCE, for a fraction of the work (least_sram
    re-cuts every run at each lower cap), so a search that compares placements by their reported
    totals prices them with this (hetgen/partition/reported.py). Where the platform turns cascades
    off, the placement has no kernels or already holds cascades, or none pays: `placement` itself."""
    if not cascading(platform) or placement.kernels is None or placement.cascades:
        return placement
    found = choose_cascades(placement, graph, platform, priced=priced)
    return claimed(placement, found, graph, platform) if found else placement


def least_sram(
    fastest: Placement, placement: Placement, graph: Graph, platform: Platform, priced: dict | None = None
) -> Placement:
    """Of the placements with cascades whose total is within SRAM_TOLERANCE of `fastest`'s, the one
    whose tiled accelerators' SRAM peak (`sram_peak`) is least: SRAM is spent only where it pays,
    as a cascade's stripe height is (hetgen/spec/cascade.py), here between cascades and running
    their layers one by one. An Ethos-U65's arena cache is its npu's SRAM, which the price does
    not weigh (a tile or cascade buffer there costs no time of its own): without this the fastest
    cut takes it all for a share of a percent. Each step caps the cascades' SRAM below the peak
    so far (`choose_cascades(..., cap=)`) and keeps the cut that lowers the peak and stays within
    the tolerance; the first that does not ends it (`placement`: the groups without cascades)."""
    limit = fastest.total_us * (1 + SRAM_TOLERANCE)
    chosen, peak = fastest, sram_peak(fastest, graph, platform)
    while peak > 0:
        found = choose_cascades(placement, graph, platform, cap=peak - 1, priced=priced)
        trial = claimed(placement, found, graph, platform) if found else placement
        trial_peak = sram_peak(trial, graph, platform)
        if trial.total_us > limit or trial_peak >= peak:
            break
        chosen, peak = trial, trial_peak
    return chosen


def sram_peak(placement: Placement, graph: Graph, platform: Platform) -> int:
    """The SRAM the placement's tiled accelerators take, summed over them: each one's largest
    buffer set, a cascade's (`Cascade.sram_bytes`) or a single group's tile plan's."""
    targets = {t.path_str: t for t in platform.targets()}
    by_name = {node.name: node for node in graph.nodes}
    peaks: dict[str, int] = {}
    for cascade in placement.cascades:
        peaks[cascade.target] = max(peaks.get(cascade.target, 0), cascade.sram_bytes)
    in_cascade = {name for cascade in placement.cascades for name in cascade.groups}
    for group in placement.groups:
        target = targets.get(group.target)
        if group.name in in_cascade or target is None or not one_unit_per_invocation(target):
            continue
        for plan in group_plans([by_name[name] for name in group.nodes], graph, target, placement.kernels):
            if isinstance(plan, TilePlan):
                peaks[group.target] = max(peaks.get(group.target, 0), plan.sram_bytes)
    return sum(peaks.values())


def claimed(placement: Placement, cascades: tuple[Cascade, ...], graph: Graph, platform: Platform) -> Placement:
    """`placement` running `cascades`: each cascade's first group costs the cascade's price, its
    later groups nothing (their launches included), and the total is the makespan of the program
    with each cascade one invocation."""
    first = {c.groups[0]: c for c in cascades}
    later = {name for c in cascades for name in c.groups[1:]}
    groups = []
    for group in placement.groups:
        if group.name in first:
            group = replace(group, cost_us=first[group.name].cost_us)
        elif group.name in later:
            group = replace(group, cost_us=0.0, launch_us=0.0, weight_us=0.0)
        groups.append(group)
    topology = Topology(platform)

    def copy_us(src: str, dst: str, nbytes: int) -> float:
        return sum(hop.us(nbytes) for hop in topology.copies(src, dst))

    makespan = placement_makespan(groups, graph, platform, copy_us, cascades)
    total = price(groups, placement.transfers, makespan).total_us
    return replace(placement, groups=tuple(groups), cascades=cascades, total_us=total)


def choose_cascades(
    placement: Placement, graph: Graph, platform: Platform, cap: int | None = None, priced: dict | None = None
) -> tuple[Cascade, ...]:
    """The cascades of least price; with `cap`, only cascades whose buffers take at most `cap`
    bytes of SRAM (`least_sram`). `priced`: as `with_cascades` keeps it."""
    priced = {} if priced is None else priced
    targets = {t.path_str: t for t in platform.targets()}
    readers: dict[str, int] = {}
    for node in graph.nodes:
        for tensor in node.inputs:
            if tensor:
                readers[tensor] = readers.get(tensor, 0) + 1
    outputs = set(graph.outputs)
    by_name = {node.name: node for node in graph.nodes}
    found: list[Cascade] = []
    run: list[_Link] = []
    for group in (*placement.groups, None):
        link = _link(group, graph, by_name, targets, placement) if group is not None else None
        chained = (
            link is not None
            and run
            and run[-1].group.target == link.group.target
            and link.reads == run[-1].writes
            and readers.get(run[-1].writes) == 1
            and run[-1].writes not in outputs
        )
        if not chained:
            found += _cut(run, targets, cap, priced)
            run = []
        if link is not None:
            run.append(link)
    return tuple(found)


def _link(group: Group, graph: Graph, by_name, targets: Mapping[str, Target], placement: Placement) -> _Link | None:
    target = targets.get(group.target)
    if target is None or not one_unit_per_invocation(target):
        return None
    nodes = [by_name[name] for name in group.nodes]
    units = kernel_units_of(nodes, graph, placement.kernels)
    if len(units) != 1:
        return None
    (chain, epilogue), plan = units[0], group_plans(nodes, graph, target, placement.kernels)[0]
    if not isinstance(plan, TilePlan):
        return None
    inputs = unit_inputs(chain, placement.kernels)
    op = unit_op(chain, graph, epilogue, inputs)
    flops = sum(tile.flops for tile in plan.tiles)
    # each layer at its own pattern's efficiency, as its group alone is priced: a pool's on the
    # vector unit, not at the MAC array's peak (it was 1.0: int8 MaxPool cascades 1.36x under)
    layer = cascade_layer(op, flops, tile_rates(target, group.efficiency, chain))
    if layer is None:
        return None
    layer = replace(layer, name=chain[0].name)
    outputs = [name for name in chain[-1].outputs if name]
    names = tensor_names(chain, inputs)
    linear: frozenset[tuple[str, int]] = frozenset()
    if target.figures.linear_burst_bytes:
        target_of = {node: g.target for g in placement.groups for node in g.nodes}
        crossing = crossing_tensors(graph, target_of, group.nodes)
        linear = frozenset(
            (position, graph.types[name].dtype.itemsize) for position, name in names.items() if name in crossing
        )
    return _Link(group, layer, plan, op, names, inputs[0], outputs[0], linear)


def cascade_units(
    cascade: Cascade, placement: Placement, graph: Graph, platform: Platform
) -> tuple[tuple[UnitOp, ...], tuple[Layer, ...], tuple[Mapping[str, str], ...]]:
    """A chosen cascade's units as its stripes run them (hetgen/spec/cascade_program.py), its
    layers as priced, and per unit its position names -> the graph's tensors."""
    targets = {t.path_str: t for t in platform.targets()}
    by_name = {node.name: node for node in graph.nodes}
    groups = {g.name: g for g in placement.groups}
    links = [_link(groups[name], graph, by_name, targets, placement) for name in cascade.groups]
    if any(link is None for link in links):
        raise InternalError(f"cascade {', '.join(cascade.groups)}: a group is no longer a cascade layer")
    return (
        tuple(link.op for link in links),
        tuple(link.layer for link in links),
        tuple(link.names for link in links),
    )


def _cut(run: Sequence[_Link], targets: Mapping[str, Target], cap: int | None, seen: dict) -> list[Cascade]:
    """The run cut into cascades and single groups at the least price (dynamic programming over
    where each cascade ends).

    A network repeats its blocks, and a cascade's plan and price depend on its layers' shapes and
    operators, never on their names: each is worked out once per sequence of layer signatures
    (without this, a chain of 1,000 int8 convolutions spent 16 CPU s here); `seen` keeps them by
    target, SRAM capacity and signatures, for this run, the other runs and the caller's other
    placements."""
    if len(run) < 2:
        return []
    target = targets[run[0].group.target]
    capacity = target.memory_bytes or 0
    if cap is not None:
        capacity = min(capacity, cap)
    signatures = [_signature(link) for link in run]
    comparable = None not in signatures
    costs = [link.group.cost_us for link in run]
    # the whole cut, by what it reads of the run: a placement that differs from another elsewhere
    # keeps this run's cut (hetgen/partition/reported.py prices many such)
    whole = ("cut", target.path_str, capacity, tuple(signatures), tuple(costs))
    cut = seen.get(whole) if comparable else None
    if cut is None:
        # best[i]: (price of the first i groups, the cascades among them as (start, end, plan, price))
        best: list[tuple[float, tuple[tuple[int, int, CascadePlan, float], ...]]] = [(0.0, ())]
        for end in range(1, len(run) + 1):
            choice = (best[end - 1][0] + costs[end - 1], best[end - 1][1])
            for start in range(max(0, end - MAX_LAYERS), end - 1):
                layers = (target.path_str, *signatures[start:end])
                key = (capacity, layers)
                if comparable and key in seen:
                    priced = seen[key]
                else:
                    priced = _priced(run[start:end], capacity, target, seen if comparable else {}, layers)
                    if comparable:
                        seen[key] = priced
                if priced is None:
                    continue
                plan, cost_us = priced
                total = best[start][0] + cost_us
                # a cascade is kept only where it is cheaper than its layers one by one
                if total < choice[0] - 1e-9 and cost_us < sum(costs[start:end]):
                    choice = (total, (*best[start][1], (start, end, plan, cost_us)))
            best.append(choice)
        cut = best[-1][1]
        if comparable:
            seen[whole] = cut
    return [
        _cascade(run[start:end], replace(plan, layers=tuple(link.layer.name for link in run[start:end])), cost_us)
        for start, end, plan, cost_us in cut
    ]


def _signature(link: _Link) -> tuple | None:
    """What a cascade's plan and price read of one link, its names left out; None where some part
    cannot be compared by value (then its cascades are worked out each time)."""
    op = link.op
    signature = (
        replace(link.layer, name=""),
        op.node.op,
        op.node.attrs,
        op.node.opset,
        op.input_types,
        op.output_types,
        op.constant,
        op.epilogue,
        op.scalars,
        link.group.launch_us,
        link.linear,  # its tensors kept linear in DRAM move in bursts of their own (program_us)
    )
    try:
        hash(signature)
    except TypeError:
        return None
    return signature


def _priced(
    links: Sequence[_Link], capacity: int, target: Target, seen: dict, signatures: tuple
) -> tuple[CascadePlan, float] | None:
    """The cascade's plan and price: the first group's launch and its command list as lowering
    emits it, timed as a tile plan's (`program_us`); None where no stripe height fits or a layer's
    row tile has no kernel. `seen` keeps the plans of every stripe height by `signatures`, and the
    price by (`signatures`, stripe): a capacity chooses among them (`least_sram` asks for many)."""
    layers = [link.layer for link in links]
    plans = seen.get(("plans", signatures))
    if plans is None:
        plans = seen["plans", signatures] = stripe_plans(layers)
    plan = fitting_plan(plans, capacity)
    if plan is None:
        return None
    key = ("stripe", plan.stripe, signatures)
    if key not in seen:
        first = links[0].group
        launch = target.figures.launch_us or 0.0
        scale = first.launch_us / launch if launch and first.launch_us else 1.0  # a calibrated target's scale
        try:
            program = cascade_program([link.op for link in links], layers, plan.stripe)
            seen[key] = first.launch_us + scale * program_us(program, layers, [link.linear for link in links])
        except Unsupported:
            seen[key] = None
    return None if seen[key] is None else (plan, seen[key])


def _cascade(links: Sequence[_Link], plan: CascadePlan, cost_us: float) -> Cascade:
    """The cascade of these links at the plan's stripe height, at its price."""
    first = links[0].group
    return Cascade(
        first.target,
        tuple(link.group.name for link in links),
        plan.layers,
        plan.stripe,
        plan.stripes,
        plan.rows,
        plan.buffer_rows,
        plan.sram_bytes,
        plan.dma_bytes,
        plan.move_bytes,
        cost_us,
        max(link.plan.sram_bytes for link in links),
        sum(link.plan.dma_bytes for link in links),
        sum(link.group.cost_us for link in links),
    )
