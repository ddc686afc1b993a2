"""Static memory planning: offsets in one arena, reused by liveness.

The planner is "greedy by size" (as in TFLite's arena planner): tensors are placed largest first,
each at the lowest aligned offset that does not overlap a tensor whose lifetime overlaps its own.
It reports three figures so users can judge it: the arena it chose, the sum of all tensors (no
reuse), and the liveness lower bound (the largest total of bytes live at one step), which no
planner can beat.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetgen.errors import PlacementError
from hetgen.ir import Graph
from hetgen.platform.model import Platform, Role, Target

ALIGNMENT = 64


@dataclass(frozen=True)
class Interval:
    """A buffer alive from step `first` to step `last`, inclusive."""

    name: str
    nbytes: int
    first: int
    last: int


@dataclass(frozen=True)
class MemoryPlan:
    buffers: tuple[tuple[str, int, int], ...]  # (buffer name, byte offset, bytes), sorted by name
    arena_size: int
    total_bytes: int  # the sum of all planned buffers, as if none were reused
    lower_bound: int  # the most bytes simultaneously live at any step

    def offset(self, name: str) -> int:
        return self._offsets[name]

    @property
    def _offsets(self) -> dict[str, int]:
        cached = self.__dict__.get("_offset_cache")
        if cached is None:
            cached = {name: offset for name, offset, _ in self.buffers}
            object.__setattr__(self, "_offset_cache", cached)
        return cached


def _aligned(value: int) -> int:
    return (value + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def plan_memory(intervals: list[Interval] | tuple[Interval, ...]) -> MemoryPlan:
    order = sorted(intervals, key=lambda iv: (-_aligned(iv.nbytes), iv.first, iv.name))
    placed: list[tuple[Interval, int]] = []
    offsets: dict[str, int] = {}
    for interval in order:
        size = _aligned(max(interval.nbytes, 1))
        conflicts = sorted(
            (offset, offset + _aligned(max(other.nbytes, 1)))
            for other, offset in placed
            if other.first <= interval.last and interval.first <= other.last
        )
        candidate = 0
        for start, end in conflicts:
            if candidate + size <= start:
                break
            candidate = max(candidate, end)
        offsets[interval.name] = candidate
        placed.append((interval, candidate))
    arena = max((offsets[iv.name] + _aligned(max(iv.nbytes, 1)) for iv in intervals), default=0)
    last_step = max((iv.last for iv in intervals), default=-1)
    delta = [0] * (last_step + 2)
    for iv in intervals:
        delta[iv.first] += iv.nbytes
        delta[iv.last + 1] -= iv.nbytes
    live, running = [], 0
    for change in delta:
        running += change
        live.append(running)
    return MemoryPlan(
        buffers=tuple(sorted((iv.name, offsets[iv.name], iv.nbytes) for iv in intervals)),
        arena_size=arena,
        total_bytes=sum(iv.nbytes for iv in intervals),
        lower_bound=max(live, default=0),
    )


def check_sizes(target: Target, plan: MemoryPlan, weights_bytes: int, tensors: Mapping[str, int]) -> None:
    """Refuse what the target cannot hold, with the numbers: a tensor past its address space
    (`memory.address_bytes` of its kind), or static data past what its programs can link
    (`memory.static_bytes`: the arena, kept static for callers that pass no workspace, plus the
    weights). `tensors` maps every tensor the target touches to its size in bytes."""
    kind = target.kind.name
    if target.address_bytes is not None and tensors:
        name, nbytes = max(sorted(tensors.items()), key=lambda item: item[1])
        if nbytes > target.address_bytes:
            raise PlacementError(
                f"{target.path_str}: tensor {name!r} needs {nbytes} bytes; kind '{kind}' addresses at most "
                f"{target.address_bytes} bytes (memory.address_bytes). Reduce the model's shapes"
            )
    static = plan.arena_size + weights_bytes
    if target.static_bytes is not None and static > target.static_bytes:
        largest = max(plan.buffers, key=lambda buffer: buffer[2], default=None)
        detail = f", largest tensor {largest[0]!r} {largest[2]} bytes" if largest else ""
        raise PlacementError(
            f"{target.path_str}: the static arena ({plan.arena_size} bytes{detail}) and weights ({weights_bytes} "
            f"bytes) need {static} bytes; kind '{kind}' links at most {target.static_bytes} bytes of static data "
            "(memory.static_bytes). Reduce the model's shapes, or declare a kind with a larger static_bytes "
            "(and the code model that links it)"
        )


def check_graph_fits(graph: Graph, platform: Platform) -> None:
    """Before placement: refuse a tensor that no target of the platform could hold at all.

    Inputs and outputs live in the caller's buffers: each must fit some target's address space.
    Every other tensor (intermediates, weights) lives in a program's static data or a device's
    local memory. Placement and lowering would otherwise build per-element tables and cost
    figures for terabyte tensors before the per-target checks of `check_sizes` could say no.
    """
    targets = [t for t in platform.targets() if t.role is not Role.COMPOSITE]
    address = _largest(t.address_bytes for t in targets)
    held = _largest(t.memory_bytes if t.role is Role.ACCELERATOR else t.static_bytes for t in targets)
    caller = set(graph.inputs) | set(graph.outputs)
    for name, tensor_type in sorted(graph.types.items(), key=lambda item: (-item[1].nbytes, item[0])):
        if name in caller:
            limit, what = address, "address it (the largest address space: {} bytes, memory.address_bytes)"
        else:
            limit, what = held, "hold it (the most static data or local memory: {} bytes, memory.static_bytes)"
        if limit is not None and tensor_type.nbytes > limit:
            raise PlacementError(
                f"tensor {name!r} {tuple(tensor_type.shape)} of {tensor_type.dtype.label} needs {tensor_type.nbytes} "
                f"bytes; no target of platform '{platform.name}' can {what.format(limit)}. Reduce the model's shapes"
            )
        if tensor_type.nbytes <= min(x for x in (address, held, 1 << 64) if x is not None):
            return  # sorted by size: every remaining tensor fits


def _largest(sizes) -> int | None:
    """The largest bound, or None (no bound) when any target has none."""
    sizes = list(sizes)
    return None if not sizes or None in sizes else max(sizes)
