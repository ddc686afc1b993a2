"""The static memory planner: buffers alive at the same time never share bytes, offsets are aligned,
and the arena it reports lies between the liveness lower bound and the sum of all buffers."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from hetgen.lower.memory import ALIGNMENT, Interval, plan_memory


@st.composite
def intervals(draw):
    count = draw(st.integers(0, 40))
    result = []
    for index in range(count):
        first = draw(st.integers(0, 30))
        last = draw(st.integers(first, first + 10))
        result.append(Interval(f"t{index}", draw(st.integers(0, 5000)), first, last))
    return result


# 100 in CI (as tests/test_arena_planner.py); HG_PLANNER_EXAMPLES raises both.
@settings(max_examples=int(os.environ.get("HG_PLANNER_EXAMPLES", "100")), deadline=None)
@given(intervals())
def test_live_buffers_never_overlap(buffers):
    plan = plan_memory(buffers)
    placed = {name: (offset, nbytes) for name, offset, nbytes in plan.buffers}
    for a in buffers:
        offset, _ = placed[a.name]
        assert offset % ALIGNMENT == 0
        assert offset + a.nbytes <= plan.arena_size
        for b in buffers:
            if a.name >= b.name or a.last < b.first or b.last < a.first or not a.nbytes or not b.nbytes:
                continue
            other, _ = placed[b.name]
            assert offset + a.nbytes <= other or other + b.nbytes <= offset, (a, b)
    assert plan.lower_bound <= plan.arena_size
    assert plan.total_bytes == sum(b.nbytes for b in buffers)


def test_disjoint_lifetimes_share_memory():
    plan = plan_memory([Interval("a", 1000, 0, 1), Interval("b", 1000, 2, 3), Interval("c", 1000, 4, 5)])
    assert plan.arena_size == 1024 and plan.lower_bound == 1000 and plan.total_bytes == 3000
