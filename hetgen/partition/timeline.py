"""The placement's side of the program's time: the order the program runs the groups in, and the
price of a placement, the program lowering will emit for it timed by the one interpreter
(hetgen/spec/timeline.py: `run_timeline`) at the cost model's estimates.

`placement_makespan` builds the program with the scheduler lowering uses (hetgen/spec/schedule.py)
from the placement's groups and times its steps (`timed_program`) with `Estimated`: each group at
its cost, each copy at the topology's transfer time. `hetgen bench` replays the generated program's
steps through the same interpreter at what the devices counted (hetgen/runtime/replay.py).
`program_order` chooses the order of the groups: device work is issued as early as its inputs
allow, and controller work that does not depend on it runs meanwhile.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hetgen.ir import Graph
from hetgen.platform.model import Platform, Role
from hetgen.spec.alias import alias_source
from hetgen.spec.invocation import one_unit_per_invocation
from hetgen.spec.schedule import Schedule, Scheduler, UnitInfo, child_devices, timed_program
from hetgen.spec.timeline import Estimated, ProgramSteps, call_shares, run_timeline

# --- the order of the groups -------------------------------------------------------------------


@dataclass(frozen=True)
class Lanes:
    """Where each target's work runs as the root controller sees it: -1 on the root itself, else
    the index of the root's device whose subtree holds the target; and which of those devices
    take one unit per invocation (so consecutive work there is not one submission)."""

    lane: Mapping[str, int]
    isolated: frozenset[int]

    @staticmethod
    def of(platform: Platform) -> Lanes:
        root = platform.root.controller()
        devices = child_devices(root, platform.root)
        lane = {root.path_str: -1}
        for index, device in enumerate(devices):
            for target in device.walk():
                lane[target.path_str] = index
        isolated = frozenset(
            i for i, d in enumerate(devices) if d.role is not Role.COMPOSITE and one_unit_per_invocation(d)
        )
        return Lanes(lane, isolated)


def program_order(
    targets: Sequence[str], costs: Sequence[float], preds: Sequence[Iterable[int]], lanes: Lanes
) -> list[int]:
    """A list schedule of groups (given in a valid order, with their target, cost and predecessors):
    the order the program runs them in. While the root works, the schedule keeps track of when each
    device frees up; at each step it extends the open submission, else submits ready work to an idle
    device (the longest remaining path first), else runs ready root work, else submits to a busy
    device (the root will wait for it). O(n log n)."""
    n = len(targets)
    preds = [tuple(p) for p in preds]
    succs: list[list[int]] = [[] for _ in range(n)]
    for k, ps in enumerate(preds):
        for p in ps:
            succs[p].append(k)
    bottom = [0.0] * n  # the longest path from a group's start to the end, by cost
    for k in range(n - 1, -1, -1):
        bottom[k] = costs[k] + max((bottom[s] for s in succs[k]), default=0.0)
    lane = [lanes.lane[t] for t in targets]
    waiting = [len(ps) for ps in preds]
    ready: dict[int, list[tuple[float, int]]] = {}
    for k in range(n):
        if not waiting[k]:
            heapq.heappush(ready.setdefault(lane[k], []), (-bottom[k], k))
    now, free, finish = 0.0, {}, [0.0] * n
    open_lane, open_start = None, 0.0
    order: list[int] = []
    while len(order) < n:
        pick = None
        if open_lane is not None and open_lane not in lanes.isolated and ready.get(open_lane):
            k = ready[open_lane][0][1]
            if all(lane[p] == open_lane or finish[p] <= open_start for p in preds[k]):
                pick = open_lane
        if pick is None:
            idle = [lk for lk, heap in ready.items() if lk >= 0 and heap and free.get(lk, 0.0) <= now]
            if idle:
                pick = min(idle, key=lambda lk: ready[lk][0])
            elif ready.get(-1):
                pick = -1
            else:
                pick = min((lk for lk, heap in ready.items() if heap), key=lambda lk: (free.get(lk, 0.0), lk))
        _, k = heapq.heappop(ready[pick])
        order.append(k)
        inputs_at = max((finish[p] for p in preds[k] if lane[p] != pick or pick < 0), default=0.0)
        if pick < 0:
            now = max(now, inputs_at) + costs[k]
            finish[k] = now
            open_lane = None
        elif pick == open_lane and pick not in lanes.isolated:
            free[pick] = free.get(pick, 0.0) + costs[k]
            finish[k] = free[pick]
        else:
            now = max(now, inputs_at, free.get(pick, 0.0))  # waits before the next submission there
            open_lane, open_start = pick, now
            free[pick] = now + costs[k]
            finish[k] = free[pick]
        for s in succs[k]:
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(ready.setdefault(lane[s], []), (-bottom[s], s))
    return order


# --- the price: the program lowering will emit, at the cost model's estimates -------------------


def placement_makespan(
    groups, graph: Graph, platform: Platform, transfer_us: Callable[[str, str, int], float], cascades=()
) -> float:
    """The makespan of the program lowering emits for `groups` (in program order): the scheduler of
    hetgen/spec/schedule.py run over the groups (one unit each), its steps timed by `run_timeline`
    with each group at its cost and each copy at `transfer_us(from place, to place, bytes)`.
    `cascades` (`Placement.cascades`): each one's groups run as one invocation, as lowering runs them;
    its price is its first group's cost (hetgen/partition/cascades.py: `claim_cascades`)."""
    if not groups:
        return 0.0
    program, groups = placement_program(groups, graph, platform, cascades)
    return run_timeline(program, estimated_timing(program, groups, transfer_us))


def placement_program(groups, graph: Graph, platform: Platform, cascades=()) -> tuple[ProgramSteps, list]:
    """The timed steps of the program lowering emits for `groups`, and the groups it runs."""
    schedule, groups = placement_schedule(groups, graph, platform, timing_only=True, cascades=cascades)
    types, sizes = graph.types, {}

    def nbytes(tensor: str) -> int:
        size = sizes.get(tensor)
        if size is None:
            size = sizes[tensor] = types[tensor].nbytes
        return size

    root = platform.root.controller()
    return timed_program(schedule, root, [tuple(g.nodes) for g in groups], nbytes), groups


def estimated_timing(
    program: ProgramSteps, groups: Iterable, transfer_us: Callable[[str, str, int], float]
) -> Estimated:
    """The cost model's timing of `program`: each call at its share of its group's cost."""
    return Estimated(
        call_shares(program, ((g.name, tuple(g.nodes), g.cost_us) for g in groups)), transfer_us, program.accelerators
    )


def placement_schedule(
    groups, graph: Graph, platform: Platform, *, timing_only: bool = False, cascades=()
) -> tuple[Schedule, list]:
    """The schedule lowering emits for `groups` (in program order, one unit each), and the groups
    it runs: all but the pure reshapes lowering drops (their readers read the source). A cascade's
    later groups join its first group's invocation."""
    later = {name for cascade in cascades for name in cascade.groups[1:]}
    nodes = {node.name: node for node in graph.nodes}
    targets = {t.path_str: t for t in platform.targets()}
    units, kept, rename = [], [], {}
    for group in groups:
        members = [nodes[name] for name in group.nodes]
        source = alias_source(members[0], graph) if len(members) == 1 else None
        if source is not None:
            rename[members[0].outputs[0]] = rename.get(source, source)
            continue
        produced = {out for node in members for out in node.outputs if out}
        inputs = tuple(
            dict.fromkeys(rename.get(t, t) for node in members for t in node.inputs if t and t not in produced)
        )
        units.append(UnitInfo(targets[group.target], inputs, tuple(sorted(produced))))
        kept.append(group)
    isolated = frozenset(t for t in platform.targets() if one_unit_per_invocation(t))
    root = platform.root.controller()
    joined = frozenset(index for index, group in enumerate(kept) if group.name in later)
    schedule = Scheduler(
        units,
        root,
        set(graph.constants),
        set(graph.outputs),
        set(graph.inputs),
        isolated,
        timing_only=timing_only,
        joined=joined,
    ).run()
    return schedule, kept
