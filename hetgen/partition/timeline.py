"""The program's time when devices run concurrently: one set of rules for the price and the simulation.

A controller submits a device's sub-program and goes on with its own work; it waits only before the
first step that reads the device's results, before its next submission to that device, or at its
end (hetgen/lower/schedule.py writes the program that way). Timed by these rules:

- the controller has a clock: its own work (a kernel, a copy it makes) moves it by that work's time;
- each device it drives has a clock: a submission at controller time t starts at
  max(t, the device's clock) (its inputs were copied in before t) and moves the device's clock to
  start + the sub-program's time (its invocation overhead included: the launch);
- a wait moves the controller's clock to the device's clock;
- the program's time is its controller's final clock (a co-processor's program, timed the same way,
  is the time of the submission that invoked it).

`Clocks` holds the rules; `makespan` applies them to a step list. The placement's price (`placement_makespan`) applies
them to the program lowering will emit for it, built by the same scheduler from the placement's
groups, each step at the cost model's estimate; `hetgen bench` (`replay`) applies them to the
program the project was generated with (`program_manifest`), each device's sub-program at what the
simulator counted and each controller's kernels at their estimate (controllers run natively, so
their kernels are not simulated). `program_order` chooses the order of the groups: device work is
issued as early as its inputs allow, and controller work that does not depend on it runs meanwhile.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hetgen.ir import Graph
from hetgen.lower.alias import alias_source
from hetgen.lower.invocation import one_unit_per_invocation
from hetgen.lower.schedule import (
    SCall,
    Schedule,
    Scheduler,
    SCopyIn,
    SCopyOut,
    SInvoke,
    SWait,
    UnitInfo,
    child_devices,
)
from hetgen.platform.device_model import DEFAULT_CLOCK_MHZ
from hetgen.platform.model import Platform, Role, Target


@dataclass(frozen=True)
class Work:
    """The controller itself is busy for `us` (a kernel, a copy it makes)."""

    us: float


@dataclass(frozen=True)
class Submit:
    """Device `device` gets a sub-program that takes `us` (launch included)."""

    device: str
    us: float


@dataclass(frozen=True)
class Await:
    device: str


Timed = Work | Submit | Await


class Clocks:
    """A controller's clock and the clocks of the devices it drives, moved by the rules above."""

    def __init__(self) -> None:
        self.now = 0.0
        self.free: dict[str, float] = {}

    def work(self, us: float) -> None:
        self.now += us

    def submit(self, device: str, us: float) -> None:
        self.free[device] = max(self.now, self.free.get(device, 0.0)) + us

    def wait(self, device: str) -> None:
        self.now = max(self.now, self.free.get(device, 0.0))

    def end(self) -> float:
        return max([self.now, *self.free.values()])


def makespan(steps: Iterable[Timed]) -> float:
    """The controller's final clock after `steps`, by the rules above."""
    clocks = Clocks()
    for step in steps:
        if isinstance(step, Work):
            clocks.work(step.us)
        elif isinstance(step, Submit):
            clocks.submit(step.device, step.us)
        else:
            clocks.wait(step.device)
    return clocks.end()


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
    groups, graph: Graph, platform: Platform, transfer_us: Callable[[str, str, int], float]
) -> float:
    """The makespan of the program lowering emits for `groups` (in program order): the scheduler of
    hetgen/lower/schedule.py run over the groups (one unit each), timed step by step by `Clocks`
    with each group at its cost and each copy at `transfer_us(from place, to place, bytes)`."""
    if not groups:
        return 0.0
    schedule, groups = placement_schedule(groups, graph, platform, timing_only=True)
    root = platform.root.controller()
    types, nbytes = graph.types, {}

    def entry_us(controller: Target, entry) -> float:
        clocks = Clocks()
        for step in entry:
            if isinstance(step, SCall):
                clocks.work(groups[step.unit].cost_us)
            elif isinstance(step, (SCopyIn, SCopyOut)):
                size = nbytes.get(step.src.tensor)
                if size is None:
                    size = nbytes[step.src.tensor] = types[step.src.tensor].nbytes
                clocks.work(transfer_us(step.src.target.path_str, step.dst.target.path_str, size))
            elif isinstance(step, SInvoke):
                device = schedule.devices[controller][step.device]
                memory = device.host if device.host is not None else device
                program = schedule.entries[memory][step.program]
                if device.host is not None:
                    us = entry_us(memory, program)
                else:
                    us = sum(groups[s.unit].cost_us for s in program if isinstance(s, SCall))
                clocks.submit(device.path_str, us)
            elif isinstance(step, SWait):
                clocks.wait(schedule.devices[controller][step.device].path_str)
        return clocks.end()

    return entry_us(root, schedule.entries[root][0])


def placement_schedule(groups, graph: Graph, platform: Platform, *, timing_only: bool = False) -> tuple[Schedule, list]:
    """The schedule lowering emits for `groups` (in program order, one unit each), and the groups
    it runs: all but the pure reshapes lowering drops (their readers read the source)."""
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
    schedule = Scheduler(
        units, root, set(graph.constants), set(graph.outputs), set(graph.inputs), isolated, timing_only=timing_only
    ).run()
    return schedule, kept


# --- the simulation: the generated program, at what the devices counted -------------------------


def program_manifest(lowered) -> dict:
    """The controllers' programs as `replay` reads them from the manifest: per controller path, its
    devices (path, kind of timing) and its entries' steps."""
    from hetgen.lower.program import Call, DeviceCopyIn, DeviceCopyOut, Invoke, ProgramRole, Wait

    by_path = {p.target.path_str: p for p in lowered.programs}
    result = {}
    for program in lowered.programs:
        if program.role is ProgramRole.ACCELERATOR:
            continue
        entries = []
        for entry in program.entries:
            steps = []
            for step in entry:
                if isinstance(step, Call):
                    steps.append({"call": list(step.unit.nodes)})
                elif isinstance(step, (DeviceCopyIn, DeviceCopyOut)):
                    steps.append({"copy": step.device, "bytes": step.nbytes})
                elif isinstance(step, Invoke):
                    steps.append({"invoke": step.device, "program": step.program})
                elif isinstance(step, Wait):
                    steps.append({"wait": step.device})
            entries.append(steps)
        devices = []
        for path in program.devices:
            child = by_path.get(path) or by_path[_host_of(lowered, path)]  # a composite: its host's program
            devices.append({"path": child.target.path_str, **_copy_timing(child)})
        result[program.target.path_str] = {"devices": devices, "entries": entries}
    return result


def _host_of(lowered, path: str) -> str:
    for program in lowered.programs:
        if program.role.value == "coprocessor" and program.target.path_str.rsplit("/", 1)[0] == path:
            return program.target.path_str
    return path


def _copy_timing(program) -> dict:
    """How the device counts one copy to or from its controller (hg_sim.c, hg_link_account)."""
    model, link = program.device_model, program.counted_link
    if model is not None:
        return {
            "clock_mhz": model.clock_mhz,
            "dma_setup_cycles": model.dma_setup_cycles,
            "dma_bytes_per_cycle": model.dma_bytes_per_cycle,
            "link_latency_cycles": model.link_latency_cycles,
            "link_bytes_per_cycle": model.link_bytes_per_cycle,
        }
    if link is not None:
        return {
            "clock_mhz": link.clock_mhz,
            "dma_setup_cycles": 0,
            "dma_bytes_per_cycle": 0.0,
            "link_latency_cycles": link.latency_cycles,
            "link_bytes_per_cycle": link.bytes_per_cycle,
        }
    return {"clock_mhz": DEFAULT_CLOCK_MHZ, "dma_setup_cycles": 0, "dma_bytes_per_cycle": 0.0}


def copy_cycles(timing: Mapping, nbytes: int) -> int:
    """The cycles a device counts for one copy of `nbytes` (hg_sim_dma_cycles + hg_link_account)."""
    cycles = 0
    rate = float(timing.get("dma_bytes_per_cycle") or 0.0)
    if rate > 0.0:
        cycles += int(timing.get("dma_setup_cycles", 0)) + (math.ceil(nbytes / rate) if nbytes else 0)
    link_rate = float(timing.get("link_bytes_per_cycle") or 0.0)
    if link_rate > 0.0:
        cycles += int(float(timing.get("link_latency_cycles", 0.0)) + nbytes / link_rate + 0.5)
    return cycles


def replay(
    programs: Mapping[str, Mapping],
    root: str,
    call_us: Callable[[str, Sequence[str]], float],
    invocation_us: Callable[[str, int], float],
) -> float:
    """The generated program's time: the root's entry 0 timed by `makespan`, each controller's
    kernel call at `call_us(controller, nodes)`, each copy at what its device counts for it, each
    accelerator's sub-program at `invocation_us(device, program)` (what the simulator counted), each
    co-processor's sub-program replayed the same way."""

    def entry_us(path: str, index: int) -> float:
        program = programs[path]
        devices = program["devices"]
        steps: list[Timed] = []
        for step in program["entries"][index]:
            if "call" in step:
                steps.append(Work(call_us(path, step["call"])))
            elif "copy" in step:
                timing = devices[step["copy"]]
                steps.append(Work(copy_cycles(timing, step["bytes"]) / float(timing["clock_mhz"])))
            elif "invoke" in step:
                device = devices[step["invoke"]]["path"]
                if device in programs:
                    steps.append(Submit(device, entry_us(device, step["program"])))
                else:
                    steps.append(Submit(device, invocation_us(device, step["program"])))
            elif "wait" in step:
                steps.append(Await(devices[step["wait"]]["path"]))
        return makespan(steps)

    return entry_us(root, 0)
