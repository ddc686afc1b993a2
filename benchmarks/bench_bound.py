"""How much of the gain the bound allows does the placement search capture? Per model and shipped
platform: the latency of everything on the root and of greedy, the search's, the lower bound
(hetgen/partition/bound.py) and the fraction of the bound's gain the search captures.

    python benchmarks/bench_bound.py                       # examples/*.onnx and the benchmark models
    python benchmarks/bench_bound.py --models resnet8 mobilenetv2 --platforms soc mcu-npu

Every figure is the cost model's makespan at the search's prices (`chosen_makespan`: devices
running concurrently, hetgen/partition/timeline.py), before the kernel choices and cascades made
after placement, so that all four are prices of the same objective:

- root: every node on the root controller (its largest pattern first);
- greedy: the BYOC-style placement (`search_greedy`), priced the same way;
- search: `place(...)`'s placement (`Placement.searched_us`), `exact` where proven the least
  makespan (hetgen/partition/optimal.py), otherwise the gap to the bound;
- bound: no placement of the pinned candidates is faster (the larger of the busiest-target bound
  and the critical path of groups and unavoidable copies);
- captured: (root - search) / (root - bound), the fraction of the gain the bound allows over the
  root alone that the search achieves (1.00: it achieves all of it, so the bound is the optimum;
  "-": the bound allows no gain); `vs greedy` the same with greedy as the baseline.

Benchmark models (hetgen/models builders, as benchmarks/bench_placement_pays.py): ResNet-18 and the
MobileNetV2-shaped builder at 1x3x224x224, a 4-layer transformer encoder (sequence 128, width 256).
A model that does not fit a platform's memory is listed as such.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hetgen.errors import HetgenError  # noqa: E402
from hetgen.frontend import import_model  # noqa: E402
from hetgen.models import cnn, transformer  # noqa: E402
from hetgen.partition import place  # noqa: E402
from hetgen.partition.assemble import chosen_makespan  # noqa: E402
from hetgen.partition.bound import placement_bound  # noqa: E402
from hetgen.partition.cost import Calibration  # noqa: E402
from hetgen.partition.pins import resolve_pins, restrict  # noqa: E402
from hetgen.partition.search import placement_request, search_greedy  # noqa: E402
from hetgen.partition.space import SearchSpace  # noqa: E402
from hetgen.platform import load_platform  # noqa: E402
from hetgen.spec import build_kernel_specs  # noqa: E402
from hetgen.spec.fits import check_graph_fits  # noqa: E402

BENCHMARK_MODELS = {
    "resnet18": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=224),
    "mobilenetv2": lambda: cnn.mobilenet_v2(size=224),
    "transformer": lambda: transformer.transformer_encoder(seq=128, dim=256, heads=4, layers=4, ffn=1024),
}


def models() -> dict:
    found = {path.stem: path for path in sorted((ROOT / "examples").glob("*.onnx"))}
    return {**found, **BENCHMARK_MODELS}


def root_alone(space: SearchSpace, candidates) -> list[int] | None:
    """Every node on the root (its largest match first); None where the root cannot take a node."""
    starts: list[list] = [[] for _ in space.graph.nodes]
    for c in candidates:
        if c.loc == space.root:
            starts[c.nodes[0]].append(c)
    taken = [False] * len(space.graph.nodes)
    chosen = []
    for i in range(len(taken)):
        if taken[i]:
            continue
        free = [c for c in starts[i] if not any(taken[n] for n in c.nodes)]
        if not free:
            return None
        best = max(free, key=lambda c: len(c.nodes))
        for n in best.nodes:
            taken[n] = True
        chosen.append(best.id)
    return chosen


def captured(baseline: float | None, search: float, bound: float) -> str:
    if baseline is None or baseline - bound <= 1e-3 * baseline:  # the bound allows under 0.1 %
        return "-"
    return f"{(baseline - search) / (baseline - bound):.2f}"


def row(name: str, graph, platform) -> str:
    check_graph_fits(graph, platform)
    space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
    _, pins = placement_request(platform, None, {})
    candidates = restrict(space, resolve_pins(space, pins))
    start = time.process_time()
    bound = placement_bound(space, candidates)
    bound_s = time.process_time() - start
    alone = root_alone(space, candidates)
    root = chosen_makespan(space, candidates, alone) if alone is not None else None
    greedy = chosen_makespan(space, candidates, search_greedy(space, candidates))
    placement = place(graph, platform)
    search = placement.searched_us
    quality = "exact" if placement.optimal else f"gap {placement.gap:.1%}"
    if bound > search * (1 + 1e-9):
        quality += "  BOUND ABOVE THE SEARCH"  # would disprove the bound
    root_text = f"{root:>10.1f}" if root is not None else f"{'-':>10}"
    return (
        f"{root_text} {greedy:>10.1f} {search:>10.1f} {bound:>10.1f} {captured(root, search, bound):>8} "
        f"{captured(greedy, search, bound):>9} {bound_s:>7.2f}  {quality}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = models()
    parser.add_argument("--models", nargs="*", choices=sorted(known), default=list(known))
    parser.add_argument("--platforms", nargs="*", help="platform names in platforms/ (default: all shipped)")
    args = parser.parse_args()
    names = args.platforms or sorted(path.stem for path in (ROOT / "platforms").glob("*.yaml"))
    print(
        f"{'model':<22} {'platform':<15} {'root us':>10} {'greedy us':>10} {'search us':>10} {'bound us':>10} "
        f"{'captured':>8} {'vs greedy':>9} {'bound s':>7}  quality",
        flush=True,
    )
    for model in args.models:
        source = known[model]
        graph = import_model(source if isinstance(source, Path) else source())
        for name in names:
            platform = load_platform(ROOT / "platforms" / f"{name}.yaml")
            try:
                line = row(model, graph, platform)
            except HetgenError as error:
                line = f"does not place: {str(error).splitlines()[0][:90]}"
            print(f"{model:<22} {name:<15} {line}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
