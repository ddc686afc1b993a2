"""Tiling (issue 8, item 1): a unit whose tensors do not fit the npu's SRAM runs as tiles that do,
DMA'd in, computed and DMA'd out; the program computes them for real on the simulated device (its
kernels read and write SRAM only) and matches onnxruntime. One plan (hetgen/spec/tiling.py) is
what the fits_memory predicate accepts, what the cost model prices and what lowering emits."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen import lower
from hetgen.frontend import import_model
from hetgen.lower.program import Call, Copy, ProgramRole, Region
from hetgen.partition import place
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session
from hetgen.spec import build_kernel_specs
from hetgen.spec.invocation import group_plans
from hetgen.spec.tiling import Action, TilePlan, Unfit

PLATFORM = """
name: t
target:
  kind: native
  runtime: vm
  devices:
    npu0: {{kind: npu, sram_kib: {sram_kib}, link: {{bandwidth_gbps: 8, latency_us: 5}}}}
"""
NPU = "t/npu0"


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _weight(rng, name, shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def odd_layers() -> onnx.ModelProto:
    """Layers with awkward sizes, each of which the npu can take: strided and dilated convolutions
    whose output channels no tile size divides, a depthwise convolution, pooling with padding, a
    residual Add with Relu, a global pool, a MatMul with a batch and a Gemm with transB and bias."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv_s2", strides=[2, 2], pads=[1, 2, 1, 0]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv_dil", dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Conv", ["c2", "wd"], ["c3"], name="conv_dw", group=22, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c3", "lo", "hi"], ["r3"], name="relu6"),
        helper.make_node("Add", ["r3", "c2"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["sr"], name="relu_add"),
        helper.make_node("MaxPool", ["sr"], ["p"], name="maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["sr"], ["ap"], name="avgpool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["ap"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["gf"], name="flatten"),
        helper.make_node("Gemm", ["gf", "wg", "bg"], ["fc"], name="gemm", transB=1),
        helper.make_node("MatMul", ["xm", "wm"], ["mm"], name="matmul"),
    ]  # fmt: skip
    inputs = [_value("x", (1, 5, 37, 29)), _value("xm", (2, 37, 48))]
    outputs = [_value("p", (1, 22, 10, 8)), _value("fc", (1, 10)), _value("mm", (2, 37, 70))]
    weights = [
        _weight(rng, "w1", (22, 5, 3, 3)),
        _weight(rng, "b1", (22,)),
        _weight(rng, "w2", (22, 22, 3, 3)),
        _weight(rng, "wd", (22, 1, 3, 3)),
        _weight(rng, "wg", (10, 22)),
        _weight(rng, "bg", (10,)),
        _weight(rng, "wm", (48, 70)),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
    ]
    graph = helper.make_graph(nodes, "odd", inputs, outputs, initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


NPU_NODES = (
    "conv_s2", "relu1", "conv_dil", "conv_dw", "relu6", "add", "relu_add", "maxpool", "avgpool", "gap", "gemm", "matmul",
)  # fmt: skip


def _npu(platform):
    return next(t for t in platform.targets() if t.path_str == NPU)


def _plans(graph, platform) -> dict[str, TilePlan]:
    npu = _npu(platform)
    kernels = build_kernel_specs(graph, platform)
    by_name = {node.source_name: node for node in graph.nodes}
    chains = {"conv_s2": ["conv_s2", "relu1"], "conv_dw": ["conv_dw", "relu6"], "add": ["add", "relu_add"]}
    plans = {}
    for head in ("conv_s2", "conv_dil", "conv_dw", "add", "maxpool", "avgpool", "gap", "gemm", "matmul"):
        (plan,) = group_plans([by_name[n] for n in chains.get(head, [head])], graph, npu, kernels)
        plans[head] = plan
    return plans


@pytest.fixture(scope="module")
def odd_build(tmp_path_factory):
    model = odd_layers()
    platform = load_platform_text(PLATFORM.format(sram_kib=16))
    out = hetgen.compile(
        platform,
        model,
        out=tmp_path_factory.mktemp("odd") / "g",
        pins={name: NPU for name in NPU_NODES},
        native_only=True,
        opt=("-O1",),
    )
    return model, platform, out


@pytest.mark.cc
def test_odd_layers_tiled_into_16_kib_match_onnxruntime(odd_build):
    model, platform, out = odd_build
    plans = _plans(import_model(model), platform)
    # Every one of them but the small Gemm is bigger than 16 KiB whole, so it is cut into tiles:
    # rows with halos, channels (22 = 4 tiles of 6, the last one short), both, chunks, matrix rows.
    shown = {k: (p.describe() if isinstance(p, TilePlan) else p) for k, p in plans.items()}
    assert all(isinstance(p, TilePlan) for p in plans.values()), shown
    assert all(p.count > 1 for k, p in plans.items() if k != "gemm"), shown
    assert plans["gemm"].split == "whole"
    loaded = hetgen.load(out)
    rng = np.random.default_rng(8)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in loaded.inputs}
    got = loaded.run(feeds)
    want = ort_session(model.SerializeToString()).run(None, feeds)
    for info, expected in zip(loaded.outputs, want):
        np.testing.assert_allclose(got[info.name], expected, rtol=1e-4, atol=1e-4)
    manifest = json.loads((out / "hetgen.json").read_text())
    (npu,) = [t for t in manifest["targets"] if t["path"] == NPU]
    stats = loaded.device_stats(npu["stats_device"])
    assert stats["invocations"] >= 9 and stats["load_cycles"] > 0


def test_the_npu_computes_from_its_sram_only():
    """Every kernel call's operands lie in the first sram bytes of the device's memory (the
    emulating kernels' workspace follows); the activations live past both, bigger than the SRAM."""
    model = odd_layers()
    platform = load_platform_text(PLATFORM.format(sram_kib=16))
    graph = import_model(model)
    placement = place(graph, platform, pins={name: NPU for name in NPU_NODES})
    (program,) = [p for p in lower.lower(graph, platform, placement).programs if p.role is ProgramRole.ACCELERATOR]
    assert 0 < program.sram_size <= 16 * 1024
    assert program.memory.arena_size - program.sram_size - program.emulation_scratch > 16 * 1024
    calls = [step for step in program.steps if isinstance(step, Call)]
    dmas = [step for step in program.steps if isinstance(step, Copy)]
    assert len(calls) > 9 and len(dmas) > 2 * len(calls) / 2
    for call in calls:
        for arg in call.args[:-1] if call.unit.kernel.scratch_bytes else call.args:
            assert arg.region in (Region.ARENA, Region.NONE)
            assert arg.region is Region.NONE or arg.position < program.sram_size
    for dma in dmas:  # each DMA has one end in SRAM and the other in device memory or the weights
        ends = [dma.src, dma.dst]
        assert sum(e.region is Region.ARENA and e.position < program.sram_size for e in ends) == 1


def test_a_convolution_tile_reads_its_halo():
    """A 3x3 convolution with padding 1 tiled by rows: each tile of r output rows reads r + 2 input
    rows (fewer at the borders), so the input moved exceeds the input's size by the halos."""
    plans = _plans(import_model(odd_layers()), load_platform_text(PLATFORM.format(sram_kib=16)))
    plan = plans["conv_dil"]  # dilation 2, pads 2: a tile of r rows reads r + 4 rows
    loaded_x = sum(plan.block_of(c).nbytes for c in plan.commands if c.action is Action.LOAD and c.operand == 0)
    assert loaded_x > 22 * 19 * 15 * 4  # more than the input once: halos (and any re-reads)
    assert plan.dma_bytes == plan.moved(Action.LOAD) + plan.moved(Action.STORE)
    assert plan.moved(Action.STORE) == 22 * 19 * 15 * 4  # every output element stored once


def test_double_buffering_where_two_tiles_fit_and_not_where_they_do_not():
    """The chooser keeps the least-priced plan, so it double-buffers wherever two of its tiles'
    buffers fit (the same tiles overlapped are never slower): at 3 KiB a single-buffered plan of
    several tiles is one whose buffers would not fit twice (conv_s2: 152 tiles in 2,624 bytes), and
    a unit may double-buffer tiles half as big where that prices lower (conv_dw: 44 tiles of one
    channel in 2,816 bytes rather than 22 of two single-buffered)."""
    graph = import_model(odd_layers())
    roomy = _plans(graph, load_platform_text(PLATFORM.format(sram_kib=64)))
    tight = _plans(graph, load_platform_text(PLATFORM.format(sram_kib=3)))
    assert any(p.double_buffered for p in roomy.values() if isinstance(p, TilePlan))
    for plan in roomy.values():
        if isinstance(plan, TilePlan) and plan.double_buffered:
            # a double-buffered plan issues the next tile's loads before this tile's compute
            order = [c.action for c in plan.commands]
            first_compute = order.index(Action.COMPUTE)
            assert any(c.tile == 1 for c in plan.commands[:first_compute])
    tight_plans = [p for p in tight.values() if isinstance(p, TilePlan)]
    assert any(not p.double_buffered and p.count > 1 for p in tight_plans)
    for plan in tight_plans:
        assert plan.sram_bytes <= 3 * 1024
        assert plan.double_buffered or plan.count == 1 or 2 * plan.sram_bytes > 3 * 1024, plan.describe()


def test_no_tiling_fits_a_tiny_sram_and_the_placement_says_why():
    """1 KiB cannot hold one output row of the dilated convolution with its weights: the pin is
    refused by the fits_memory predicate with the smallest tiling's size."""
    model = odd_layers()
    platform = load_platform_text(PLATFORM.format(sram_kib=1))
    plan = _plans(import_model(model), platform)["conv_dil"]
    assert isinstance(plan, Unfit) and "1024 bytes" in plan.reason and "smallest tiling needs" in plan.reason
    with pytest.raises(hetgen.errors.PlacementError, match="no tiling of Conv fits 1024 bytes"):
        place(import_model(model), platform, pins={"conv_dil": NPU})


def test_the_cost_model_prices_the_plan():
    """The group's estimate is its plan's commands timed with the platform's figures (compute at
    the pattern's efficiency, DMA at dma_gbps, command_us per command) plus one launch; more SRAM
    (fewer tiles, fewer halo and weight re-reads) costs less."""
    from hetgen.spec.invocation import tile_rates
    from hetgen.spec.tiling import plan_us

    model = odd_layers()
    costs = {}
    for sram in (8, 64):
        # layer by layer: a cascade would price the group with its neighbours (hetgen/partition/cascades.py)
        platform = load_platform_text(PLATFORM.format(sram_kib=sram) + "options: {cascade: false}\n")
        graph = import_model(model)
        placement = place(graph, platform, pins={"conv_dil": NPU})
        node = next(n for n in graph.nodes if n.source_name == "conv_dil")
        (group,) = [g for g in placement.groups if node.name in g.nodes]
        assert group.target == NPU
        npu = _npu(platform)
        (plan,) = group_plans([node], graph, npu, build_kernel_specs(graph, platform))
        # conv2d's efficiency (1.0: the MAC array's idle cells are priced from its shape instead)
        expected = npu.figures.launch_us + plan_us(plan, tile_rates(npu, 1.0))
        assert group.cost_us == pytest.approx(expected)
        costs[sram] = group.cost_us
    assert costs[64] < costs[8]


def test_explain_shows_each_groups_tiling_in_text_and_json():
    from hetgen.partition import explain_json, explain_text

    model = odd_layers()
    platform = load_platform_text(PLATFORM.format(sram_kib=16))
    graph = import_model(model)
    placement = place(graph, platform, pins={"conv_dil": NPU, "matmul": NPU})
    plans = _plans(graph, platform)
    document = explain_json(placement, graph)
    by_unit = {t["unit"]: (g, t) for g in document["groups"] for t in g["tiling"]}
    conv = next(n.name for n in graph.nodes if n.source_name == "conv_dil")
    group, tiling = by_unit[conv]
    plan = plans["conv_dil"]
    assert group["target"] == NPU
    assert tiling["split"] == plan.split and tiling["count"] == plan.count > 1
    assert tiling["tile_shape"] == list(plan.tile_shape)
    assert tiling["dma_bytes"] == plan.dma_bytes == tiling["load_bytes"] + tiling["store_bytes"]
    assert tiling["double_buffered"] is plan.double_buffered and tiling["sram_bytes"] == plan.sram_bytes
    root_groups = [g for g in document["groups"] if g["target"] != NPU]
    assert root_groups and all(g["tiling"] == [] for g in root_groups)
    text = explain_text(placement, graph)
    shape = "x".join(map(str, plan.tile_shape))
    assert f"tiles: {conv}: {plan.split}, {plan.count} tiles of {shape}, DMA" in text


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2"])
def test_224_cnns_put_every_convolution_on_the_512_kib_npu(name):
    """At 224 x 224 no convolution of these fits the soc's npu whole; tiled, every one runs there
    (benchmarks/bench_placement_pays.py --simulate builds them and checks them against onnxruntime)."""
    from hetgen.models import cnn
    from hetgen.platform import load_platform

    model = (
        cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=224) if name == "resnet18" else cnn.mobilenet_v2(size=224)
    )
    graph = import_model(model)
    placement = place(graph, load_platform("soc"))
    convs = [node.name for node in graph.nodes if node.op == "Conv"]
    assert convs and all(placement.target_of(conv) == "soc/vdevice0/npu0" for conv in convs)
    tilings = [t for g in placement.groups for t in g.tilings if t.unit in convs]
    assert len(tilings) == len(convs) and sum(t.count > 1 for t in tilings) >= len(convs) // 2
