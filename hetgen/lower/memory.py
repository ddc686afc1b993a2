"""Static memory planning: offsets in one arena, reused by liveness.

Placing buffers of known lifetimes in the least memory is NP-hard (dynamic storage allocation), so
the planner searches, in three parts, and keeps the smallest arena it finds:

1. Several orders, each placed greedily: "greedy by size" (TFLite's arena planner, and the plan
   every earlier hetgen release made, so no arena grows), longest lifetime first, most conflicting
   bytes first (TVM's greedy-by-conflicts), largest size x lifetime, "greedy by breadth" (Pisarchyk
   & Lee: the buffers of the step with the most bytes live first), and start time. Each buffer goes
   to the lowest aligned offset that clears every placed buffer whose lifetime overlaps its own
   (first fit) or, for some orders, to the smallest gap that holds it (best fit, as TFLite's GPU
   planner and XLA's heap simulator choose).
2. A hill climb on the best orders (as TVM's USMP `hill_climb`): a buffer that reaches above the
   bound (3.) trades places with a buffer below it, or with a neighbour of one, or moves to the
   front; the change is kept when neither the arena nor the bytes above the bound grow (the second
   measure lets a plan held up in several places come down one place at a time), and after a run
   of changes that shrink neither the climb restarts from the next order. Only the buffers from the
   first moved one on are placed again.
3. It stops at the liveness lower bound of the aligned buffers, which no plan can beat.

Conflicts (pairs of buffers live at one step) are found once by a sweep over start times, so a
placement costs the number of conflicts rather than the number of pairs; every search step is
charged to a work budget and a count, never to a clock, so the same intervals always get the same
offsets, and a graph of thousands of steps plans in a bounded time.

The plan reports three figures so users can judge it: the arena it chose, the sum of all tensors (no
reuse), and the liveness lower bound (the largest total of bytes live at one step).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from hetgen.errors import PlacementError
from hetgen.platform.model import Target

ALIGNMENT = 64
# The search's bounds, in work (buffers placed + conflicts visited; one placement of every buffer
# costs their number plus twice the conflicting pairs): the greedy orders together, the climb, and
# the climb's changes. Measured (benchmarks/bench_arena_planner.py): 5,000-node graphs in 0.06-0.25 s
# (a few seconds where tens of tensors stay live across thousands of steps: conflicts dominate,
# and greedy by size took 3-4 times as long), at most about 0.2 s where the climb spends its
# budget without reaching the bound, models of tens of layers in a few milliseconds.
ORDERS_BUDGET = 1_000_000
CLIMB_BUDGET = 300_000
CLIMB_STEPS = 300
CLIMB_PATIENCE = 30


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
    # (buffer, the buffer it is a range of): a Concat's input inside its output (hetgen/lower/views.py),
    # planned there, not on its own; the holder is the outermost one, a buffer of its own
    views: tuple[tuple[str, str], ...] = ()

    def offset(self, name: str) -> int:
        return self._offsets[name]

    def holder(self, name: str) -> str:
        """The buffer whose bytes hold `name`'s: its own, or the one it is a range of."""
        holders = self.__dict__.get("_holder_cache")
        if holders is None:
            holders = dict(self.views)
            object.__setattr__(self, "_holder_cache", holders)
        return holders.get(name, name)

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
    """Offsets in one arena for `intervals`, the smallest arena the search finds (module docstring);
    the same intervals, in any order, always get the same offsets."""
    buffers = sorted(intervals, key=lambda iv: (iv.name, iv.first, iv.last, iv.nbytes))
    sizes = [_aligned(max(iv.nbytes, 1)) for iv in buffers]
    conflicts = _conflicts(buffers)
    live = _live_bytes(buffers, sizes)
    floor = max(live, default=0)  # the aligned buffers' liveness bound: no plan is smaller
    best = None
    starts: list[tuple[int, int, list[int]]] = []  # (arena, rank, order) of each distinct order placed
    work, cost = 0, len(buffers) + sum(map(len, conflicts))
    for rank, (order, best_fit) in enumerate(_candidate_orders(buffers, sizes, conflicts, live)):
        placement = _Placement(order, sizes, conflicts, best_fit)
        work += placement.work
        if best is None or placement.arena < best.arena:
            best = placement
        if all(order != other for _, _, other in starts):
            starts.append((placement.arena, rank, order))
        if best.arena <= floor or work + cost > ORDERS_BUDGET:
            break  # before the next order is computed
    arena, offsets = best.arena, list(best.offsets)  # every list of orders has one (empty ones too)
    if arena > floor:
        arena, offsets = _climb([order for _, _, order in sorted(starts)], sizes, conflicts, floor, arena, offsets)
    return MemoryPlan(
        buffers=tuple(sorted((iv.name, offset, iv.nbytes) for iv, offset in zip(buffers, offsets))),
        arena_size=arena,
        total_bytes=sum(iv.nbytes for iv in buffers),
        lower_bound=max(_live_bytes(buffers, [iv.nbytes for iv in buffers]), default=0),
    )


def _conflicts(buffers: list[Interval]) -> list[list[int]]:
    """Per buffer, the buffers live at one of its steps: a sweep over start times, so the cost is
    the number of such pairs, not of all pairs."""
    conflicts: list[list[int]] = [[] for _ in buffers]
    active: dict[int, None] = {}  # live at the sweep's step, in the order they started
    ending: list[tuple[int, int]] = []  # (last step, buffer) of the active ones, a heap
    for index in sorted(range(len(buffers)), key=lambda i: (buffers[i].first, i)):
        while ending and ending[0][0] < buffers[index].first:
            del active[heapq.heappop(ending)[1]]
        for other in active:
            conflicts[index].append(other)
            conflicts[other].append(index)
        active[index] = None
        heapq.heappush(ending, (buffers[index].last, index))
    return conflicts


def _live_bytes(buffers: list[Interval], sizes: list[int]) -> list[int]:
    """Per step, the bytes of the buffers live at it."""
    delta = [0] * (max((iv.last for iv in buffers), default=-1) + 2)
    for iv, size in zip(buffers, sizes):
        delta[iv.first] += size
        delta[iv.last + 1] -= size
    return list(itertools.accumulate(delta))


def _candidate_orders(buffers: list[Interval], sizes: list[int], conflicts: list[list[int]], live: list[int]):
    """The orders to place greedily, each with its fit (True: best fit), the most useful first: a
    large graph may have budget for the first few only. Computed one at a time, for that reason."""
    count = len(buffers)
    first = [iv.first for iv in buffers]
    steps = [iv.last - iv.first + 1 for iv in buffers]

    def by(key) -> list[int]:
        return sorted(range(count), key=key)

    # greedy by size as earlier releases sorted it (a buffer of no bytes last): never a larger arena
    by_size = by(lambda i: (-_aligned(buffers[i].nbytes), first[i], i))
    yield by_size, False
    by_lifetime = by(lambda i: (-steps[i], -sizes[i], first[i], i))
    yield by_lifetime, False
    weight = [sizes[i] + sum(sizes[j] for j in conflicts[i]) for i in range(count)]
    yield by(lambda i: (-weight[i], -sizes[i], first[i], i)), False
    yield by_size, True
    yield by(lambda i: (-sizes[i] * steps[i], first[i], i)), False
    peak = _peak_steps(buffers, live)
    by_breadth = by(lambda i: (-peak[i][0], peak[i][1], -sizes[i], first[i], i))
    yield by_breadth, False
    yield by_lifetime, True
    yield by_breadth, True
    yield by(lambda i: (first[i], -sizes[i], i)), False


def _peak_steps(buffers: list[Interval], live: list[int]) -> list[tuple[int, int]]:
    """Per buffer, the most bytes live at one step of its lifetime and that step (the earliest of
    equals): range maxima from a sparse table, O(steps log steps) to build, O(1) a buffer."""
    width = len(live)
    table = [[value * width + (width - 1 - step) for step, value in enumerate(live)]]
    span = 1
    while 2 * span <= width:
        table.append(list(map(max, table[-1], table[-1][span:])))
        span *= 2
    peaks = []
    for iv in buffers:
        level = (iv.last - iv.first + 1).bit_length() - 1
        row = table[level]
        code = max(row[iv.first], row[iv.last + 1 - (1 << level)])
        peaks.append((code // width, width - 1 - code % width))
    return peaks


class _Placement:
    """Buffers placed in `order`, each at the lowest aligned offset clear of the buffers placed
    before it whose lifetimes overlap its own (or, with `best_fit`, in the smallest such gap that
    holds it, above them all where none does). `tops[p]`: the arena after the first p + 1."""

    def __init__(self, order: list[int], sizes: list[int], conflicts: list[list[int]], best_fit: bool = False):
        self.order = list(order)
        self.sizes, self.conflicts, self.best_fit = sizes, conflicts, best_fit
        self.position = [0] * len(order)
        for position, index in enumerate(self.order):
            self.position[index] = position
        self.offsets = [0] * len(order)
        self.tops = [0] * len(order)
        self.work = self.place_from(0)

    @property
    def arena(self) -> int:
        return self.tops[-1] if self.tops else 0

    def place_from(self, start: int) -> int:
        """Place the buffers from position `start` on again (those before keep their offsets); return
        the work done: buffers placed and conflicts visited."""
        sizes, offsets, position, best_fit = self.sizes, self.offsets, self.position, self.best_fit
        top = self.tops[start - 1] if start else 0
        work = 0
        for here in range(start, len(self.order)):
            index = self.order[here]
            size = sizes[index]
            neighbours = self.conflicts[index]
            work += 1 + len(neighbours)
            taken = sorted([(offsets[j], offsets[j] + sizes[j]) for j in neighbours if position[j] < here])
            candidate, fit, fit_gap = 0, -1, -1
            for begin, end in taken:
                gap = begin - candidate
                if gap >= size:
                    if not best_fit:
                        break
                    if fit < 0 or gap < fit_gap:
                        fit, fit_gap = candidate, gap
                if end > candidate:
                    candidate = end
            else:
                if fit >= 0:
                    candidate = fit
            offsets[index] = candidate
            if candidate + size > top:
                top = candidate + size
            self.tops[here] = top
        return work


def _climb(starts, sizes, conflicts, floor: int, arena: int, offsets: list[int]) -> tuple[int, list[int]]:
    """Improve on the best greedy plan (`arena`, `offsets`) by changing the orders it came from, as
    TVM's USMP hill climb does; first fit. A change is kept when (arena, bytes above `floor`) does
    not grow; after CLIMB_PATIENCE changes that do not shrink it, the climb goes on from the next
    order. Bounded by CLIMB_STEPS changes and CLIMB_BUDGET work."""
    count = len(sizes)
    choose = _Sequence()
    steps = work = 0
    cost = count + sum(map(len, conflicts))  # of placing every buffer
    for order in itertools.cycle(starts):
        if steps >= CLIMB_STEPS or work + cost > CLIMB_BUDGET or arena <= floor:
            break
        plan = _Placement(order, sizes, conflicts)
        work += plan.work
        if plan.arena < arena:
            arena, offsets = plan.arena, list(plan.offsets)
        stale = 0
        while stale < CLIMB_PATIENCE and steps < CLIMB_STEPS and work < CLIMB_BUDGET and arena > floor:
            steps += 1
            previous = list(plan.order)
            start = _move(plan, choose, floor)
            if start is None:
                stale += 1
                continue
            before = (plan.arena, _excess(plan, floor))
            moved = previous[start:]  # the same buffers as plan.order[start:], in the earlier order
            saved_offsets, saved_tops = [plan.offsets[i] for i in moved], plan.tops[start:]
            _reindex(plan, start)
            work += plan.place_from(start) + 2 * count - start
            after = (plan.arena, _excess(plan, floor))
            stale = 0 if after < before else stale + 1
            if after > before:  # undo
                plan.order[start:], plan.tops[start:] = moved, saved_tops
                for index, offset in zip(moved, saved_offsets):
                    plan.offsets[index] = offset
                _reindex(plan, start)
            elif plan.arena < arena:
                arena, offsets = plan.arena, list(plan.offsets)
    return arena, offsets


def _excess(plan: _Placement, floor: int) -> int:
    """The bytes of buffers above `floor`: shrinks as each of several buffers that hold the arena up
    comes down, before the arena itself does."""
    return sum(max(0, offset + size - floor) for offset, size in zip(plan.offsets, plan.sizes))


def _move(plan: _Placement, choose: _Sequence, floor: int) -> int | None:
    """Change `plan.order` around a buffer that ends above `floor`; return the first position
    changed (None: no change). Three moves: it trades places with a buffer placed before it that
    it conflicts with (so it goes lower), or that buffer trades places with one placed before it
    that it conflicts with, or it moves to the front."""
    order, position = plan.order, plan.position
    above = [i for i in order if plan.offsets[i] + plan.sizes[i] > floor]
    chosen = above[choose.below(len(above))]
    below = [j for j in plan.conflicts[chosen] if position[j] < position[chosen]]
    kind = choose.below(10)
    if kind < 3 or not below:
        here = position[chosen]
        if here == 0:
            return None
        order[1 : here + 1] = order[:here]
        order[0] = chosen
        return 0
    other = below[choose.below(len(below))]
    further = [k for k in plan.conflicts[other] if position[k] < position[other]]
    if kind < 6 and further:
        chosen, other = other, further[choose.below(len(further))]
    a, b = position[chosen], position[other]
    order[a], order[b] = order[b], order[a]
    return min(a, b)


def _reindex(plan: _Placement, start: int) -> None:
    for here in range(start, len(plan.order)):
        plan.position[plan.order[here]] = here


class _Sequence:
    """A fixed pseudo-random sequence (a 64-bit LCG, not Python's `random`, whose algorithms may
    change between releases): the same intervals always get the same plan."""

    def __init__(self) -> None:
        self.state = 0x853C49E6748FEA9B

    def below(self, bound: int) -> int:
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return (self.state >> 33) % bound


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
