"""Fused patterns are priced as they run (issue 8 items 3 and 6, issue 10 item 4).

The kernel table decides the multi-operator units (fused attention, a residual Add in a Conv's
epilogue: hetgen/spec/patterns.py); placement offers each on every CPU controller as one group
priced as its one kernel; lowering emits the fused kernel exactly for such a group. So the fused
groups explain shows are the fused kernels in the generated program, each priced as one kernel, and
explain's total is what the simulation counts. The same holds for the ordinary epilogue units (a
Conv, Gemm or Add with the activations its kernel absorbs, hetgen/spec/fusion.py): each is one group
on a controller, priced as its one kernel, and lowering never fuses across two groups.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen import lower
from hetgen.errors import InternalError
from hetgen.frontend import import_model
from hetgen.models import mobilenet_v2, resnet, shufflenet, squeezenet, transformer_encoder
from hetgen.partition import exact
from hetgen.partition.choices import with_choices
from hetgen.partition.cost import Calibration, Work, kernel_us
from hetgen.partition.exact import ExactSearch, search_order
from hetgen.partition.explain import explain_json, explain_text
from hetgen.partition.patterns import pattern_table
from hetgen.partition.placement import Placement
from hetgen.partition.search import place
from hetgen.partition.space import SearchSpace
from hetgen.platform.loader import load_platform, load_platform_text
from hetgen.runtime.devices import simulation_report
from hetgen.runtime.reference import ort_session, random_inputs
from hetgen.spec import build_kernel_specs
from hetgen.spec.patterns import ATTENTION, RESIDUAL
from tests.test_one_truth import NPU, REPO, SOC, TOLERANCE

FUSED = (ATTENTION, RESIDUAL)
MODELS = {"transformer": transformer_encoder, "resnet": resnet}
EXPECTED = {"transformer": (ATTENTION, 2), "resnet": (RESIDUAL, 3)}  # two layers; three basic blocks


def platform_named(name: str):
    return load_platform(str(REPO / "platforms" / f"{name}.yaml"))


def generated_units(lowered) -> list[tuple[str, frozenset[str]]]:
    """(target, node set) of every kernel function the generated programs call."""
    return [(p.target.path_str, frozenset(u.nodes)) for p in lowered.programs for u in p.units]


@pytest.mark.parametrize("platform_name", ["host", "soc"])
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_fused_groups_are_the_generated_fused_kernels(platform_name, model_name):
    platform = platform_named(platform_name)
    graph = import_model(MODELS[model_name]())
    kernels = build_kernel_specs(graph, platform)
    placement = place(graph, platform, kernels=kernels)
    fused_groups = [g for g in placement.groups if g.label in FUSED]
    kind, count = EXPECTED[model_name]
    if platform_name == "host":  # on soc, the npu takes the convolutions: no residual unit is left
        assert [g.label for g in fused_groups].count(kind) == count, [g.label for g in placement.groups]

    lowered = lower.lower(graph, platform, placement)
    units = generated_units(lowered)
    # (a unit may be several functions: a tile plan's or a cascade's row tiles of different shapes)
    generated = sorted({(target, tuple(sorted(nodes))) for target, nodes in units if kernels.fused(nodes) is not None})
    generated = [(target, list(nodes)) for target, nodes in generated]
    assert generated == sorted((g.target, sorted(g.nodes)) for g in fused_groups)
    # every other kernel is one operator and a prefix of the activations its fusion chain absorbs
    order = {node.name: index for index, node in enumerate(graph.nodes)}
    for _, nodes in units:
        if kernels.fused(nodes) is None:
            head, *rest = sorted(nodes, key=order.__getitem__)
            assert rest == [name for name, _ in kernels.chains[head][: len(rest)]], nodes


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_a_fused_group_is_priced_as_its_one_kernel(model_name):
    """The group's time is the table's kernel spec at one launch, not its operators' sum."""
    platform = platform_named("host")
    graph = import_model(MODELS[model_name]())
    kernels = build_kernel_specs(graph, platform)
    placement = place(graph, platform, kernels=kernels)
    target = platform.root.controller()
    efficiency = next(p.efficiency for p in pattern_table(target) if p.chain[0].ops == ("*",))
    by_name = {node.name: node for node in graph.nodes}
    for group in placement.groups:
        if group.label not in FUSED:
            continue
        pattern = kernels.fused(group.nodes)
        spec = kernels.unit(pattern.names)
        one = kernel_us(
            target.figures, Work(spec.flops, spec.bytes), efficiency, 1.0, [by_name[n] for n in group.nodes]
        )
        assert group.cost_us == pytest.approx(one)
        assert group.launch_us == pytest.approx(target.figures.launch_us)
        apart = sum(
            kernel_us(target.figures, Work(*kernels.group_work([by_name[name]])), efficiency) for name in group.nodes
        )
        assert group.cost_us < apart  # why the search takes it


def test_explain_shows_the_fused_units():
    platform = platform_named("host")
    graph = import_model(transformer_encoder())
    placement = place(graph, platform)
    text = explain_text(placement, graph)
    assert f"[{ATTENTION}]" in text
    data = explain_json(placement, graph)
    attention = [g for g in data["groups"] if g["label"] == ATTENTION]
    assert len(attention) == 2
    for group in attention:
        assert {"MatMul", "Softmax"} <= set(group["op_types"]) and len(group["ops"]) >= 4
        assert group["alternatives"] and all(a["delta_us"] > 0 for a in group["alternatives"])  # apart: dearer


@pytest.mark.cc
@pytest.mark.parametrize(("platform_name", "model_name"), [("soc", "transformer"), ("slowlink", "resnet")])
def test_explain_total_is_what_the_program_counts(tmp_path, platform_name, model_name):
    """The fused units on the application core, the rest where the search put it; explain's total
    is the built program's estimate, and its simulation agrees within the tolerance."""
    platform = platform_named(platform_name)
    model = MODELS[model_name]()
    graph = import_model(model)
    placement = place(graph, platform)
    assert any(g.label in FUSED for g in placement.groups)
    explained = explain_json(placement, graph)
    out = hetgen.compile(platform, model, out=tmp_path / "out", native_only=True, native_tuning=False, opt=("-O1",))
    report = simulation_report(out)
    assert report.estimate_us == pytest.approx(explained["total_us"], abs=5e-4)  # the JSON: to 1 ns
    assert abs(report.with_estimates_us / report.estimate_us - 1) <= TOLERANCE, (
        report.with_estimates_us,
        report.estimate_us,
    )
    priced = sorted(tuple(g.nodes) for g in placement.groups)
    assert sorted(tuple(g.nodes) for g in report.groups) == priced


def two_conv_add() -> onnx.ModelProto:
    """y = Relu(conv_b(x) + conv_a(x)): conv_b is first, so it is the one that may take the Add."""
    rng = np.random.default_rng(7)
    shape = [1, 16, 8, 8]
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32), name)
        for name in ("wa", "wb")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b", pads=[1] * 4),
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1] * 4),
        helper.make_node("Add", ["b", "a"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_conv_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.cc
@pytest.mark.parametrize("residual_on", ["s", NPU])
def test_a_residual_from_a_device_is_not_fused(tmp_path, residual_on):
    """The Add's other input computed on the npu: the fused Conv would wait for the device, so the
    Conv and the Add stay two kernels, priced and generated so; computed on the same core, they fuse."""
    platform = load_platform_text(SOC)
    model = two_conv_add()
    graph = import_model(model)
    pins = {"conv_a": residual_on, "conv_b": "s", "add": "s", "relu": "s"}
    kernels = build_kernel_specs(graph, platform)
    placement = place(graph, platform, pins=pins, kernels=kernels)
    labels = [g.label for g in placement.groups]
    fused = residual_on == "s"
    assert (RESIDUAL in labels) == fused, labels
    units = [nodes for _, nodes in generated_units(lower.lower(graph, platform, placement))]
    conv_b, add = (next(n.name for n in graph.nodes if n.outputs == (t,)) for t in ("b", "s"))
    assert any({conv_b, add} <= nodes for nodes in units) == fused, units
    out = hetgen.compile(
        platform, model, out=tmp_path / "out", native_only=True, native_tuning=False, pins=pins, opt=("-O1",)
    )
    built = hetgen.load(out)
    feeds = random_inputs(built.inputs, seed=1)
    (wanted,) = ort_session(model.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(built.run(feeds)["y"], wanted, rtol=1e-4, atol=1e-5)


def latest_first_order(space) -> list[int]:
    """A topological order that takes the latest ready node first: a fused attention's branches
    (Q, K and V) come in the reverse of the graph's order."""
    waiting = [0] * len(space.graph.nodes)
    successors: list[set[int]] = [set() for _ in space.graph.nodes]
    for t, readers in enumerate(space.consumers):
        if space.producer[t] >= 0:
            successors[space.producer[t]].update(readers)
    for targets in successors:
        for s in targets:
            waiting[s] += 1
    ready = [n for n, count in enumerate(waiting) if count == 0]
    order = []
    while ready:
        node = max(ready)
        ready.remove(node)
        order.append(node)
        for s in successors[node]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    return order


def test_the_search_takes_a_fused_attention_in_any_order(monkeypatch):
    """A fused attention is a DAG, not a chain: the search opens it at whichever of its nodes comes
    first in its order. Any topological order finds the same least cost, each node placed once."""
    platform = platform_named("host")
    graph = import_model(transformer_encoder())
    space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
    costs = []
    for order in (search_order, latest_first_order):
        monkeypatch.setattr(exact, "search_order", order)
        search = ExactSearch(space, space.candidates)
        chosen, _ = search.run(1024)
        by_id = {c.id: c for c in space.candidates}
        placed = sorted(n for cid in chosen for n in by_id[cid].nodes)
        assert placed == list(range(len(space.graph.nodes)))
        assert sum(by_id[cid].label == ATTENTION for cid in chosen) == 2
        costs.append(search.best_cost)
    assert latest_first_order(space) != search_order(space)
    assert costs[0] == pytest.approx(costs[1])


# -- epilogue chains: a head and the activations its kernel absorbs (hetgen/spec/fusion.py) --------


def chain_groups(placement: Placement, kernels, controllers) -> list:
    """The groups on controllers that are a head with fused activations: one kernel each."""
    return [
        g for g in placement.groups if g.target in controllers and len(g.nodes) > 1 and kernels.fused(g.nodes) is None
    ]


def controllers_of(platform) -> set[str]:
    return {t.path_str for t in platform.root.walk() if t.role.name == "CONTROLLER"}


def test_an_epilogue_chain_on_a_controller_is_priced_and_generated_as_one_kernel():
    """Conv → Clip on the core: one group, priced as the fused kernel the table lowered (its work, one
    launch), and lowering emits exactly one kernel per group on the controller, never one spanning
    two groups."""
    platform = platform_named("host")
    graph = import_model(mobilenet_v2())
    kernels = build_kernel_specs(graph, platform)
    placement = place(graph, platform, kernels=kernels)
    target = platform.root.controller()
    efficiency = next(p.efficiency for p in pattern_table(target) if p.chain[0].ops == ("*",))
    by_name = {node.name: node for node in graph.nodes}
    chains = chain_groups(placement, kernels, controllers_of(platform))
    assert len(chains) >= 10, [g.nodes for g in placement.groups]
    for group in chains:
        spec = kernels.unit(group.nodes)
        assert spec.kernel is not None and len(spec.epilogue) == len(group.nodes) - 1
        members = [by_name[n] for n in group.nodes]
        assert group.cost_us == pytest.approx(
            kernel_us(target.figures, Work(spec.flops, spec.bytes), efficiency, 1.0, members)
        )
        assert group.launch_us == pytest.approx(target.figures.launch_us)  # one launch, not one per operator
        apart = sum(kernel_us(target.figures, Work(*kernels.group_work([m])), efficiency) for m in members)
        assert group.cost_us < apart  # why the search takes it
    generated = sorted(sorted(nodes) for _, nodes in generated_units(lower.lower(graph, platform, placement)))
    aliases = {n for g in placement.groups for n in g.nodes} - {n for nodes in generated for n in nodes}
    assert generated == sorted(sorted(g.nodes) for g in placement.groups if not set(g.nodes) <= aliases)


def test_lowering_never_fuses_across_two_groups():
    """A placement that runs a Conv and its Relu as two groups on the same core was priced as two
    kernels, so it gets two: the fusion rule says what may fuse, placement says what does."""
    platform = platform_named("host")
    graph = import_model(resnet())
    kernels = build_kernel_specs(graph, platform)
    placement = place(graph, platform, kernels=kernels)
    chain = next(g for g in chain_groups(placement, kernels, controllers_of(platform)) if len(g.nodes) == 2)
    split = [dataclasses.replace(chain, name=f"{chain.name}_{k}", nodes=(n,)) for k, n in enumerate(chain.nodes)]
    at = placement.groups.index(chain)
    apart = dataclasses.replace(placement, groups=(*placement.groups[:at], *split, *placement.groups[at + 1 :]))
    with pytest.raises(InternalError, match="kernel choices were made for other groups"):
        lower.lower(graph, platform, apart)  # its kernels were chosen for the fused group
    apart = with_choices(graph, platform, apart)
    fused = {nodes for _, nodes in generated_units(lower.lower(graph, platform, placement))}
    separate = {nodes for _, nodes in generated_units(lower.lower(graph, platform, apart))}
    assert frozenset(chain.nodes) in fused and frozenset(chain.nodes) not in separate
    assert {frozenset({n}) for n in chain.nodes} <= separate


@pytest.mark.cc
@pytest.mark.parametrize(
    ("platform_name", "model"), [("board-aarch64", shufflenet), ("dual", squeezenet)], ids=["shufflenet", "squeezenet"]
)
def test_convolutions_taken_back_from_the_npu_run_as_priced(tmp_path, platform_name, model):
    """Priced as the one kernel they are, fused Conv → Relu units on the core beat the npu for some
    convolutions these models have (the search moved them); the built program runs those groups as
    one kernel each, and explain's total is what the simulation counts within the tolerance."""
    platform = platform_named(platform_name)
    onnx_model = model()
    graph = import_model(onnx_model)
    kernels = build_kernel_specs(graph, platform)
    placement = place(graph, platform, kernels=kernels)
    convs_on_core = [
        g for g in chain_groups(placement, kernels, controllers_of(platform)) if graph.node(g.nodes[0]).op == "Conv"
    ]
    assert convs_on_core and any(g.target.endswith("npu0") for g in placement.groups)
    explained = explain_json(placement, graph)
    out = hetgen.compile(
        platform, onnx_model, out=tmp_path / "out", native_only=True, native_tuning=False, opt=("-O1",)
    )
    report = simulation_report(out)
    assert report.estimate_us == pytest.approx(explained["total_us"], abs=5e-4)  # the JSON: to 1 ns
    assert abs(report.with_estimates_us / report.estimate_us - 1) <= TOLERANCE, (
        report.with_estimates_us,
        report.estimate_us,
    )
    # each group as placed, but a cascade (consecutive npu groups run stripe by stripe, one
    # invocation) is reported as one group of its groups' nodes, producer first
    nodes_of = {g.name: tuple(g.nodes) for g in placement.groups}
    cascaded = {name for c in placement.cascades for name in c.groups}
    placed = [sum((nodes_of[name] for name in c.groups), ()) for c in placement.cascades]
    placed += [nodes for name, nodes in nodes_of.items() if name not in cascaded]
    assert sorted(tuple(g.nodes) for g in report.groups) == sorted(placed)
    built = hetgen.load(out)
    feeds = random_inputs(built.inputs, seed=3)
    wanted = ort_session(onnx_model.SerializeToString()).run(None, feeds)
    got = built.run(feeds)
    for name, value in zip((o.name for o in onnx_model.graph.output), wanted):
        np.testing.assert_allclose(got[name], value, rtol=1e-3, atol=1e-4)
