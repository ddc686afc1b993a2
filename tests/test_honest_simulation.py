"""The simulated total counts everything it reports (issue #23 item 1): every group and copy carries
its source, no estimate-sourced figure is inside `simulated_us`, copies follow the bytes the devices
counted (not their estimate), and each npu group's estimate agrees with what the simulator counted,
int8 MaxPool included (hetgen/runtime/devices.py, docs/simulator.md).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.platform.loader import load_platform
from hetgen.runtime.devices import ESTIMATE, SIMULATOR, SOURCES, simulation_report
from hetgen.runtime.replay import Counted
from hetgen.spec.timeline import (
    ControllerSteps,
    CopyTiming,
    DeviceCopy,
    DeviceInvoke,
    DeviceRef,
    DeviceWait,
    KernelCall,
    ProgramSteps,
    run_timeline,
)

NPU = "soc/vdevice0/npu0"


def int8_pool_model() -> onnx.ModelProto:
    """float -> QuantizeLinear -> int8 MaxPool -> QLinearConv -> DequantizeLinear -> Tanh: the int8
    kernels for the npu, the Tanh (no npu pattern) for a CPU."""
    rng = np.random.default_rng(0)
    scalar = numpy_helper.from_array
    weights = [
        scalar(np.array(0.05, np.float32), "s"),
        scalar(np.array(0, np.int8), "z"),
        scalar(rng.integers(-20, 20, (16, 8, 3, 3)).astype(np.int8), "w"),
        scalar(np.array(0.02, np.float32), "ws"),
        scalar(np.array(0.1, np.float32), "ys"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant"),
        helper.make_node("MaxPool", ["xq"], ["pq"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, name="pool"),
        helper.make_node("QLinearConv", ["pq", "s", "z", "w", "ws", "z", "ys", "z"], ["cq"], pads=[1] * 4, name="conv"),
        helper.make_node("DequantizeLinear", ["cq", "ys", "z"], ["c"], name="dequant"),
        helper.make_node("Tanh", ["c"], ["y"], name="tanh"),
    ]
    graph = helper.make_graph(
        nodes,
        "int8_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
        initializer=weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build on the shipped soc: the int8 kernels pinned to its npu (behind the co-processor's
    link), the Tanh on the root."""
    out = tmp_path_factory.mktemp("honest") / "out"
    pins = {name: NPU for name in ("quant", "pool", "conv", "dequant")}
    platform = load_platform("soc")
    return hetgen.compile(platform, int8_pool_model(), out=out, pins=pins, native_only=True, opt=("-O1",))


@pytest.mark.cc
def test_no_estimate_is_inside_the_simulated_total(built, tmp_path):
    report = simulation_report(built)
    assert all(g.source in SOURCES for g in report.groups) and all(c.source in SOURCES for c in report.copies)
    cpu = [g for g in report.groups if g.source == ESTIMATE]
    assert cpu and all(g.simulated_us is None and g.target == "soc" for g in cpu)
    assert report.simulated_groups == len(report.groups) - len(cpu) > 0
    assert report.controller_us == pytest.approx(sum(g.estimate_us for g in cpu))
    # the same program with every estimate made 1000x wrong: the simulated total does not move
    tampered = tmp_path / "tampered"
    shutil.copytree(built, tampered)
    manifest = json.loads((tampered / "hetgen.json").read_text())
    for entry in manifest["estimates"]:
        if entry["target"] == "soc" or entry.get("tensor"):
            entry["estimate_us"] *= 1000
            for part in entry.get("parts", ()):
                part["us"] *= 1000
    (tampered / "hetgen.json").write_text(json.dumps(manifest))
    wrong = simulation_report(tampered)
    assert wrong.simulated_us == pytest.approx(report.simulated_us, rel=1e-9)
    assert wrong.transfer_simulated_us == pytest.approx(report.transfer_simulated_us, rel=1e-9)
    assert wrong.with_estimates_us > report.with_estimates_us + 100 * report.controller_us


@pytest.mark.cc
def test_copies_are_the_bytes_that_crossed(built):
    report = simulation_report(built)
    assert report.copies and all(c.source == SIMULATOR for c in report.copies)
    host = next(d for d in report.devices if d.path.endswith("/host"))
    # the root's copy in and out over the co-processor's link: the bytes the program moves
    assert host.link_copies == host.planned_link_copies >= 2
    assert host.link_bytes == host.planned_link_bytes == 8 * 32 * 32 * 4 + 16 * 16 * 16 * 4
    assert report.copies_checked
    counted = sum(d.copy_us + d.link_us for d in report.devices)
    assert report.transfer_simulated_us == pytest.approx(counted)


@pytest.mark.cc
def test_each_npu_group_agrees_with_the_simulator_int8_pool_included(built):
    report = simulation_report(built)
    npu = [g for g in report.groups if g.target == NPU]
    assert any("maxpool_int8" in g.label for g in npu), [g.label for g in npu]
    for g in npu:
        assert g.source == SIMULATOR
        assert abs(g.simulated_us / g.estimate_us - 1) <= 0.10, g


def test_replay_counts_copies_at_the_counted_scale_and_no_controller_estimate():
    """The replay (hetgen/runtime/replay.py): a controller's kernel without a share is 0, and a copy
    follows what its device counted (`copy_scale`), not its model alone."""
    timing = CopyTiming(1000.0, 0, 0.0, 1000.0, 4.0)  # 1 us latency, 4 bytes a cycle at 1 GHz
    steps = (KernelCall(("k",)), DeviceCopy(0, 4000), DeviceInvoke(0, 0), DeviceWait(0))
    program = ProgramSteps("root", {"root": ControllerSteps((DeviceRef("dev", timing),), (steps,))})
    counted = run_timeline(program, Counted({}, {("dev", 0): 10.0}))
    assert counted == pytest.approx(2.0 + 10.0)  # the copy (1 + 1000 cycles at 1 GHz) and the invocation
    scaled = run_timeline(program, Counted({}, {("dev", 0): 10.0}, {"dev": 2.0}))
    assert scaled == pytest.approx(2 * 2.0 + 10.0)
    with_estimate = run_timeline(program, Counted({("root", ("k",)): 5.0}, {("dev", 0): 10.0}))
    assert with_estimate == pytest.approx(5.0 + 2.0 + 10.0)
