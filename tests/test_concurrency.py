"""Devices run concurrently with their controllers (issue 8, item 5): the generated program submits
device work and waits only before its first reader; the simulator's replay and the price time that
program with the same interpreter (hetgen/spec/timeline.py), and both see the overlap."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen import lower
from hetgen.codegen.manifest import read_manifest
from hetgen.frontend import import_model
from hetgen.lower.program import Call, DeviceCopyIn, DeviceCopyOut, Invoke, Wait
from hetgen.partition.price import placement_price
from hetgen.partition.search import place
from hetgen.partition.timeline import Lanes, program_order
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.devices import simulation_report
from hetgen.runtime.reference import ort_session
from hetgen.spec.timeline import (
    ControllerSteps,
    DeviceCopy,
    DeviceInvoke,
    DeviceRef,
    DeviceWait,
    KernelCall,
    ProgramSteps,
    run_timeline,
)

TOLERANCE = 0.15

# The root (this machine) drives an npu over a link.
PLATFORM = """
name: c
target:
  kind: native
  runtime: {runtime}
  devices:
    npu0:
      kind: npu
      sram_kib: 512
      link: {{bandwidth_gbps: 16, latency_us: 2}}
"""
NPU = "c/npu0"


def two_branches(channels: int = 64, size: int = 14) -> onnx.ModelProto:
    """x feeds two independent convolution branches (one pinned to the npu, one to the root) that
    meet in an Add on the root."""
    rng = np.random.default_rng(7)
    shape = [1, channels, size, size]
    # 3x3 kernels on the npu, 1x1 on the root (slower per flop): the two branches take similar times
    weights = [
        numpy_helper.from_array((rng.standard_normal((channels, channels, k, k)) * 0.05).astype(np.float32), f"w{i}")
        for i, k in enumerate((3, 3, 1, 1))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a0"], name="npu_conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a0"], ["a1"], name="npu_relu0"),
        helper.make_node("Conv", ["a1", "w1"], ["a2"], name="npu_conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2"], ["b0"], name="root_conv0"),
        helper.make_node("Relu", ["b0"], ["b1"], name="root_relu0"),
        helper.make_node("Conv", ["b1", "w3"], ["b2"], name="root_conv1"),
        helper.make_node("Add", ["a2", "b2"], ["y"], name="join"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_branches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


PINS = {
    "npu_conv0": NPU,
    "npu_relu0": NPU,
    "npu_conv1": NPU,
    "root_conv0": "c",
    "root_relu0": "c",
    "root_conv1": "c",
    "join": "c",
}


class _Listed:
    """A timing that reads each step's time off the step: a call's node is its time, an
    accelerator's sub-program number its time."""

    def call_us(self, target, call):
        return float(call.nodes[0])

    def copy_us(self, controller, device, copy):
        return float(copy.nbytes)

    def invocation_us(self, device, program):
        return float(program)


def _makespan(*steps) -> float:
    devices = (DeviceRef("d"), DeviceRef("e"))
    return run_timeline(ProgramSteps("root", {"root": ControllerSteps(devices, (steps,))}), _Listed())


def test_makespan_follows_the_rules():
    # root works 5, submits 10 to d (starts at 5, ends 15), works 3 (8), waits (15), submits 2 to d
    # (15..17), submits 4 to e (15..19), works 1 (16), waits for e (19): the root ends at 19
    d, e = 0, 1
    work, submit, wait = KernelCall, DeviceInvoke, DeviceWait
    steps = [work(("5",)), submit(d, 10), work(("3",)), wait(d), submit(d, 2), submit(e, 4), work(("1",)), wait(e)]
    assert _makespan(*steps) == 19
    # a second submission queues behind the first; the program ends when the last device does
    assert _makespan(submit(d, 10), submit(d, 10), work(("1",))) == 20


def test_program_order_submits_device_work_before_independent_root_work():
    lanes = Lanes({"root": -1, "npu": 0}, frozenset({0}))
    # 0: root prologue; 1: npu work on 0's output; 2: root work on 0's output; 3: joins 1 and 2
    order = program_order(["root", "npu", "root", "root"], [1.0, 10.0, 10.0, 1.0], [(), (0,), (0,), (1, 2)], lanes)
    assert order == [0, 1, 2, 3]
    # listed root-first, the order still submits the npu work first
    order = program_order(["root", "root", "npu", "root"], [1.0, 10.0, 10.0, 1.0], [(), (0,), (0,), (1, 2)], lanes)
    assert order == [0, 2, 1, 3]


@pytest.mark.parametrize("runtime", ["vm", "aot"])
def test_the_root_waits_only_before_the_first_reader(runtime):
    platform = load_platform_text(PLATFORM.format(runtime=runtime))
    graph = import_model(two_branches())
    placement = place(graph, platform, pins=PINS)
    lowered = lower.lower(graph, platform, placement)
    steps = list(lowered.root.steps)
    kinds = [type(step).__name__ for step in steps]
    invokes = [i for i, s in enumerate(steps) if isinstance(s, Invoke)]
    waits = [i for i, s in enumerate(steps) if isinstance(s, Wait)]
    root_calls = [i for i, s in enumerate(steps) if isinstance(s, Call)]
    join = next(i for i, s in enumerate(steps) if isinstance(s, Call) and s.unit.nodes[0].endswith("join"))
    # the npu's work is submitted before the root's branch, which runs before the npu is waited for
    assert all(isinstance(s, DeviceCopyIn) for s in steps[: invokes[0]]), kinds
    assert invokes[0] < root_calls[0] < waits[0], kinds
    assert any(invokes[-1] < i < waits[-1] for i in root_calls), kinds
    # the last wait and the copy of the npu's result come right before the Add that reads it
    assert isinstance(steps[waits[-1] + 1], DeviceCopyOut) and waits[-1] + 2 == join, kinds


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    platform = load_platform_text(PLATFORM.format(runtime="vm"))
    model = two_branches()
    graph = import_model(model)
    placement = place(graph, platform, pins=PINS)
    out = hetgen.compile(platform, model, out=tmp_path_factory.mktemp("c") / "out", native_only=True, pins=PINS)
    return model, placement, out


@pytest.mark.cc
def test_overlapping_branches_compute_what_onnxruntime_computes(built):
    model, _, out = built
    x = np.random.default_rng(1).standard_normal((1, 64, 14, 14)).astype(np.float32)
    (expected,) = ort_session(model.SerializeToString()).run(None, {"x": x})
    got = hetgen.load(out).run({"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.cc
def test_priced_and_simulated_makespans_agree_and_overlap(built):
    _, placement, out = built
    price = placement_price(placement)
    report = simulation_report(out)
    assert report.makespan_us is not None
    assert report.estimate_us == pytest.approx(price.total_us)
    # the two branches overlap: the program takes less than its parts one after the other ...
    assert price.total_us < 0.8 * price.serial_us, price
    assert report.with_estimates_us < 0.8 * report.serial_us, report.to_json()
    # ... and the price and the simulation agree on how much less
    assert abs(report.with_estimates_us / price.total_us - 1) <= TOLERANCE, (report.with_estimates_us, price.total_us)
    npu_branch = sum(g.cost_us for g in placement.groups if g.target == NPU)
    root_branch = sum(g.cost_us for g in placement.groups if g.target == "c")
    assert price.total_us >= max(npu_branch, root_branch)


@pytest.mark.cc
def test_replayed_copies_are_what_the_device_counted(built):
    """The replay times each copy as the device counts it: summed, they are the device's counters."""
    _, _, out = built
    program = read_manifest(out).program
    root = program.controllers[program.root]
    (device,) = root.devices
    replayed = sum(
        device.copies.cycles(step.nbytes) for entry in root.entries for step in entry if type(step) is DeviceCopy
    )
    (device,) = simulation_report(out).devices
    counted = (device.copy_us + device.link_us) * device.clock_mhz
    assert replayed == pytest.approx(counted, rel=1e-6, abs=2)
