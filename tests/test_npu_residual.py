"""A Conv with its residual Add (and the Add's activation) as one tiled unit on the npu, as NPU
compilers run it: each output tile of the Conv, before it is stored, gets the matching tile of the
residual DMA'd in (no halo) and added by the vector unit, so the sum leaves SRAM once instead of the
Conv's output going out and coming back for a separate Add.

The kernel table forms the unit (hetgen/spec/patterns.py), the npu's pattern table admits it
(npu.yaml: `unit: conv_residual`), its tile plan prices it (the residual's DMA is in the plan),
lowering emits exactly that plan, the simulator counts the residual's DMA and the vector unit's adds
from the commands it is given, and the result matches onnxruntime.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from bench_support import bench_json
from hetgen.frontend import import_model
from hetgen.models.cnn import resnet
from hetgen.partition import place
from hetgen.platform import load_platform
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.devices import simulation_report
from hetgen.runtime.reference import ort_session
from hetgen.spec import build_kernel_specs
from hetgen.spec.invocation import group_plans, tile_rates
from hetgen.spec.tiling import Action, TilePlan, plan_us

TOLERANCE = 0.15

# test_simulator.py's npu: 16 x 16 MACs, 16 vector lanes, 64 SRAM bytes a cycle, 64 cycles to start a
# kernel command, DMA of 4 bytes a cycle (4 GB/s at 1000 MHz) after 32 cycles of setup.
PLATFORM = """
name: rest
target:
  kind: native
  runtime: vm
  devices:
    npu0:
      kind: npu
      macs_per_cycle: 256
      mac_rows: 16
      clock_mhz: 1000
      dma_gbps: 4
      sram_kib: {sram_kib}
      link: {{bandwidth_gbps: 8, latency_us: 5}}
"""
NPU = "rest/npu0"
# The same npu with a DMA of 2048 bytes a cycle: so quick that a second tile would hide under the
# first's compute less DMA than its own kernel command costs (64 cycles), so one whole tile is the
# least-priced plan of the unit (the chooser keeps the least priced of every tiling that fits).
QUICK_DMA = PLATFORM.replace("dma_gbps: 4\n", "dma_gbps: 2048\n")
BLOCK = ("conv", "add", "relu")


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def residual_block(channels=16, size=16, bias=False) -> onnx.ModelProto:
    """y = Relu(Conv3x3(x) + r): r is a second input, so its tile loads are counted on their own."""
    rng = np.random.default_rng(5)
    shape = (1, channels, size, size)
    weights = [numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32), "w")]
    conv_inputs = ["x", "w"]
    if bias:
        weights.append(numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b"))
        conv_inputs.append("b")
    nodes = [
        helper.make_node("Conv", conv_inputs, ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["r", "c"], ["s"], name="add"),  # the Conv's output second: either order
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "block", [_value("x", shape), _value("r", shape)], [_value("y", shape)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _npu(platform):
    return next(t for t in platform.targets() if t.path_str.endswith("npu0"))


def _run(out, model) -> dict:
    loaded = hetgen.load(out)
    rng = np.random.default_rng(6)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in loaded.inputs}
    got = loaded.run(feeds)
    for info, want in zip(loaded.outputs, ort_session(model.SerializeToString()).run(None, feeds)):
        np.testing.assert_allclose(got[info.name], want, rtol=1e-4, atol=1e-4)
    return loaded


def _npu_counts(out, loaded) -> dict:
    manifest = json.loads((out / "hetgen.json").read_text())
    (npu,) = [t for t in manifest["targets"] if t["path"] == NPU]
    counts = {}
    for counter, cycles in zip(npu["counters"], loaded.device_counters(npu["counters_offset"], len(npu["counters"]))):
        key = counter["tensor"] if counter["what"] != "kernel" else counter["nodes"][0].split("_", 2)[2]
        counts[(counter["what"], key)] = cycles
    return counts


def test_the_npu_takes_conv_add_relu_as_one_group_priced_by_its_plan():
    """Placement prefers the fused unit (one invocation, the Conv's output never leaves SRAM) to
    the Conv and the Add as two groups; its price is its plan's commands, and the plan loads the
    residual once per tile, the output block's rows and channels."""
    model = residual_block(channels=32, size=32, bias=True)
    platform = load_platform_text(PLATFORM.format(sram_kib=64))  # too small whole: tiled
    graph = import_model(model)
    placement = place(graph, platform, pins={name: NPU for name in BLOCK})
    (group,) = [g for g in placement.groups if g.target == NPU]
    assert group.label == "conv_residual" and len(group.nodes) == 3
    nodes = [n for n in graph.nodes if n.name in group.nodes]
    (plan,) = group_plans(nodes, graph, _npu(platform), build_kernel_specs(graph, platform))
    assert isinstance(plan, TilePlan) and plan.count > 1
    npu = _npu(platform)
    assert group.cost_us == pytest.approx(npu.figures.launch_us + plan_us(plan, tile_rates(npu, 1.0, nodes)))
    residual = [c for c in plan.commands if c.action is Action.LOAD and c.operand == 3]
    assert len(residual) == plan.count  # one residual block per tile
    tensor_bytes = 32 * 32 * 32 * 4
    assert sum(plan.block_of(c).nbytes for c in residual) == tensor_bytes  # no halo: each element once
    assert plan.moved(Action.STORE) == tensor_bytes  # the sum is stored once
    # the alternative it beat: the Conv and the Add as separate npu groups
    assert any(a.target == NPU and a.label == "conv2d+add" and a.cost_us > group.cost_us for a in group.alternatives)


def test_explain_shows_the_fused_residual_group_and_its_tiles():
    from hetgen.partition import explain_json, explain_text

    model = resnet(widths=(16, 32), blocks=1, size=32)
    graph = import_model(model)
    placement = place(graph, load_platform("soc"))
    fused = [g for g in placement.groups if g.label == "conv_residual"]
    assert len(fused) == 2 and all(g.target == "soc/vdevice0/npu0" for g in fused)
    ops = {node.name: node.op for node in graph.nodes}
    assert all([ops[n] for n in g.nodes] == ["Conv", "Add", "Relu"] for g in fused)
    text = explain_text(placement, graph)
    assert "[conv_residual]" in text and f"tiles: {fused[0].nodes[0]}:" in text
    # each fused group's residual (16 x 16 x 16 and 32 x 8 x 8 floats) comes in once, in its tiles
    residuals = [t.residual_bytes for g in fused for t in g.tilings]
    assert residuals == [16 * 16 * 16 * 4, 32 * 8 * 8 * 4]
    assert "of which the residual 16.4 kB" in text
    document = explain_json(placement, graph)
    shown = [t.get("residual_bytes", 0) for g in document["groups"] for t in g["tiling"]]
    assert sorted(r for r in shown if r) == sorted(residuals)


def test_an_add_that_is_not_a_residual_of_its_conv_is_no_unit():
    """Conv -> Add(c, bias row) broadcasts its other input: the kernel table forms no residual unit
    of it, so the npu's conv_residual pattern has nothing to admit (no predicate re-decides what the
    table decided); the Conv and the Add stay separate units."""
    rng = np.random.default_rng(1)
    shape = (1, 8, 8, 8)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "row"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    weights = [
        numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32), "w"),
    ]
    graph = helper.make_graph(
        nodes, "bcast", [_value("x", shape), _value("row", (1, 8, 1, 8))], [_value("y", shape)], weights
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ir = import_model(model)
    platform = load_platform_text(PLATFORM.format(sram_kib=512))
    assert not build_kernel_specs(ir, platform).patterns
    placement = place(ir, platform)
    assert all(g.label != "conv_residual" and len(g.nodes) <= 2 for g in placement.groups)
    assert not [r for g in placement.groups for r in g.refused if r.label == "conv_residual"]


@pytest.fixture(scope="module")
def block_build(tmp_path_factory):
    model = residual_block()
    platform = load_platform_text(QUICK_DMA.format(sram_kib=512))
    out = hetgen.compile(
        platform, model, out=tmp_path_factory.mktemp("block") / "g", pins={n: NPU for n in BLOCK},
        native_only=True, opt=("-O1",),
    )  # fmt: skip
    loaded = _run(out, model)
    return model, out, loaded


@pytest.mark.cc
def test_simulator_counts_the_fused_tile_by_hand(block_build):
    """16 -> 16 channels, 3x3, on 16 x 16 pixels: the unit fits the SRAM whole and, the DMA being
    quick (QUICK_DMA), runs as one tile, its least-priced plan (asserted: one command each).
    Its kernel command: the MAC array's 256 output pixels (M) x 16 channels (N) over 16 * 9 taps
    (K) is ceil(256/16) * ceil(16/16) * 144 = 2304 steps, then the vector unit adds the residual to
    its 4096 outputs at 16 lanes: 256 cycles; SRAM traffic x 16384 + w 9216 + residual 16384 + y
    16384 = 58368 bytes / 64 = 912 cycles, hidden; 64 cycles to start: 64 + 2304 + 256 = 2624.
    The residual's tile load: 32 cycles of setup + 16384 bytes / 2048 a cycle = 40 (w's 9216 bytes:
    4.5 cycles, a part cycle counting whole)."""
    _, out, loaded = block_build
    (device,) = [t for t in json.loads((out / "hetgen.json").read_text())["targets"] if t["path"] == NPU]
    commands = [(c["what"], c.get("tensor")) for c in device["counters"]]
    assert sorted(commands, key=str) == sorted(
        [("tile load", "x"), ("tile load", "w"), ("tile load", "r"), ("kernel", None), ("tile store", "y")], key=str
    )  # one tile: each tensor moved once, one kernel command
    counts = _npu_counts(out, loaded)
    assert counts[("kernel", "conv")] == 64 + 2304 + 256
    assert counts[("tile load", "r")] == 32 + 16384 // 2048
    assert counts[("tile load", "x")] == 32 + 16384 // 2048
    assert counts[("tile load", "w")] == 32 + 5
    assert counts[("tile store", "y")] == 32 + 16384 // 2048
    kernels = [key for key in counts if key[0] == "kernel"]
    assert kernels == [("kernel", "conv")]  # one kernel command: no separate Add
    stats = loaded.device_stats(device["stats_device"])
    assert stats["invocations"] == 1 and stats["compute_cycles"] == sum(counts.values())


@pytest.mark.cc
def test_the_generated_command_names_the_residual_engine(block_build):
    _, out, _ = block_build
    source = next(out.rglob("npu0/model.c")).read_text()
    assert "{ HG_SIM_MAC_ARRAY_RESIDUAL, " in source and "HG_SIM_VECTOR" not in source.split("_work_0[]")[1]


@pytest.mark.cc
def test_sanitized_build_of_a_tiled_residual_unit_verifies(tmp_path):
    """ASan and UBSan over the tiled unit's DMA and kernel calls (the residual read from SRAM), -Werror."""
    model = residual_block(channels=24, size=20, bias=True)
    out = hetgen.compile(
        load_platform_text(PLATFORM.format(sram_kib=48)), model, out=tmp_path / "asan",
        pins={n: NPU for n in BLOCK}, native_only=True, opt=("-O1",), sanitize=("address", "undefined"), werror=True,
    )  # fmt: skip
    estimates = json.loads((out / "hetgen.json").read_text())["estimates"]
    assert [g["label"] for g in estimates if g["target"] == NPU and g["label"] != "transfer"] == ["conv_residual"]
    done = subprocess.run([sys.executable, "-m", "hetgen", "verify", str(out)], capture_output=True, text=True)
    assert done.returncode == 0 and "1 of 1 outputs match" in done.stdout, done.stdout + done.stderr


@pytest.mark.cc
@pytest.mark.parametrize("platform_name", ["soc", "dual"])
def test_small_resnet_matches_onnxruntime(tmp_path, platform_name):
    model = resnet(widths=(16, 32), blocks=1, size=32)
    out = hetgen.compile(load_platform(platform_name), model, out=tmp_path / "g", native_only=True, opt=("-O1",))
    _run(out, model)
    labels = [g["label"] for g in json.loads((out / "hetgen.json").read_text())["estimates"] if g["label"]]
    # a cascade's estimate names its groups' labels: "cascade: conv2d + conv_residual"
    groups = [label for entry in labels for label in entry.removeprefix("cascade: ").split(" + ")]
    assert groups.count("conv_residual") == 2


@pytest.fixture(scope="module", params=["soc", "dual"])
def tiled_resnet(request, tmp_path_factory):
    """64 channels at 112 x 112 (each activation 3.2 MB): every unit is tiled into the 512 KiB SRAM."""
    model = resnet(widths=(64,), blocks=1, size=112)
    out = hetgen.compile(
        load_platform(request.param), model, out=tmp_path_factory.mktemp(request.param) / "g",
        native_only=True, opt=("-O2",),
    )  # fmt: skip
    return model, out


@pytest.mark.cc
def test_tiled_resnet_matches_onnxruntime(tiled_resnet):
    model, out = tiled_resnet
    _run(out, model)


@pytest.mark.cc
def test_tiled_resnet_estimate_and_simulation_agree(tiled_resnet):
    _, out = tiled_resnet
    document = bench_json(out)
    (fused,) = [g for g in document["groups"] if g["label"] == "conv_residual"]
    assert fused["simulated_us"] == pytest.approx(fused["estimate_us"], rel=TOLERANCE)
    assert document["with_estimates_us"] == pytest.approx(document["estimate_us"], rel=TOLERANCE)
    report = simulation_report(out)
    assert any(g.label == "conv_residual" for g in report.groups)


@pytest.mark.cc
def test_the_residual_units_tiles_are_priced_with_the_mac_columns_they_leave_idle(tmp_path):
    """ResNet-18's second stage shape (128 -> 128 channels, 56 x 56) on 512 KiB: the Conv alone runs
    16 channels a tile double-buffered; with the residual's buffers that no longer fits. Eight
    channels a tile leave half the MAC array's 16 columns idle, 16 channels with fewer rows re-read
    more halo and weights: the cost model prices both (the array's utilisation from its mac_rows and
    mac_cols figures, tiling.mac_utilisation), picks the cheaper, and the simulator agrees."""
    model = residual_block(channels=128, size=56)
    platform = load_platform_text(PLATFORM.format(sram_kib=512))
    graph = import_model(model)
    kernels = build_kernel_specs(graph, platform)
    nodes = {node.source_name: node for node in graph.nodes}
    npu = _npu(platform)
    (alone,) = group_plans([nodes["conv"]], graph, npu, kernels)
    (fused,) = group_plans([nodes[name] for name in BLOCK], graph, npu, kernels)
    assert isinstance(alone, TilePlan) and isinstance(fused, TilePlan)
    assert alone.tile_shape[1] == 16 and alone.tile_shape[1] < 128
    assert fused.tiles[0].vector == fused.tile_shape[1] * fused.tile_shape[2] * fused.tile_shape[3]
    rates = tile_rates(npu, 1.0, [nodes["conv"]])
    blind = dataclasses.replace(rates, mac_rows=0, mac_cols=0)
    if fused.tile_shape[1] < 16:  # idle columns: priced above what the array's peak alone says
        assert plan_us(fused, rates) > plan_us(fused, blind) * 1.2
    out = hetgen.compile(
        platform, model, out=tmp_path / "g", pins={n: NPU for n in BLOCK}, native_only=True, opt=("-O2",)
    )
    document = bench_json(out)
    (group,) = [g for g in document["groups"] if g["label"] == "conv_residual"]
    assert group["simulated_us"] == pytest.approx(group["estimate_us"], rel=0.05)
