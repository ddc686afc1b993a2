"""Does the placement search pay? Estimated latency of the searched placement against the best
single device and against greedy, on real model shapes and the shipped platforms.

    python benchmarks/bench_placement_pays.py
    python benchmarks/bench_placement_pays.py --platform platforms/soc.yaml --models resnet18

Models (hetgen/models builders, seeded weights) at realistic sizes: ResNet-18 (basic blocks,
64-128-256-512 channels, two blocks a stage) at 1x3x224x224; the MobileNetV2-shaped builder (its
first five inverted residual blocks, Relu6, depthwise convolutions) at 1x3x224x224; a transformer
encoder of 4 layers, sequence 128, width 256, 4 heads, FFN 1024.

Every figure is the cost model's estimate (`Placement.total_us`: the makespan of the generated
program, devices running concurrently with the root, hetgen/partition/timeline.py), not a
simulation or a run:

- single <target>: that one device alone: every node a pattern of that target can take goes to it
  (largest match first, as greedy does), every other node to the root controller, which drives
  the program and has a pattern for every operator. For the root itself: everything on the root.
- best single: the least of those.
- greedy: the BYOC-style placement (`place(..., mode="greedy")`).
- searched: the cost search (`place(...)`), exact unless it says otherwise.

Printed ratios: best-single / searched, greedy / searched, and root-alone / searched (above 1: the
search is faster), and two ceilings on best-single / searched from hetgen/partition/bound.py, lower
bounds on the makespan of any placement:
- `bound`: placements that run each node whole on one target (what the search chooses among):
  `placement_bound`, the longest chain of groups and the copies it cannot avoid, and the busiest
  target with the root's copies to the devices used (see benchmarks/bench_bound.py).
- `split`: even a placement that splits layers between devices at will, every copy free (the
  busiest-target bound alone, dependencies relaxed too).
A ratio above `bound` would disprove the bound; a ratio below it is what the search leaves. The "(N nodes)" after each target is how many of the graph's nodes
any pattern of that target can take: layers bigger than an npu's SRAM are tiled
(hetgen/spec/tiling.py), so it takes every layer one of its tilings fits. `--npu-sram-kib` gives the
npus other SRAM sizes.

`--simulate DIR` also builds the searched and the best single-device placements (native build,
in DIR), checks each against onnxruntime (`hetgen verify`) and runs `hetgen bench DIR --format
json` on each: its simulated total is the generated program replayed with concurrent devices,
each accelerator invocation at the cycles the simulator counted, each copy as its device counts it
("sim" figures). The controllers' own kernels are not simulated: they enter at their estimate.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hetgen.frontend import import_model  # noqa: E402
from hetgen.models import cnn, transformer  # noqa: E402
from hetgen.partition import place  # noqa: E402
from hetgen.partition.assemble import assemble  # noqa: E402
from hetgen.partition.bound import makespan_bound, placement_bound  # noqa: E402
from hetgen.partition.cost import Calibration  # noqa: E402
from hetgen.partition.space import SearchSpace  # noqa: E402
from hetgen.platform import load_platform, load_platform_text  # noqa: E402
from hetgen.spec import build_kernel_specs  # noqa: E402
from hetgen.spec.fits import check_graph_fits  # noqa: E402

MODELS = {
    "resnet18": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=224),
    "mobilenetv2": lambda: cnn.mobilenet_v2(size=224),
    "transformer": lambda: transformer.transformer_encoder(seq=128, dim=256, heads=4, layers=4, ffn=1024),
}
PLATFORMS = ("platforms/soc.yaml", "platforms/dual.yaml")


def single_device(space: SearchSpace, loc: int):
    """The placement that uses `loc` alone (with the root for what `loc` cannot take)."""
    candidates = space.candidates
    taken = [False] * len(space.graph.nodes)
    starts: list[list] = [[] for _ in taken]
    for c in candidates:
        if c.loc in (loc, space.root):
            starts[c.nodes[0]].append(c)
    chosen = []
    for i in range(len(taken)):
        if taken[i]:
            continue
        free = [c for c in starts[i] if not any(taken[n] for n in c.nodes)]
        options = [c for c in free if c.loc == loc] or [c for c in free if c.loc == space.root]
        if not options:
            return None  # the root cannot take this node either: no such placement
        best = max(options, key=lambda c: len(c.nodes))
        for n in best.nodes:
            taken[n] = True
        chosen.append(best.id)
    return assemble(space, candidates, chosen, mode="greedy", exact=False, pins={})


def platform_with_sram(file: str, sram_kib: int | None):
    """The platform in `file`, its npus given `sram_kib` of SRAM when that is set."""
    if sram_kib is None:
        return load_platform(file)
    text = Path(file).read_text()
    text = re.sub(r"\{kind: npu(, sram_kib: \d+)?", f"{{kind: npu, sram_kib: {sram_kib}", text)  # flow style
    text = re.sub(r"^( *)kind: npu\n(\1sram_kib: \d+\n)?", rf"\1kind: npu\n\1sram_kib: {sram_kib}\n", text, flags=re.M)
    return load_platform_text(text, file=file)


def simulated_total(graph, model, platform, placement, out: Path) -> float:
    """The placement built (every node pinned where it placed it) and run: the final root clock of
    the generated program, replayed with what the simulator counted (`hetgen bench`)."""
    import hetgen

    pins = {group_node: group.target for group in placement.groups for group_node in group.nodes}
    hetgen.compile(platform, model, out=out, pins=pins, native_only=True, opt=("-O2",))
    # The build computes what onnxruntime computes (`hetgen verify` exits non-zero otherwise).
    subprocess.run([sys.executable, "-m", "hetgen", "verify", str(out)], capture_output=True, check=True, cwd=ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "hetgen", "bench", str(out), "--runs", "1", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return float(json.loads(done.stdout)["simulated_us"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", action="append", help="platform file (default: soc.yaml and dual.yaml)")
    parser.add_argument(
        "--npu-sram-kib", type=int, help="give every npu this much SRAM (what memory fit costs the npu)"
    )
    parser.add_argument("--models", nargs="*", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--simulate", metavar="DIR", help="build and simulate searched and best single in DIR")
    args = parser.parse_args()
    platforms = args.platform or [str(ROOT / p) for p in PLATFORMS]
    graphs = {name: import_model(MODELS[name]()) for name in args.models}
    print(
        f"{'model':<12} {'nodes':>5} {'platform':<10} {'single (us per target)':<76} "
        f"{'best single':>11} {'greedy':>10} {'searched':>10} {'single/srch':>11} {'greedy/srch':>11} "
        f"{'root/srch':>9} {'bound':>5} {'split':>5} {'place s':>7} quality"
    )
    for name, graph in graphs.items():
        for file in platforms:
            platform = platform_with_sram(file, args.npu_sram_kib)
            check_graph_fits(graph, platform)
            space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
            singles, takes = {}, {}
            for loc, path in enumerate(space.paths):
                single = single_device(space, loc)
                if single is not None:
                    singles[path] = single.total_us
                    takes[path] = len({n for c in space.candidates if c.loc == loc for n in c.nodes})
            best_path = min(singles, key=singles.get)
            platform_root = space.paths[space.root]
            greedy = place(graph, platform, mode="greedy")
            start = time.process_time()
            searched = place(graph, platform)
            seconds = time.process_time() - start
            quality = "exact" if searched.exact else f"beam-bounded: {searched.search_note}"
            if args.simulate:
                best = single_device(space, space.paths.index(best_path))
                simulated = {
                    which: simulated_total(graph, MODELS[name](), platform, chosen, Path(args.simulate) / f"{name}_{Path(file).stem}_{which}")
                    for which, chosen in (("searched", searched), ("single", best))
                }  # fmt: skip
                quality += (
                    f"; sim: searched {simulated['searched']:.0f} us, single {simulated['single']:.0f} us, "
                    f"single/searched {simulated['single'] / simulated['searched']:.2f}"
                )
            split_floor = makespan_bound(space)
            whole_floor = placement_bound(space)
            per_target = ", ".join(
                f"{path.rsplit('/', 1)[-1]} {us:.0f} ({takes[path]} nodes)" for path, us in singles.items()
            )
            print(
                f"{name:<12} {len(graph.nodes):>5} {Path(file).stem:<10} {per_target:<76} "
                f"{singles[best_path]:>11.0f} {greedy.total_us:>10.0f} {searched.total_us:>10.0f} "
                f"{singles[best_path] / searched.total_us:>11.2f} {greedy.total_us / searched.total_us:>11.2f} "
                f"{singles[platform_root] / searched.total_us:>9.2f} {singles[best_path] / whole_floor:>5.2f} "
                f"{singles[best_path] / split_floor:>5.2f} {seconds:>7.2f} {quality}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
