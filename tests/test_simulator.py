"""The simulated npu counts cycles from what it is asked to do (docs/simulator.md), not from the
cost model: each case below is a generated, built and run project whose counters must equal a cycle
count worked out by hand from the documented micro-architecture and the platform's parameters.

The platform: a 256-MAC array as 16 x 16, a 16-lane vector unit, 64 bytes per cycle from SRAM,
64 cycles to start a kernel command, a DMA of 2048 bytes per cycle (2048 GB/s at 1000 MHz) after
32 cycles of setup. The DMA is that quick so that each kernel's least-priced plan is one whole tile
(the chooser keeps the least-priced plan of every tiling that fits): a second tile would hide under
the first's compute less DMA than its own kernel command costs (64 cycles; e.g. the Add's second
half: 2 x 32 KiB in and 32 KiB out = 48 cycles of bytes), so splitting never pays; `run_counts`
asserts that every kernel ran as one tile. (test_double_buffered_tiles_overlap_dma_and_compute
counts a plan of many tiles, at 4 bytes a cycle.)
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from bench_support import bench_json
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.devices import simulation_report
from hetgen.runtime.reference import ort_session
from hetgen.spec import build_kernel_specs

PLATFORM = """
name: simt
target:
  kind: native
  runtime: vm
  devices:
    npu0:
      kind: npu
      macs_per_cycle: {macs}
      mac_rows: 16
      clock_mhz: 1000
      dma_gbps: {dma_gbps}
      command_cycles: {command}
      link: {{bandwidth_gbps: 8, latency_us: 5}}
"""
NPU = "simt/npu0"


def platform(macs=256, dma_gbps=2048, command=64):
    return load_platform_text(PLATFORM.format(macs=macs, dma_gbps=dma_gbps, command=command))


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _weight(name, shape, rng):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def five_kernels() -> onnx.ModelProto:
    """Five independent kernels for the npu, each on its own inputs."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["a64", "b64"], ["y64"], name="mm64"),
        helper.make_node("MatMul", ["a65", "b65"], ["y65"], name="mm65"),
        helper.make_node("Conv", ["xc", "wc"], ["yc"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Add", ["p", "q"], ["ya"], name="add"),
        helper.make_node("MaxPool", ["xp"], ["yp"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="pool"),
    ]
    inputs = [
        _value("a64", (64, 64)),
        _value("a65", (65, 64)),
        _value("xc", (1, 8, 16, 16)),
        _value("p", (1, 16, 32, 32)),
        _value("q", (1, 16, 32, 32)),
        _value("xp", (1, 16, 16, 16)),
    ]
    outputs = [
        _value("y64", (64, 64)),
        _value("y65", (65, 65)),
        _value("yc", (1, 16, 16, 16)),
        _value("ya", (1, 16, 32, 32)),
        _value("yp", (1, 16, 16, 16)),
    ]
    weights = [_weight("b64", (64, 64), rng), _weight("b65", (64, 65), rng), _weight("wc", (16, 8, 3, 3), rng)]
    graph = helper.make_graph(nodes, "five", inputs, outputs, initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def one_matmul() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    graph = helper.make_graph(
        [node], "one", [_value("a", (64, 64))], [_value("y", (64, 64))], initializer=[_weight("b", (64, 64), rng)]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


PIN_ALL = {name: NPU for name in ("mm64", "mm65", "conv", "add", "pool")}


def run_counts(tmp_path, model, plat, pins, whole=True):
    """Build and run `model`; return the loaded model, the npu's totals and its per-command cycles
    keyed by (what, ONNX node name or weight tensor). `whole`: assert that each kernel ran as one
    tile (one kernel command, each tensor loaded or stored once), the plan the hand counts are of."""
    out = hetgen.compile(plat, model, out=tmp_path / "out", pins=pins, native_only=True, opt=("-O1",))
    loaded = hetgen.load(out)
    rng = np.random.default_rng(2)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in loaded.inputs}
    got = loaded.run(feeds)
    expected = ort_session(model.SerializeToString()).run(None, feeds)
    for info, want in zip(loaded.outputs, expected):
        np.testing.assert_allclose(got[info.name], want, rtol=1e-4, atol=1e-4)
    manifest = json.loads((out / "hetgen.json").read_text())
    (npu,) = [t for t in manifest["targets"] if t["path"] == NPU]
    by_ir_name = {node: node.split("_", 2)[2] for c in npu["counters"] for node in c["nodes"]}
    counts = {}
    keys = [(c["what"], c["tensor"] if c["what"] != "kernel" else by_ir_name[c["nodes"][0]]) for c in npu["counters"]]
    if whole:
        assert len(set(keys)) == len(keys), f"a kernel ran as several tiles: {sorted(keys)}"
    for counter, cycles in zip(npu["counters"], loaded.device_counters(npu["counters_offset"], len(npu["counters"]))):
        key = counter["tensor"] if counter["what"] != "kernel" else by_ir_name[counter["nodes"][0]]
        counts[(counter["what"], key)] = cycles
    return loaded, loaded.device_stats(npu["stats_device"]), counts, out


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    return run_counts(tmp_path_factory.mktemp("five"), five_kernels(), platform(), PIN_ALL)


@pytest.mark.cc
def test_matmul_64_cubed_fills_the_16x16_array(five):
    _, _, counts, _ = five
    # ceil(64/16) * ceil(64/16) * 64 = 1024 steps; SRAM: 3 * 16 KiB / 64 = 768 cycles, hidden; + 64 to start
    assert counts[("kernel", "mm64")] == 64 + 1024


@pytest.mark.cc
def test_an_odd_shape_wastes_lanes(five):
    _, _, counts, _ = five
    # 65 x 65 outputs over 64: ceil(65/16) = 5 row and column tiles, 5 * 5 * 64 = 1600 steps for
    # 3 % more multiply-accumulates than 64^3 (SRAM: 50180 bytes / 64 = 785 cycles, hidden)
    assert counts[("kernel", "mm65")] == 64 + 1600
    macs_per_step_64 = 64**3 / 1024
    macs_per_step_65 = 65 * 65 * 64 / 1600
    assert macs_per_step_64 == 256 and macs_per_step_65 < 0.67 * 256


@pytest.mark.cc
def test_convolution_is_a_matrix_product_of_pixels_by_output_channels(five):
    _, _, counts, _ = five
    # 16 x 16 output pixels (M = 256), 16 output channels (N), 8 * 3 * 3 taps (K = 72):
    # 16 * 1 * 72 = 1152 steps; SRAM: (8192 + 4608 + 16384) / 64 = 456 cycles, hidden
    assert counts[("kernel", "conv")] == 64 + 1152


@pytest.mark.cc
def test_elementwise_add_is_bound_by_local_memory(five):
    _, _, counts, _ = five
    # 16384 sums / 16 lanes = 1024 cycles, but 3 * 64 KiB / 64 bytes per cycle = 3072 cycles
    assert counts[("kernel", "add")] == 64 + 3072


@pytest.mark.cc
def test_pooling_counts_its_taps(five):
    _, _, counts, _ = five
    # 4096 outputs of 9 taps / 16 lanes = 2304 cycles; SRAM: 2 * 16 KiB / 64 = 512, hidden
    assert counts[("kernel", "pool")] == 64 + 2304


@pytest.mark.cc
def test_tile_loads_and_stores_are_dma(five):
    """Each kernel here fits the 512 KiB SRAM whole and, the DMA being quick, runs as one tile (the
    least-priced plan; run_counts asserts it): it DMAs its inputs and weights in, computes, and DMAs
    its output back, one command after the other (no second tile to overlap)."""
    _, stats, counts, _ = five
    # setup + bytes / 2048 bytes per cycle, a part cycle counting whole
    assert counts[("tile load", "b64")] == 32 + 64 * 64 * 4 // 2048  # 16384 bytes: 8 cycles
    assert counts[("tile load", "a64")] == 32 + 64 * 64 * 4 // 2048
    assert counts[("tile store", "y64")] == 32 + 64 * 64 * 4 // 2048
    assert counts[("tile load", "b65")] == 32 + 9  # 64 * 65 * 4 = 16640 bytes: 8.125 cycles
    assert counts[("tile load", "wc")] == 32 + 3  # 16 * 8 * 9 * 4 = 4608 bytes: 2.25 cycles
    dma = sum(v for (what, _), v in counts.items() if what != "kernel")
    assert stats["load_cycles"] == dma
    assert stats["compute_cycles"] == sum(counts.values())


@pytest.mark.cc
def test_bench_joins_each_group_with_its_counters(five):
    _, _, counts, out = five
    report = simulation_report(out)
    groups = {g.nodes[0].split("_", 2)[2]: g for g in report.groups if g.target == NPU}
    assert set(groups) == {"mm64", "mm65", "conv", "add", "pool"}
    assert groups["mm64"].kernel_us == pytest.approx((64 + 1024) / 1000)
    dma = counts[("tile load", "a64")] + counts[("tile load", "b64")] + counts[("tile store", "y64")]
    assert groups["mm64"].weight_load_us == pytest.approx(dma / 1000)
    assert all(g.estimate_us > 0 for g in groups.values())


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    # 3000 GB/s at 1000 MHz: 3000 bytes per cycle, so a 16 KiB transfer ends mid-cycle
    return run_counts(tmp_path_factory.mktemp("one"), one_matmul(), platform(dma_gbps=3000), {"mm": NPU})


@pytest.mark.cc
def test_copies_to_and_from_the_controller_are_dma(single):
    _, stats, counts, _ = single
    per_copy = 32 + -(-64 * 64 * 4 // 3000)  # ceil(16384 / 3000) = 6
    assert stats["dma_cycles"] == 2 * per_copy  # the input in, the output out
    assert counts[("tile load", "b")] == per_copy
    assert stats["invocations"] == 1


@pytest.mark.cc
def test_the_platforms_npu_parameters_take_effect(tmp_path, single):
    _, _, before, _ = single
    _, _, after, _ = run_counts(tmp_path, one_matmul(), platform(macs=128, dma_gbps=3000, command=10), {"mm": NPU})
    assert before[("kernel", "mm")] == 64 + 1024
    # 128 MACs as 16 rows x 8 columns: 4 * 8 * 64 = 2048 steps, and 10 cycles to start
    assert after[("kernel", "mm")] == 10 + 2048


@pytest.mark.cc
def test_bench_json_puts_estimate_beside_simulation(five):
    _, stats, counts, out = five
    document = bench_json(out)
    assert {"estimate_us", "simulated_us", "groups"} <= set(document)
    (device,) = document["devices"]
    counted = stats["compute_cycles"] + stats["dma_cycles"] + stats["invoke_cycles"] + stats["link_cycles"]
    assert stats["invoke_cycles"] > 0 and stats["link_cycles"] > 0  # invocations and the link are counted
    assert document["counted_us"] == pytest.approx(counted / 1000, abs=1e-3)
    # the whole program: what the device counted, and the root's groups at their estimate (not simulated)
    controllers = sum(g["estimate_us"] for g in document["groups"] if g["simulated_us"] is None)
    assert document["controller_us"] == pytest.approx(controllers, abs=1e-3)
    assert document["with_estimates_us"] == pytest.approx(document["counted_us"] + controllers, abs=2e-3)
    assert document["simulated_us"] <= document["counted_us"] + 2e-3  # no estimate inside
    assert document["estimate_us"] > 0 and device["path"] == NPU
    add = next(g for g in document["groups"] if g["nodes"][0].endswith("_add"))
    assert add["target"] == NPU and add["estimate_us"] > 0
    assert add["kernel_us"] == pytest.approx(counts[("kernel", "add")] / 1000, abs=1e-3)
    per_invocation = stats["invoke_cycles"] / stats["invocations"] / 1000
    moved = counts[("tile load", "p")] + counts[("tile load", "q")] + counts[("tile store", "ya")]
    assert add["weight_load_us"] == pytest.approx(moved / 1000, abs=1e-3)  # the tiles' DMA
    expected = (counts[("kernel", "add")] + moved) / 1000 + per_invocation
    assert add["simulated_us"] == pytest.approx(expected, abs=2e-3)


def _descriptors(nodes, inputs, outputs, weights=()) -> dict:
    from hetgen.frontend import import_model
    from hetgen.lower.work import kernel_work

    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(weights))
    imported = import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return {node.source_name: kernel_work(node, node, imported) for node in imported.nodes}


def test_descriptors_of_batched_and_one_dimensional_products_and_depthwise_convolution():
    from hetgen.lower.work import Engine

    rng = np.random.default_rng(3)
    work = _descriptors(
        [
            helper.make_node("MatMul", ["a", "b"], ["ab"], name="batched"),
            helper.make_node("MatMul", ["v", "m"], ["vm"], name="row"),
            helper.make_node("MatMul", ["m2", "v2"], ["mv"], name="column"),
            helper.make_node("Conv", ["x", "dw"], ["y"], group=8, pads=[1, 1, 1, 1], name="depthwise"),
        ],
        [_value("a", (2, 3, 5, 7)), _value("b", (2, 3, 7, 4)), _value("v", (7,)), _value("m2", (5, 7))]
        + [_value("x", (1, 8, 6, 6))],
        [_value("ab", (2, 3, 5, 4)), _value("vm", (4,)), _value("mv", (5,)), _value("y", (1, 8, 6, 6))],
        [_weight("m", (7, 4), rng), _weight("v2", (7,), rng), _weight("dw", (8, 1, 3, 3), rng)],
    )
    shape = {name: (w.engine, w.batch, w.m, w.n, w.k) for name, w in work.items()}
    assert shape["batched"] == (Engine.MAC_ARRAY, 6, 5, 4, 7)
    assert shape["row"] == (Engine.MAC_ARRAY, 1, 1, 4, 7)
    assert shape["column"] == (Engine.MAC_ARRAY, 1, 5, 1, 7)
    # each of 8 channels is its own product of 36 pixels x 1 output channel over 9 taps
    assert shape["depthwise"] == (Engine.MAC_ARRAY, 8, 36, 1, 9)
    assert work["depthwise"].bytes == 4 * (8 * 36 + 8 * 9 + 8 * 36)


def _cycles(work: dict, dma_per_cycle: float) -> int:
    """docs/simulator.md's formulas, by hand: a command's cycles from its descriptor."""
    if work["engine"] == "dma":
        return 32 + -(-work["bytes"] // int(dma_per_cycle))
    if work["engine"] == "vector":
        compute = -(-work["batch"] * work["m"] * work["k"] // 16)
    else:
        compute = work["batch"] * -(-work["m"] // 16) * -(-work["n"] // 16) * work["k"]
    return 64 + max(compute, -(-work["bytes"] // 64))


QUEUED = """
kinds:
  npu_q:
    refines: npu
    device: {{dma_outstanding_bytes: {outstanding}}}
"""


@pytest.mark.cc
@pytest.mark.parametrize("outstanding", [0, 64])
def test_double_buffered_tiles_overlap_dma_and_compute(tmp_path, outstanding):
    """A 3x3 convolution, 32 -> 32 channels on 32 x 32 pixels, on a 96 KiB SRAM runs as tiles,
    double-buffered. The DMA engine and the MAC array each run their commands in order; a command
    starts when its engine is free and the command it waits for has finished. The counters add up
    to that timeline, worked out here by hand from each tile's shapes, which is less than the
    commands' cycles one after another. With dma_outstanding_bytes 64 (at 4 bytes a cycle: 16
    cycles' worth), a DMA queued behind another (its engine busy when it could start) hides 16 of
    its 32 setup cycles; the cost model's timeline (plan_us) counts the same."""
    from hetgen.frontend import import_model
    from hetgen.spec.invocation import group_plans, tile_rates
    from hetgen.spec.tiling import Action, plan_us

    rng = np.random.default_rng(4)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    shape = (1, 32, 32, 32)
    graph = helper.make_graph(
        [node], "conv", [_value("x", shape)], [_value("y", shape)], initializer=[_weight("w", (32, 32, 3, 3), rng)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    text = PLATFORM.replace("clock_mhz: 1000", "clock_mhz: 1000\n      sram_kib: 96")
    text = text.format(macs=256, dma_gbps=4, command=64)
    if outstanding:
        text = QUEUED.format(outstanding=outstanding) + text.replace("kind: npu\n", "kind: npu_q\n")
    plat = load_platform_text(text)
    npu = next(t for t in plat.targets() if t.path_str == NPU)
    ir = import_model(model)
    (plan,) = group_plans(list(ir.nodes), ir, npu, build_kernel_specs(ir, plat))
    assert plan.double_buffered and plan.count > 2
    finish, free, end, serial, hidden = [], {True: 0, False: 0}, 0, 0, 0
    for command in plan.commands:
        dma = command.action is not Action.COMPUTE
        if dma:
            work = {"engine": "dma", "bytes": plan.block_of(command).nbytes}
        else:  # output pixels x output channels over input channels x taps
            x, w = plan.kernels[plan.tiles[command.tile].kernel].instance.input_types[:2]
            y = plan.kernels[plan.tiles[command.tile].kernel].instance.output_types[0]
            work = {"engine": "mac", "batch": 1, "m": y.shape[2] * y.shape[3], "n": w.shape[0], "k": 32 * 9}
            work["bytes"] = x.nbytes + w.nbytes + y.nbytes
        cycles = _cycles(work, 4)
        serial += cycles
        ready = finish[len(finish) - command.after] if command.after else 0
        if dma and outstanding and free[True] > 0 and ready <= free[True]:
            cycles -= outstanding // 4  # queued: the reads in flight hide 16 of its 32 setup cycles
            hidden += 1
        done = max(free[dma], ready) + cycles
        free[dma] = done
        finish.append(done)
        end = max(end, done)
    _, stats, _, _ = run_counts(tmp_path, model, plat, {"conv": NPU}, whole=False)
    assert stats["compute_cycles"] == end < serial
    assert (hidden > 0) == bool(outstanding)
    assert npu.figures.dma_hidden_us == pytest.approx(outstanding / 4 / 1000)
    # the estimate's timeline: the same commands; its overhead is the averaged (64 + 32) / 2 a command
    rates = tile_rates(npu)
    assert rates.dma_hidden_us == npu.figures.dma_hidden_us
    us = plan_us(plan, rates)
    assert us == pytest.approx(end / 1000, rel=0.1)


OUTPUT_STAGE = """
name: simt
kinds:
  npu_out:
    refines: npu
    device: {output_cycles_per_element: 2}
target:
  kind: native
  runtime: vm
  devices:
    npu0: {kind: npu_out, macs_per_cycle: 256, mac_rows: 16, clock_mhz: 1000, dma_gbps: 3000, command_cycles: 64}
"""


@pytest.mark.cc
def test_the_output_stage_bounds_a_mac_command(tmp_path, single):
    """output_cycles_per_element (an Ethos-U's output stage, docs/ethos-u.md): 64 x 64 outputs at 2
    cycles each (8192) outlast the array's 1024 steps; the cost model prices the same bound."""
    _, _, before, _ = single
    plat = load_platform_text(OUTPUT_STAGE)
    _, _, after, _ = run_counts(tmp_path, one_matmul(), plat, {"mm": NPU})
    assert before[("kernel", "mm")] == 64 + 1024
    assert after[("kernel", "mm")] == 64 + 2 * 64 * 64
    (npu,) = [t for t in plat.targets() if t.path_str == NPU]
    assert npu.figures.output_us == pytest.approx(2 / 1000)
