"""The arena planner (hetgen/lower/memory.py) on 5,000-node graphs: its time and arena beside greedy by
size (the earlier planner; its reference copy in tests/test_arena_planner.py).

    python benchmarks/bench_arena_planner.py [--nodes 5000] [--graphs resnet,random32]

The graphs are bench_placement.py's (tests/partition_fixtures.py), lowered for the host; the
intervals the lowering hands to `plan_memory` for the root are planned again here, by each planner,
and timed alone (the best of --repeat runs; a shared machine only slows a run). `arena / bound`:
the arena over the liveness lower bound of the same buffers.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import hetgen.lower as lowering  # noqa: E402
from hetgen.lower.memory import plan_memory  # noqa: E402
from hetgen.partition.search import place  # noqa: E402
from hetgen.platform.loader import load_platform_text  # noqa: E402
from partition_fixtures import residual_net, transformer, wide_dag, wide_random_dag  # noqa: E402
from test_arena_planner import greedy_by_size  # noqa: E402

HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"


def root_intervals(graph) -> list:
    """The intervals `plan_memory` is given for the root target when `graph` is lowered for the host."""
    seen = []

    def spy(intervals):
        seen.append(list(intervals))
        return plan_memory(intervals)

    platform = load_platform_text(HOST)
    lowering.plan_memory = spy
    try:
        lowering.lower(graph, platform, place(graph, platform))
    finally:
        lowering.plan_memory = plan_memory
    return seen[-1]


def best_time(function, intervals, repeat: int):
    elapsed, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function(intervals)
        elapsed = min(elapsed, time.perf_counter() - started)
    return elapsed, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--graphs", default="resnet,transformer,inception32,random32")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    builders = {
        "resnet": lambda: residual_net(max(1, args.nodes // 5)),
        "transformer": lambda: transformer(max(1, args.nodes // 21)),
        "inception8": lambda: wide_dag(args.nodes, 8),
        "inception32": lambda: wide_dag(args.nodes, 32),
        "random16": lambda: wide_random_dag(random.Random(1), args.nodes, 16),
        "random32": lambda: wide_random_dag(random.Random(2), args.nodes, 32),
    }
    print(f"{'graph':12} {'buffers':>7} {'greedy ms':>10} {'arena/bound':>11} {'planner ms':>10} {'arena/bound':>11}")
    for name in args.graphs.split(","):
        intervals = root_intervals(builders[name]())
        greedy_s, greedy_arena = best_time(greedy_by_size, intervals, args.repeat)
        planner_s, plan = best_time(plan_memory, intervals, args.repeat)
        bound = max(plan.lower_bound, 1)
        print(
            f"{name:12} {len(intervals):7} {greedy_s * 1e3:10.0f} {greedy_arena / bound:11.3f}"
            f" {planner_s * 1e3:10.0f} {plan.arena_size / bound:11.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
