"""Static memory planning: offsets in one arena, reused by liveness.

The planner is "greedy by size" (as in TFLite's arena planner): tensors are placed largest first,
each at the lowest aligned offset that does not overlap a tensor whose lifetime overlaps its own.
It reports three figures so users can judge it: the arena it chose, the sum of all tensors (no
reuse), and the liveness lower bound (the largest total of bytes live at one step), which no
planner can beat.
"""

from __future__ import annotations

from dataclasses import dataclass

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
