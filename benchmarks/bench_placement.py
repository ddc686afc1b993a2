"""How long placement takes on 5,000-node graphs.

    python benchmarks/bench_placement.py            # residual CNN, transformer, wide DAGs
    python benchmarks/bench_placement.py --nodes 20000

Wide DAGs: Inception-like stages of 8 and 32 parallel 4-unit chains (the chain-following search
order keeps their frontier narrow: exact), and random DAGs whose nodes read any of the last 16 or
32 tensors (about that many live at every step: the search's state budget applies, the result is
marked not exact and is never worse than greedy).

Graphs come from tests/partition_fixtures.py (built directly, no ONNX), platforms from there and
from platforms/soc.yaml and dual.yaml, so this measures the partition stage alone: pattern matching, costing, the exact search, assembly.
CPU seconds are printed next to wall seconds because a shared machine inflates the latter: `cpu s`
is the process's user + system time, `user s` its user time alone; each is the median of `--repeat`
runs. `--graphs` and `--platforms` pick cases by name (comma-separated prefixes).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hetgen.partition import place  # noqa: E402
from hetgen.platform import load_platform  # noqa: E402
from hetgen.platform.model import Link  # noqa: E402
from partition_fixtures import flat, residual_net, soc, transformer, wide_dag, wide_random_dag  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="graph size (default 5000)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the median is reported")
    parser.add_argument("--graphs", default="", help="only graphs whose name starts with one of these")
    parser.add_argument("--platforms", default="", help="only platforms whose name starts with one of these")
    parser.add_argument("--modes", default="cost,greedy", help="placement modes (default cost,greedy)")
    args = parser.parse_args()
    graphs = {
        "resnet": residual_net(max(1, args.nodes // 5)),  # 5 nodes a block
        "transformer": transformer(max(1, args.nodes // 21)),  # 21 nodes a layer
        "inception8": wide_dag(args.nodes, 8),
        "inception32": wide_dag(args.nodes, 32),
        "random16": wide_random_dag(random.Random(1), args.nodes, 16),
        "random32": wide_random_dag(random.Random(2), args.nodes, 32),
    }
    platforms = {
        "soc (composite, 4 GB/s)": soc(),
        "soc (composite, 40 GB/s)": soc(link_gbps=40.0, latency_us=1.0),
        "flat (cpu+npu+dsp)": flat(npu_link=Link(8.0, 10.0)),
        "soc.yaml": load_platform(ROOT / "platforms" / "soc.yaml"),
        "dual.yaml": load_platform(ROOT / "platforms" / "dual.yaml"),
    }
    graphs = {name: graph for name, graph in graphs.items() if _picked(name, args.graphs)}
    platforms = {name: platform for name, platform in platforms.items() if _picked(name, args.platforms)}
    header = f"{'graph':<12} {'nodes':>6}  {'platform':<26} {'mode':<6} {'wall s':>7} {'cpu s':>6} {'user s':>6}"
    print(f"{header} {'groups':>7} {'total us':>10} exact")
    for graph_name, graph in graphs.items():
        for platform_name, platform in platforms.items():
            for mode in args.modes.split(","):
                wall, cpu, user = [], [], []
                for _ in range(args.repeat):
                    start, start_cpu, start_user = time.perf_counter(), time.process_time(), os.times().user
                    placement = place(graph, platform, mode=mode)
                    wall.append(time.perf_counter() - start)
                    cpu.append(time.process_time() - start_cpu)
                    user.append(os.times().user - start_user)
                print(
                    f"{graph_name:<12} {len(graph.nodes):>6}  {platform_name:<26} {mode:<6} {median(wall):>7.2f} "
                    f"{median(cpu):>6.2f} {median(user):>6.2f} "
                    f"{len(placement.groups):>7} {placement.total_us:>10.1f} {placement.exact}",
                    flush=True,
                )
    return 0


def _picked(name: str, prefixes: str) -> bool:
    return not prefixes or any(name.startswith(prefix) for prefix in prefixes.split(","))


if __name__ == "__main__":
    raise SystemExit(main())
