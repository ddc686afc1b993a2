"""Turn the search's chosen candidates into a Placement: groups with their alternatives and reasons,
the transfers the assignment implies, and the operators no accelerator could take.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from hetgen.partition.cost import crossing_us, format_bytes, weight_load_us
from hetgen.partition.fused import legal_fusions
from hetgen.partition.pins import Pin
from hetgen.partition.placement import (
    Alternative,
    DmaUse,
    Group,
    LinkUse,
    Placement,
    Refusal,
    Tiling,
    Transfer,
    crossing_tensors,
    refusal_text,
)
from hetgen.partition.price import price
from hetgen.partition.space import Candidate, SearchSpace
from hetgen.partition.timeline import Lanes, placement_makespan, program_order
from hetgen.spec.invocation import group_plans, kernel_units_of, one_unit_per_invocation, residual_load_bytes
from hetgen.spec.tiling import Action, TilePlan

EPSILON_US = 1e-9


def assemble(
    space: SearchSpace,
    candidates: tuple[Candidate, ...],
    chosen: Sequence[int],
    *,
    mode: str,
    exact: bool,
    pins: Mapping[int, Pin],
    explained: bool = True,
) -> Placement:
    """The placement of the `chosen` candidates, priced at its makespan. `explained=False` leaves out
    what only explain reads (each group's alternatives, reason and refusals, the unclaimed operators):
    a third of the work, for a placement that is only scored (hetgen/partition/reported.py)."""
    by_id = {c.id: c for c in candidates}
    picked = sorted((by_id[cid] for cid in legal_fusions(space, candidates, chosen)), key=lambda c: c.last)
    loc_of_node = [0] * len(space.graph.nodes)
    for c in picked:
        for n in c.nodes:
            loc_of_node[n] = c.loc
    starts: dict[int, list[Candidate]] = {}
    for c in candidates:
        starts.setdefault(c.nodes[0], []).append(c)
    unclaimed_refusals = unclaimed_nodes(space) if explained else ()
    unclaimed = _unclaimed_text(unclaimed_refusals)
    unclaimed_reason = dict(unclaimed)
    refused = _refusals_by_node(space) if explained else {}
    for refusal in unclaimed_refusals:  # "no pattern matches" too
        refused.setdefault(space.node_index[refusal.node], []).append(refusal)
    target_of = {node.name: space.paths[loc_of_node[i]] for i, node in enumerate(space.graph.nodes)}
    groups = []
    routes: dict[tuple[int, int], tuple] = {}
    loads: dict[tuple, tuple[int, float]] = {}  # the plans kept alive by the kernel table: ids stay unique
    for k, c in enumerate(picked):
        alternatives = _alternatives(space, c, starts, loc_of_node, routes) if explained else ()
        crossing = _crossing(space, c, target_of)
        names = tuple(space.graph.nodes[n].name for n in c.nodes)
        reason = (
            _reason(space, c, mode, alternatives, pins, [unclaimed_reason.get(name) for name in names])
            if explained
            else ""
        )
        refusals = tuple(dict.fromkeys(r for n in c.nodes for r in refused.get(n, ())))
        groups.append(
            Group(
                f"g{k}",
                space.paths[c.loc],
                names,
                c.label,
                c.compute_us + _crossing_us(space, c, crossing),
                alternatives,
                reason,
                refusals,
                0.0 if space.aliases.issuperset(c.nodes) else space.launch_us(c.loc),  # a dropped reshape
                *_weights(space, c, loads),
                _tile_plans(space, c),
                c.efficiency,
                crossing=crossing,
            )
        )
    crossed: dict[tuple[int, int], tuple] = {}  # (from, to) -> the links and DMA engines a copy uses
    transfers = []
    for t in range(len(space.tensor_names)):
        for src, dst, us in space.tensor_transfers(t, loc_of_node):
            ways = crossed.get((src, dst))
            if ways is None:
                ways = crossed[src, dst] = (_links(space, src, dst), _dma(space, src, dst))
            transfers.append(
                Transfer(space.tensor_names[t], space.paths[src], space.paths[dst], space.tensor_bytes[t], us, *ways)
            )
    transfers = tuple(transfers)
    groups = in_program_order(space, groups)
    total = price(groups, transfers, placement_makespan(groups, space.graph, space.platform, _copy_us(space))).total_us
    return Placement(tuple(groups), transfers, total, mode, unclaimed, exact, unclaimed_refusals, kernels=space.kernels)


def chosen_makespan(space: SearchSpace, candidates: tuple[Candidate, ...], chosen: Sequence[int]) -> float:
    """The makespan `assemble` would price these candidates at, without building the rest of a Placement."""
    by_id = {c.id: c for c in candidates}
    picked = sorted((by_id[cid] for cid in legal_fusions(space, candidates, chosen)), key=lambda c: c.last)
    groups = [
        Group(f"g{k}", space.paths[c.loc], tuple(space.graph.nodes[n].name for n in c.nodes), c.label, c.compute_us)
        for k, c in enumerate(picked)
    ]
    groups = in_program_order(space, groups, renamed=False)
    return placement_makespan(groups, space.graph, space.platform, _copy_us(space))


def makespan_floor(candidates: tuple[Candidate, ...], chosen: Sequence[int]) -> float:
    """A lower bound of `chosen_makespan`, from the groups alone: the work of the busiest target.

    By the timing rules (hetgen/spec/timeline.py) every group is one step of its target's
    program (a controller's own work moves its clock; an accelerator's or a co-processor's
    sub-program moves its device's clock, which every submission only pushes later, and the
    program ends after every device's clock), so no target's total work exceeds the makespan.
    Summed here in another order than the timeline sums it, the bound is lowered by far more than
    that rounding can differ (n * 2**-53 relative, n the number of groups)."""
    by_id = {c.id: c for c in candidates}
    busy: dict[int, float] = {}
    for cid in chosen:
        c = by_id[cid]
        busy[c.loc] = busy.get(c.loc, 0.0) + c.compute_us
    return max(busy.values(), default=0.0) * (1.0 - 1e-9)


def in_program_order(space: SearchSpace, groups: list[Group], renamed: bool = True) -> list[Group]:
    """The groups in the order the program runs them (hetgen/partition/timeline.py: device work
    issued early, root work overlapping it), renamed g0, g1, ... in that order."""
    nodes = space.graph.nodes
    members = [[nodes[space.node_index[name]] for name in g.nodes] for g in groups]
    producer = {out: k for k, ns in enumerate(members) for node in ns for out in node.outputs if out}
    preds = [
        {producer[t] for node in ns for t in node.inputs if producer.get(t, k) != k} for k, ns in enumerate(members)
    ]
    order = program_order([g.target for g in groups], [g.cost_us for g in groups], preds, Lanes.of(space.platform))
    if not renamed:
        return [groups[k] for k in order]
    return [replace(groups[k], name=f"g{i}") for i, k in enumerate(order)]


def _copy_us(space: SearchSpace):
    hops: dict[tuple[str, str], tuple] = {}

    def copy_us(src: str, dst: str, nbytes: int) -> float:
        route = hops.get((src, dst))
        if route is None:
            route = hops[src, dst] = space.topology.copies(src, dst)
        return sum(hop.us(nbytes) for hop in route)

    return copy_us


def _links(space: SearchSpace, src: int, dst: int) -> tuple[LinkUse, ...]:
    return tuple(
        LinkUse(below, link.bandwidth_gbps, link.latency_us)
        for below, link in space.topology.hops(space.paths[src], space.paths[dst])
    )


def _crossing(space: SearchSpace, c: Candidate, target_of: Mapping[str, str]) -> frozenset[str]:
    """The tensors `c` shares with other places, where its device keeps them in DRAM in the
    controller's layout (the device model's linear_burst_bytes); none elsewhere."""
    if not space.targets[c.loc].figures.linear_burst_bytes:
        return frozenset()
    return crossing_tensors(space.graph, target_of, tuple(space.graph.nodes[n].name for n in c.nodes))


def _crossing_us(space: SearchSpace, c: Candidate, crossing: frozenset[str]) -> float:
    """What `c` takes more for the tensors it shares with other places (`crossing`) where its device
    keeps them in DRAM in the controller's layout (`cost.crossing_us`; 0 elsewhere)."""
    target = space.targets[c.loc]
    if not crossing:
        return 0.0
    nodes = [space.graph.nodes[n] for n in c.nodes]
    scale = space.calibration.scale_for(target)
    # the candidate's price has the graph's own inputs and outputs already (SearchSpace._candidates)
    priced = space.graph_io(nodes)
    return crossing_us(target, c.efficiency, scale, space.graph, nodes, space.kernels, crossing) - crossing_us(
        target, c.efficiency, scale, space.graph, nodes, space.kernels, priced
    )


def _weights(space: SearchSpace, c: Candidate, loads: dict) -> tuple[int, float]:
    """The weights a group loads into local memory, and their DMA time (as group_us prices them).

    They are what its units' tile plans load of the inputs that are constants, on its target: a
    function of the target, each unit's plan and which of its head's inputs are constants, so
    groups that agree on those share one answer in `loads` (repeated layers share their plans)."""
    target, nodes = space.targets[c.loc], [space.graph.nodes[n] for n in c.nodes]
    key = None
    if one_unit_per_invocation(target):
        units = kernel_units_of(nodes, space.graph, space.kernels)
        plans = group_plans(nodes, space.graph, target, space.kernels)
        constants = space.graph.constants
        key = (
            c.loc,
            tuple((id(plan), tuple(n in constants for n in chain[0].inputs)) for (chain, _), plan in zip(units, plans)),
        )
        if key in loads:
            return loads[key]
    weights = weight_load_us(target, space.graph, nodes, space.calibration.scale_for(target), space.kernels)
    if key is not None:
        loads[key] = weights
    return weights


def _dma(space: SearchSpace, src: int, dst: int) -> tuple[DmaUse, ...]:
    return tuple(
        DmaUse(hop.below, hop.dma_gbps)
        for hop in space.topology.copies(space.paths[src], space.paths[dst])
        if hop.dma_gbps is not None
    )


def _refusals_by_node(space: SearchSpace) -> dict[int, list[Refusal]]:
    """Every predicate refusal, per node it covers."""
    result: dict[int, list[Refusal]] = {}
    for r in space.matches.rejections:
        for n in r.nodes:
            result.setdefault(n, []).append(Refusal(space.graph.nodes[n].name, r.target, r.label, r.reason))
    return result


def _unclaimed_text(refusals: tuple[Refusal, ...]) -> tuple[tuple[str, str], ...]:
    by_node: dict[str, list[Refusal]] = {}
    for r in refusals:
        by_node.setdefault(r.node, []).append(r)
    return tuple((node, refusal_text(tuple(items))) for node, items in by_node.items())


def _tilings(space: SearchSpace, c: Candidate, starts) -> dict[int, tuple[float, list[Candidate]]]:
    """Per place, the cheapest way to run exactly `c`'s nodes there with other candidates."""
    nodes = c.nodes
    best: dict[int, tuple[float, list[Candidate]]] = {}
    for loc in range(len(space.paths)):
        table: list[tuple[float, list[Candidate]] | None] = [None] * (len(nodes) + 1)
        table[0] = (0.0, [])
        for k in range(len(nodes)):
            if table[k] is None:
                continue
            for option in starts.get(nodes[k], ()):
                end = k + len(option.nodes)
                if option.loc != loc or option.id == c.id or option.nodes != nodes[k:end]:
                    continue
                cost = table[k][0] + option.compute_us
                if table[end] is None or cost < table[end][0]:
                    table[end] = (cost, [*table[k][1], option])
        if table[-1] is not None:
            best[loc] = table[-1]
    return best


def _local_transfers(space: SearchSpace, c: Candidate, loc_of_node) -> list[tuple[int, int, int, float]]:
    return [
        (t, src, dst, us)
        for t in sorted({*c.inputs, *c.outputs})
        for src, dst, us in space.tensor_transfers(t, loc_of_node)
    ]


def _alternatives(
    space: SearchSpace, c: Candidate, starts, loc_of_node: list[int], routes: dict
) -> tuple[Alternative, ...]:
    old = _local_transfers(space, c, loc_of_node)
    old_us = c.compute_us + sum(item[3] for item in old)
    alternatives = []
    for loc, (compute, tiles) in _tilings(space, c, starts).items():
        for n in c.nodes:  # try it in place, then put it back: copying the map per option is quadratic
            loc_of_node[n] = loc
        new = _local_transfers(space, c, loc_of_node)
        for n in c.nodes:
            loc_of_node[n] = c.loc
        new_us = compute + sum(item[3] for item in new)
        why = _why(space, new_us - old_us, compute, c.compute_us, new, old, routes)
        label = "+".join(tile.label for tile in tiles)
        alternatives.append(Alternative(space.paths[loc], label, new_us, new_us - old_us, why))
    alternatives.sort(key=lambda a: (a.cost_us, a.target, a.label))
    return tuple(alternatives)


def _why(space: SearchSpace, delta: float, compute: float, chosen_compute: float, new, old, routes) -> str:
    """E.g. "+12.3 us: 0.8 MB over a 4 GB/s link; compute 3.1 us vs 5.0 us". `routes`: a dict
    that keeps each (from, to) pair's links once looked up."""
    parts = []
    old_copies, new_copies = {o[:3] for o in old}, {n[:3] for n in new}
    extra = [item for item in new if item[:3] not in old_copies and item[3] > 0]
    saved = [item for item in old if item[:3] not in new_copies and item[3] > 0]
    if extra:
        moved = sum(space.tensor_bytes[t] for t, _, _, _ in extra)
        links = [link for _, src, dst, _ in extra for link in _route(space, src, dst, routes)]
        if links:
            slowest = min(links, key=lambda link: link.bandwidth_gbps)
            parts.append(f"{format_bytes(moved)} over a {slowest.bandwidth_gbps:g} GB/s link")
        else:
            parts.append(f"{format_bytes(moved)} by DMA")
    if saved:
        parts.append(f"saves copying {format_bytes(sum(space.tensor_bytes[t] for t, _, _, _ in saved))}")
    if abs(compute - chosen_compute) > EPSILON_US:
        parts.append(f"compute {compute:.1f} us vs {chosen_compute:.1f} us")
    return f"{delta:+.1f} us: {'; '.join(parts) or 'same cost'}"


def _route(space: SearchSpace, src: int, dst: int, routes: dict) -> tuple:
    route = routes.get((src, dst))
    if route is None:
        route = routes[src, dst] = space.topology.route(space.paths[src], space.paths[dst])
    return route


def _reason(space, c: Candidate, mode: str, alternatives, pins: Mapping[int, Pin], unclaimed) -> str:
    pinned = sorted({pins[n].key for n in c.nodes if n in pins})
    parts = []
    if pinned:
        parts.append(f"pinned by {', '.join(repr(key) for key in pinned)}")
    if mode == "greedy":
        if c.loc in space.accelerators:
            parts.append("greedy: the largest match of the first accelerator claiming it")
        else:
            parts.append("greedy: no accelerator took it, so it falls back to a controller")
    elif alternatives:
        parts.append(f"least total latency of {len(alternatives) + 1} options")
    else:
        parts.append("the only target that can run it")
    if any(unclaimed):  # each accelerator's refusal is in the group's `refused`
        parts.append("no accelerator could take it")
    return "; ".join(parts)


def unclaimed_nodes(space: SearchSpace) -> tuple[Refusal, ...]:
    """Each accelerator's refusal of each operator no accelerator's pattern table claims."""
    if not space.accelerators:
        return ()
    accelerator_paths = [space.paths[loc] for loc in space.accelerators]
    claimed = {n for m in space.matches.matches if m.target in accelerator_paths for n in m.nodes}
    refused = _refusals_by_node(space)
    result = []
    for n, node in enumerate(space.graph.nodes):
        if n in claimed:
            continue
        for path in accelerator_paths:
            mine = [r for r in refused.get(n, ()) if r.target == path]
            mine = list(dict.fromkeys(mine)) or [Refusal(node.name, path, "", f"no pattern matches {node.op} here")]
            result.extend(mine)
    return tuple(result)


def _tile_plans(space: SearchSpace, c) -> tuple[Tiling, ...]:
    """The tile plans the cost model priced this group with (hetgen/spec/tiling.py), summarised."""
    target = space.targets[c.loc]
    if not one_unit_per_invocation(target):
        return ()
    nodes = [space.graph.nodes[n] for n in c.nodes]
    tilings = []
    plans = group_plans(nodes, space.graph, target, space.kernels)
    for (chain, _), plan in zip(kernel_units_of(nodes, space.graph, space.kernels), plans):
        if isinstance(plan, TilePlan):
            tilings.append(
                Tiling(
                    chain[0].name,
                    plan.split,
                    plan.tile_shape,
                    plan.count,
                    plan.moved(Action.LOAD),
                    plan.moved(Action.STORE),
                    plan.double_buffered,
                    plan.sram_bytes,
                    residual_load_bytes(plan, chain, space.kernels),
                )
            )
    return tuple(tilings)
