"""The arena planner (hetgen/lower/memory.py) searches several greedy orders and climbs from the best.
On any intervals: buffers live at one step never share bytes, offsets are aligned, the arena lies
between the liveness bound of the aligned buffers and what greedy by size (the planner of earlier
releases, kept here as the reference) needs, and the same intervals in any order get the same plan.
On real models, lowered for the host, the arena is within a few per cent of the liveness bound of its
own buffers, where greedy by size was up to 27 % above (benchmarks/memory_breakdown.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetgen import lower
from hetgen.lower.memory import ALIGNMENT, Interval, plan_memory
from hetgen.models import cnn, transformer
from hetgen.partition.search import place
from hetgen.pipeline import import_graph
from hetgen.platform.loader import load_platform_text

HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"


def aligned(nbytes: int) -> int:
    return (max(nbytes, 1) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def greedy_by_size(buffers: list[Interval]) -> int:
    """The arena of greedy by size, first fit: largest first, each at the lowest offset clear of the
    placed buffers whose lifetimes overlap its own (TFLite's arena planner, hetgen's until now)."""
    placed: list[tuple[Interval, int]] = []
    for buffer in sorted(buffers, key=lambda iv: (-aligned(iv.nbytes) if iv.nbytes else 0, iv.first, iv.name)):
        candidate = 0
        for start, end in sorted(
            (offset, offset + aligned(other.nbytes))
            for other, offset in placed
            if other.first <= buffer.last and buffer.first <= other.last
        ):
            if candidate + aligned(buffer.nbytes) <= start:
                break
            candidate = max(candidate, end)
        placed.append((buffer, candidate))
    return max((offset + aligned(buffer.nbytes) for buffer, offset in placed), default=0)


def aligned_bound(buffers: list[Interval]) -> int:
    steps = {step for buffer in buffers for step in (buffer.first, buffer.last)}
    return max(
        (sum(aligned(b.nbytes) for b in buffers if b.first <= step <= b.last) for step in steps),
        default=0,
    )


@st.composite
def intervals(draw):
    """Up to 60 buffers over 40 steps. Sizes from a few activation-like sizes (multiples of 4 KiB,
    where orders tie and greedy by size fragments) or any size from 0 bytes."""
    layer_sizes = draw(st.booleans())
    result = []
    for index in range(draw(st.integers(0, 60))):
        first = draw(st.integers(0, 40))
        last = first + draw(st.sampled_from((0, 0, 1, 1, 2, 3, 5, 12)))
        if layer_sizes:
            nbytes = draw(st.sampled_from((1, 2, 3, 4, 6, 8, 12, 16))) * 4096
        else:
            nbytes = draw(st.integers(0, 20000))
        result.append(Interval(f"t{index}", nbytes, first, last))
    return result


# 100 random interval sets in CI (400 took 19 s of the fast tier on a loaded machine, for the same
# property); HG_PLANNER_EXAMPLES=2000 searches harder.
PLANNER_EXAMPLES = int(os.environ.get("HG_PLANNER_EXAMPLES", "100"))


@settings(max_examples=PLANNER_EXAMPLES, deadline=None)
@given(intervals())
def test_a_plan_is_sound_and_never_larger_than_greedy_by_size(buffers):
    plan = plan_memory(buffers)
    placed = {name: offset for name, offset, _ in plan.buffers}
    assert sorted(placed) == sorted(b.name for b in buffers)
    for a in buffers:
        assert placed[a.name] % ALIGNMENT == 0
        assert placed[a.name] + a.nbytes <= plan.arena_size
        for b in buffers:
            if a.name < b.name and a.first <= b.last and b.first <= a.last and a.nbytes and b.nbytes:
                assert placed[a.name] + a.nbytes <= placed[b.name] or placed[b.name] + b.nbytes <= placed[a.name]
    assert plan.lower_bound <= aligned_bound(buffers) <= plan.arena_size <= greedy_by_size(buffers)
    assert plan.total_bytes == sum(b.nbytes for b in buffers)
    # deterministic: the plan depends on the intervals, not on the order they are given in
    assert plan_memory(list(reversed(buffers))) == plan


def test_a_chain_where_greedy_by_size_fragments_is_planned_at_its_bound():
    """Largest first puts b and d at 0, then c above d, and a (live with both c and b) above c: 10 KiB.
    Two buffers of 3 KiB and 4 KiB are live at every step: 7 KiB is enough."""
    buffers = [
        Interval("d", 4096, 0, 0),
        Interval("c", 3072, 0, 1),
        Interval("a", 3072, 1, 3),
        Interval("b", 4096, 2, 4),
    ]
    assert greedy_by_size(buffers) == 10240
    plan = plan_memory(buffers)
    assert plan.arena_size == plan.lower_bound == 7168


def test_a_long_residual_chain_plans_at_its_bound():
    """1,500 steps of a residual network (block input kept for the Add two steps on, a workspace per
    step): greedy by size leaves holes; the search ends at the bound, within its work budget."""
    buffers = []
    for block in range(500):
        step = 3 * block
        buffers += [
            Interval(f"x{block}", 4096 * (1 + block % 3), step, step + 3),
            Interval(f"y{block}", 8192, step + 1, step + 2),
            Interval(f"z{block}", 8192, step + 2, step + 3),
        ]
        buffers += [Interval(f"scratch{step + k}", 1024 * (5 + k), step + k, step + k) for k in range(3)]
    plan = plan_memory(buffers)
    assert plan.arena_size == aligned_bound(buffers) < greedy_by_size(buffers)


# Models lowered for the host. Greedy by size gave (arena / the liveness bound of its own buffers):
# resnet(32,64)@64 1.17, resnet@32 1.27, resnet-b2@48 1.27, densenet@32 1.24, densenet-g12@48 1.25,
# googlenet@96 1.13, googlenet@48 1.10, vgg@128 1.11, alexnet@224 1.12; the search reaches the bound
# on all but googlenet@48 (1.016) and the small transformer (1.003: 64-byte alignment).
MODELS = {
    "resnet(32,64)@64": lambda: cnn.resnet(widths=(32, 64), size=64),
    "resnet@32": lambda: cnn.resnet(size=32),
    "resnet-b2@48": lambda: cnn.resnet(widths=(24, 48, 96), blocks=2, size=48),
    "resnet18@64": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=64),
    "densenet@32": lambda: cnn.densenet(size=32),
    "densenet-g12@48": lambda: cnn.densenet(growth=12, size=48),
    "googlenet@96": lambda: cnn.googlenet(size=96),
    "googlenet@48": lambda: cnn.googlenet(size=48),
    "googlenet@224": lambda: cnn.googlenet(size=224),
    "vgg@128": lambda: cnn.vgg(size=128),
    "vgg@64": lambda: cnn.vgg(widths=(64, 128, 256), size=64),
    "alexnet@224": lambda: cnn.alexnet(size=224),
    "squeezenet@224": lambda: cnn.squeezenet(size=224),
    "mobilenetv2@224": lambda: cnn.mobilenet_v2(size=224),
    "shufflenet@32": lambda: cnn.shufflenet(size=32),
    "transformer": lambda: transformer.transformer_encoder(seq=128, dim=256, heads=4, layers=4, ffn=1024),
    "transformer-small": lambda: transformer.transformer_encoder(),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_models_arena_is_within_a_few_percent_of_its_liveness_bound(name):
    graph, platform = import_graph(MODELS[name](), {}), load_platform_text(HOST)
    plan = lower.lower(graph, platform, place(graph, platform)).root.memory
    assert plan.arena_size <= 1.05 * plan.lower_bound, (plan.arena_size, plan.lower_bound)
