"""The throughput objective: frames pipelined across devices (hetgen/spec/frames.py).

A placement's steady-state **period** is the work of its busiest resource per frame: the root's own
kernels and the copies it makes, or one of its devices' invocations (a co-processor's whole
sub-program, its accelerators' work inside it). Frames in flight keep every resource busy at once,
so the period, not one frame's makespan, decides frames per second.

The search (`for_throughput`) starts from the latency search's choice and from greedy's, and climbs
as hetgen/partition/overlap.py does: one group at a time to another target that runs exactly its
operators, a move kept when (period, makespan) drops. It is not exact; its gap is measured against
a lower bound: the least serial time of any placement (the exact search's optimum: every group and
every copy, one after another) spread evenly over the resources that could run work, and the busiest
resource can do no less than that share. The bound and the gap are at the search's prices, before
kernel choices and cascades re-price the groups (hetgen/partition/choices.py, cascades.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from hetgen.partition.assemble import _copy_us, in_program_order
from hetgen.partition.cost import Topology
from hetgen.partition.fused import legal_fusions
from hetgen.partition.overlap import climb
from hetgen.partition.placement import Group
from hetgen.partition.space import Candidate, SearchSpace
from hetgen.partition.timeline import estimated_timing, placement_program
from hetgen.platform.model import Platform
from hetgen.spec.frames import frames_for, frames_timeline, resource_busy, stages
from hetgen.spec.timeline import run_timeline

EVALUATION_BUDGET = 8_000  # period evaluations x groups, per start (overlap.py's climb: 20,000 once)
EPSILON_US = 1e-6


@dataclass(frozen=True)
class Pipeline:
    """A placement run as a pipeline: each resource's work per frame and groups, the period it
    sets, and the pipelined program's own period and one frame's latency at the estimates."""

    busy_us: Mapping[str, float]  # resource path -> its work per frame (the root: kernels and copies)
    stages: Mapping[str, tuple[str, ...]]  # resource path -> the groups it runs (a device: every group below it)
    period_us: float  # the busiest resource's work: the objective
    latency_us: float  # one frame alone (the placement's makespan)
    frames_period_us: float  # the period the generated order reaches (hetgen/spec/frames.py), estimated
    frames_latency_us: float  # one frame's start to finish inside that pipeline
    depth: int  # frames in flight: the root entry's stages
    bottleneck: str  # the busiest resource
    bound_us: float = 0.0  # at the search's prices, no placement's period is below this (0.0: not computed)
    searched_us: float = 0.0  # the chosen placement's period at the search's prices (what bound_us bounds)
    latency_period_us: float = 0.0  # the latency placement's period, priced as this one (0.0: not computed)

    @property
    def fps(self) -> float:
        return 1e6 / self.frames_period_us if self.frames_period_us > 0 else 0.0

    @property
    def gap(self) -> float | None:
        """How much shorter the least period may be, as a fraction of the bound (at the search's prices)."""
        return None if not self.bound_us else self.searched_us / self.bound_us - 1.0

    def to_json(self) -> dict:
        return {
            "period_us": round(self.period_us, 3),
            "frames_period_us": round(self.frames_period_us, 3),
            "fps": round(self.fps, 3),
            "latency_us": round(self.latency_us, 3),
            "frames_latency_us": round(self.frames_latency_us, 3),
            "depth": self.depth,
            "bottleneck": self.bottleneck,
            "bound_us": round(self.bound_us, 3),
            "searched_us": round(self.searched_us, 3),
            "latency_period_us": round(self.latency_period_us, 3),
            "resources": [
                {"path": path, "busy_us": round(us, 3), "groups": list(self.stages.get(path, ()))}
                for path, us in self.busy_us.items()
            ],
        }


def pipeline_of(
    groups, graph, platform: Platform, copy_us, cascades=(), bound_us: float = 0.0, searched_us: float = 0.0
) -> Pipeline:
    """The pipeline of `groups` (in program order), priced as the placement is."""
    program, kept = placement_program(groups, graph, platform, cascades)
    timing = estimated_timing(program, kept, copy_us)
    busy = resource_busy(program, timing)
    latency = run_timeline(program, timing)
    frames = frames_timeline(program, timing, frames_for(len(stages(program.controllers[program.root].entries[0]))))
    root = program.root
    lanes = [d.path for d in program.controllers[root].devices]
    members: dict[str, list[str]] = {root: []}
    for group in groups:
        home = next((lane for lane in lanes if _below(group.target, lane)), root)
        members.setdefault(home, []).append(group.name)
    for lane in lanes:
        busy.setdefault(lane, 0.0)
    bottleneck = max(busy, key=lambda path: (busy[path], path == root))
    return Pipeline(
        MappingProxyType(dict(busy)),
        MappingProxyType({path: tuple(names) for path, names in members.items()}),
        busy[bottleneck],
        latency,
        frames.period_us,
        frames.latency_us,
        frames.depth,
        bottleneck,
        bound_us,
        searched_us,
    )


def _below(target: str, lane: str) -> bool:
    """Whether `target` runs inside the root's device `lane` (a co-processor's lane is its host: every
    target of its composite is in it)."""
    subtree = lane.rsplit("/", 1)[0] if lane.endswith("/host") else lane
    return target == lane or target == subtree or target.startswith(subtree + "/")


def placement_pipeline(
    placement, graph, platform: Platform, bound_us: float = 0.0, searched_us: float = 0.0
) -> Pipeline:
    topology = Topology(platform)

    def copy_us(src: str, dst: str, nbytes: int) -> float:
        return sum(hop.us(nbytes) for hop in topology.copies(src, dst))

    return pipeline_of(placement.groups, graph, platform, copy_us, placement.cascades, bound_us, searched_us)


def chosen_period(space: SearchSpace, candidates: tuple[Candidate, ...], chosen: Sequence[int]) -> tuple[float, float]:
    """(period, makespan) of the candidates `chosen`, as `assemble` would price them."""
    by_id = {c.id: c for c in candidates}
    picked = sorted((by_id[cid] for cid in legal_fusions(space, candidates, chosen)), key=lambda c: c.last)
    groups = [
        Group(f"g{k}", space.paths[c.loc], tuple(space.graph.nodes[n].name for n in c.nodes), c.label, c.compute_us)
        for k, c in enumerate(picked)
    ]
    groups = in_program_order(space, groups, renamed=False)
    if not groups:
        return 0.0, 0.0
    program, kept = placement_program(groups, space.graph, space.platform)
    timing = estimated_timing(program, kept, _copy_us(space))
    busy = resource_busy(program, timing)
    return max(busy.values()), run_timeline(program, timing)


def for_throughput(
    space: SearchSpace, candidates: tuple[Candidate, ...], starts: Sequence[Sequence[int]]
) -> tuple[list[int], float, float]:
    """The choice of least (period, makespan) the climb finds from each of `starts`, with its period
    and the period of the first start (the latency search's choice)."""
    best_choice, best, first = None, None, None
    for start in starts:
        score = chosen_period(space, candidates, list(start))
        if first is None:
            first = score[0]
        chosen, score = climb(
            candidates,
            start,
            score,
            lambda trial: chosen_period(space, candidates, trial),
            _better,
            EVALUATION_BUDGET // max(len(start), 1),
        )
        if best is None or _better(score, best):
            best_choice, best = chosen, score
    return best_choice, best[0], first


def _better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Less period, ties (within EPSILON_US) broken by less makespan."""
    if a[0] < b[0] - EPSILON_US:
        return True
    return abs(a[0] - b[0]) <= EPSILON_US and a[1] < b[1] - EPSILON_US


def period_bound(space: SearchSpace, serial_optimum_us: float) -> float:
    """No placement's period is below its serial time over the resources that share it: the
    least serial time of any placement (the exact search's optimum) over the number of runnable
    targets (each target is one resource; a copy is made by one controller)."""
    return serial_optimum_us / max(len(space.targets), 1)
