"""No unpriced choices (issue 19 item 4): the kernel variants chosen after placement (Winograd, the
blocked NCHW[V]c layout with its reorders, a layer's own GEMM blocks: hetgen/partition/choices.py)
are the ones the groups are priced with. Each CPU group's estimate, in the placement and in
explain, is the cost model's price of the kernels the generated program runs for it, and the total
is the makespan of those groups (on one CPU: their sum)."""

from __future__ import annotations

import pytest

from hetgen import lower
from hetgen.models import cnn, resnet
from hetgen.partition.cost import Work, kernel_us, pool_threads
from hetgen.partition.explain import explain_json
from hetgen.partition.search import place
from hetgen.pipeline import import_graph
from hetgen.platform.loader import load_platform_text

HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"


def program_prices(graph, platform, placement):
    """Per placement group, the cost model's price of the kernels the lowered program runs for it: a
    reorder into the blocked layout belongs to the unit after it, one back to the unit before it."""
    program = lower.lower(graph, platform, placement).root
    target = program.target
    threads = pool_threads(platform, target)
    by_name = {node.name: node for node in graph.nodes}
    prices: dict[str, float] = {}
    variants: dict[str, set[str]] = {}
    units = list(program.units)
    for k, unit in enumerate(units):
        ops = [by_name[name].op if name in by_name else None for name in unit.nodes]
        if ops[0] is None:  # a reorder: not a node of the model
            neighbour = units[k + 1] if unit.kernel.params["to_blocked"] else units[k - 1]
            group = placement.group_of(neighbour.nodes[0])
            nodes = ()
        else:
            group = placement.group_of(unit.nodes[0])
            nodes = tuple(by_name[name] for name in unit.nodes)
        kernel = unit.kernel
        work = Work(kernel.flops, kernel.bytes_accessed)
        split = kernel.parallel if threads > 1 else kernel.parallel.__class__()
        prices[group.name] = prices.get(group.name, 0.0) + kernel_us(
            target.figures, work, group.efficiency, 1.0, nodes, split, threads
        )
        variants.setdefault(group.name, set()).update((str(kernel.params.get("variant")), kernel.template))
    return prices, variants


def check(graph, platform, variant: str) -> dict[str, float]:
    placement = place(graph, platform)
    prices, variants = program_prices(graph, platform, placement)
    chosen = [name for name, found in variants.items() if variant in " ".join(found)]
    assert chosen, f"no {variant} kernel in the program: {variants}"
    explained = {g["name"]: g["cost_us"] for g in explain_json(placement, graph)["groups"]}
    for group in placement.groups:
        if group.name in prices:  # a dropped reshape runs nothing
            assert group.cost_us == pytest.approx(prices[group.name], rel=1e-9), (group.name, variants[group.name])
            assert explained[group.name] == pytest.approx(group.cost_us, abs=5e-4)  # JSON: to 1 ns
    # one CPU: the program is its groups one after the other
    assert placement.total_us == pytest.approx(sum(g.cost_us for g in placement.groups), rel=1e-9)
    assert explain_json(placement, graph)["total_us"] == pytest.approx(placement.total_us, abs=5e-4)  # to 1 ns
    return {name: prices[name] for name in chosen}


@pytest.mark.parametrize("threads", [1, 4])
def test_winograd_layers_are_priced_as_winograd(threads):
    graph = import_graph(cnn.vgg(widths=(64, 128, 256), size=64), {})
    platform = load_platform_text(HOST + f"options: {{threads: {threads}}}\n")
    check(graph, platform, "winograd")
    placement = place(graph, platform)
    winograd = [c for c in placement.choices.units if c.variant == "winograd"]
    assert winograd and all(c.kernel.flops < placement.kernels.unit(c.unit.names).flops for c in winograd)


@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_runs_are_priced_with_their_reorders(threads):
    graph = import_graph(resnet(widths=(16, 24, 40), blocks=1, size=20, seed=2), {})
    platform = load_platform_text(HOST + f"options: {{layout: nchw8c, threads: {threads}}}\n")
    check(graph, platform, "conv_nchwc")
    placement = place(graph, platform)
    assert any(c.variant == "nchw8c" for c in placement.choices.units)
    assert any(c.reorders for c in placement.choices.units)
