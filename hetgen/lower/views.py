"""One buffer for a view and its parts (hetgen/partition/concat_views.py and split_views.py decided
which operators are views): a Concat's inputs are ranges of its output's buffer, so their producers
write there; a Split's or Slice's outputs are ranges of its input's buffer, so their readers read
there; each at the offset the view records, and nothing copies.

The holder's buffer is planned in place of them all, live over the union of their lifetimes: a
Concat input's producer runs before the Concat's readers, and its other readers may run after them;
a Split's input stays live while any of its outputs is read (no kernel writes over its inputs, so
no reader clobbers the bytes another range still needs). Nested views (a DenseNet block: each
layer's Concat reads the previous one's output; a Split of a Concat's output) fold into the
outermost holder, so a whole block is one buffer, each layer's output a range of it. The figures
the plan reports (`total_bytes`, `lower_bound`) are those of the buffers planned, the outermost
ones; the ranges are listed with their offsets so every step names them as any other buffer,
and `MemoryPlan.views` says which buffer holds each (hetgen/lower/verify.py checks liveness over
the holders).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from hetgen.lower.memory import Interval, MemoryPlan, plan_memory
from hetgen.partition.concat_views import View


def plan_with_views(intervals: Sequence[Interval], views: Sequence[View], nbytes: Mapping[str, int]) -> MemoryPlan:
    """`plan_memory` of `intervals`, each of `views`' inputs planned inside its output (module doc);
    `nbytes`: each tensor's size."""
    if not views:
        return plan_memory(list(intervals))
    inside = {part: (view.holder, offset) for view in views for part, offset in view.parts}

    def outermost(name: str) -> tuple[str, int]:
        offset = 0
        while name in inside:
            name, at = inside[name]
            offset += at
        return name, offset

    holders = {view.holder for view in views}
    spans: dict[str, tuple[int, int]] = {}  # each holder's lifetime: the union of its ranges'
    planned = []
    for interval in intervals:
        holder, _ = outermost(interval.name)
        if holder == interval.name and holder not in holders:
            planned.append(interval)
            continue
        first, last = spans.get(holder, (interval.first, interval.last))
        spans[holder] = (min(first, interval.first), max(last, interval.last))
    planned += [Interval(name, nbytes[name], first, last) for name, (first, last) in sorted(spans.items())]
    plan = plan_memory(planned)
    ranges = []
    for part in sorted(inside):
        holder, offset = outermost(part)
        if holder in spans:  # a range the program touches on this target
            ranges.append((part, plan.offset(holder) + offset, nbytes[part], holder))
    buffers = tuple(sorted((*plan.buffers, *((name, at, size) for name, at, size, _ in ranges))))
    views_of = tuple(sorted((name, holder) for name, _, _, holder in ranges))
    return dataclasses.replace(plan, buffers=buffers, views=views_of)
