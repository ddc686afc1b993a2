"""More hardware never makes the placement slower (issue 23, "monotone in the hardware").

The placement's estimate is swept over each figure of the shipped platforms' npus (SRAM, MACs, DMA
bandwidth, clock: benchmarks/bench_monotone.py's steps, on small models) and must never rise with
more of a figure. That holds by construction: the tile-plan chooser keeps the least-priced plan of
every tiling that fits (`tiling.chosen_plans`: more SRAM only adds tilings, faster rates price each
no higher), and the cascade pass never trades time for SRAM (`SRAM_TOLERANCE`). The chooser is
checked against brute force: every fitting tiling built and priced, the kept plan the least priced,
and the floor it skips tilings by (`least_us`) never above a tiling's price.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import pytest

from hetgen.frontend import import_model
from hetgen.models import cnn
from hetgen.models.quantized import quantized
from hetgen.partition import place
from hetgen.platform import load_platform_text
from hetgen.spec import tiling
from hetgen.spec.invocation import tile_rates
from hetgen.spec.tile_shapes import candidates, has_residual, unit_op

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_monotone  # noqa: E402  (the sweeps' steps and the platform edit, as the benchmark runs them)

MODELS = {
    "resnet": lambda: cnn.resnet(size=32),
    "mobilenet_v2": lambda: cnn.mobilenet_v2(size=32),
    "unet": lambda: cnn.unet(widths=(8, 16), size=16),
}


def _sweeps(platform: str, model, figures=bench_monotone.FIGURES):
    """(figure, [(step, estimate)]) for each figure of the platform's npus."""
    logging.getLogger("hetgen").setLevel(logging.ERROR)
    file = ROOT / "platforms" / f"{platform}.yaml"
    text = file.read_text()
    accelerators = bench_monotone.accelerator_paths(text, file)
    graph = import_model(model)
    _, kind, attrs = accelerators[0]
    for figure in figures:
        found = []
        for values in bench_monotone.steps(figure, kind, attrs):
            stepped = text
            for path, _, _ in accelerators:
                stepped = bench_monotone.with_attrs(stepped, path, values)
            found.append((values, place(graph, load_platform_text(stepped, file=str(file))).total_us))
        yield figure, found


@pytest.mark.parametrize(
    "platform, model, figures",
    [
        ("soc", "resnet", bench_monotone.FIGURES),
        ("soc", "mobilenet_v2", ("sram", "macs")),
        ("soc", "unet", ("sram",)),
        ("ethos-u65", "mobilenet_v2 int8", ("sram", "dma")),
    ],
)
def test_more_of_any_npu_figure_never_makes_the_placement_slower(platform, model, figures):
    """Every figure on soc (ResNet), the ones whose plans change most on the others (kept to
    seconds: benchmarks/bench_monotone.py sweeps them all on the full-size models)."""
    name, _, dtype = model.partition(" ")
    onnx_model = MODELS[name]()
    if dtype == "int8":  # the Ethos-U kinds have no float datapath
        onnx_model = quantized(onnx_model, per_channel=True)
    for figure, found in _sweeps(platform, onnx_model, figures):
        assert len(found) >= 2, figure
        for (before, slower), (after, faster) in zip(found, found[1:]):
            assert faster <= slower * (1 + bench_monotone.SLACK), (figure, before, slower, after, faster)
        if figure != "clock":  # the first step has a quarter of the shipped figure: its estimate is higher
            assert found[-1][1] <= found[0][1]


# The brute force builds every tiling of at most this many tiles (more take seconds to build).
BRUTE_TILES = 128


def _units(graph):
    """Each single-operator unit the npu tiles, by its node."""
    tiled = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Gemm", "MatMul", "Add"}
    return [node for node in graph.nodes if node.op in tiled]


def test_the_chooser_keeps_the_least_priced_plan_of_every_tiling_that_fits():
    """Brute force: every tiling of each unit that fits built and priced (`plan_us`, as the cost
    model prices it); the chooser keeps the least priced (ties: the fewest tiles), of the plans it
    built, and skipped only tilings whose floor is above that price; no floor exceeds its price."""
    graph = import_model(cnn.mobilenet_v2(size=16))
    platform = load_platform_text((ROOT / "platforms" / "soc.yaml").read_text(), file="soc.yaml")
    (npu,) = [t for t in platform.targets() if t.kind.name == "npu"]
    capacity = 32 * 1024
    checked, seen = 0, set()
    for node in _units(graph):
        op = unit_op([node], graph, ())
        if op in seen:  # one shape, one plan
            continue
        seen.add(op)
        rates = tile_rates(npu, 1.0, [node])
        chosen = tiling.chosen_plans(op, capacity, rates)
        if isinstance(chosen, tiling.Unfit):
            continue
        kept = chosen.kept
        assert kept.rank == min(priced.rank for priced in chosen.built)
        assert chosen.unbuilt_floor > kept.us or math.isinf(chosen.unbuilt_floor)
        flops = tiling._lowered(op.instance(op.input_types, op.output_types)).flops
        vector = op.output_types[0].size if has_residual(op) else 0
        every = []
        for index, candidate in enumerate(candidates(op)):
            if candidate.tiles > BRUTE_TILES:
                continue
            for double in (True, False):
                if tiling.footprint(candidate, double) > capacity:
                    continue
                plan = tiling._built(op, tiling._Entry(candidate, double, 2 * index + (not double)))
                if plan.sram_bytes > capacity:
                    continue
                price = tiling.plan_us(plan, rates)
                floor = tiling.least_us(candidate, double, flops, rates, vector, len(op.outputs))
                assert floor <= price * (1 + 1e-12), (node.name, candidate.split, candidate.tile_shape, double)
                every.append(tiling.Priced(plan, price, 2 * index + (not double)).rank)
        assert kept.rank <= min(every), node.name  # == where the kept plan has at most BRUTE_TILES tiles
        if kept.plan.count <= BRUTE_TILES:
            assert kept.rank == min(every), node.name
        assert tiling.unit_plan([node], graph, (), capacity, rates) is kept.plan
        checked += 1
    assert checked >= 10
