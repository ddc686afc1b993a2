"""One truth (issue 8, item 3): the cost model prices the program that runs. The copies the placement
charges are the generated program's copies; explain's total is bench's estimate; and on the shipped
platforms and the model families the tests use, that estimate and the simulated total agree."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen import lower
from hetgen.frontend import import_model
from hetgen.lower.program import DeviceCopyIn, DeviceCopyOut, ProgramRole
from hetgen.lower.workspace import device_program_path
from hetgen.models import tiny_cnn, transformer_encoder
from hetgen.partition.explain import explain_json
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform, load_platform_text
from hetgen.runtime.devices import simulation_report

REPO = Path(__file__).resolve().parent.parent
TOLERANCE = 0.15
# The simulated devices count cycles by what their programs do, and the CPU groups report their
# estimates: nothing compared here depends on how the C was optimised, so the builds are at -O1.
COUNTED = ("-O1",)

SOC = """
name: s
target:
  kind: native
  runtime: vm
  devices:
    vdev:
      kind: accelerator-with-coprocessor
      link: {bandwidth_gbps: 4, latency_us: 20}
      host: {kind: native, runtime: graph}
      devices:
        npu0: {kind: npu, sram_kib: 512}
"""
NPU, COPROCESSOR = "s/vdev/npu0", "s/vdev/host"


def fan_out() -> onnx.ModelProto:
    """x is read by two convolutions (both pinned to the npu) and by a Relu on the co-processor."""
    rng = np.random.default_rng(4)
    shape = [1, 16, 8, 8]
    weights = [
        numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32), f"w{i}")
        for i in range(2)
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["x"], ["r"], name="relu_cop"),
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["a", "c"], ["ac"], name="add_root"),
        helper.make_node("Add", ["ac", "r"], ["y"], name="add_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "fan_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


FAN_OUT_PINS = {"conv0": NPU, "conv1": NPU, "relu_cop": COPROCESSOR, "add_root": "s", "add_out": "s"}


def program_copies(lowered) -> Counter:
    """(tensor, bytes, from, to) of every copy in every controller's program."""
    paths = {program.target.path_str for program in lowered.programs}
    copies: Counter = Counter()
    for program in lowered.programs:
        if program.role is ProgramRole.ACCELERATOR:
            continue
        here = program.target.path_str
        for step in program.steps:
            if isinstance(step, (DeviceCopyIn, DeviceCopyOut)):
                there = device_program_path(program.devices[step.device], paths)
                ends = (here, there) if isinstance(step, DeviceCopyIn) else (there, here)
                copies[(step.tensor, step.nbytes, *ends)] += 1
    return copies


def test_priced_copies_are_the_programs_copies():
    platform = load_platform_text(SOC)
    graph = import_model(fan_out())
    placement = place(graph, platform, pins=FAN_OUT_PINS)
    priced = Counter((t.tensor, t.bytes, t.src, t.dst) for t in placement.transfers)
    assert priced == program_copies(lower.lower(graph, platform, placement))
    # x crosses the link once (into the co-processor, which reads it and keeps it), then the npu's
    # DMA once: both npu groups find it there
    x_copies = sorted((t.src, t.dst) for t in placement.transfers if t.tensor == "x")
    assert x_copies == [("s", COPROCESSOR), (COPROCESSOR, NPU)]
    over_link = [t for t in placement.transfers if t.links]
    assert all(link.below == "s/vdev" for t in over_link for link in t.links)
    x_link = next(t for t in placement.transfers if t.tensor == "x" and t.links)
    assert x_link.cost_us == pytest.approx(20 + x_link.bytes / 4e3)


@pytest.mark.cc
def test_the_copies_over_the_link_are_counted_as_priced(tmp_path):
    """The same program run: the co-processor counts each copy over its link, as many and as large
    as the placement priced, and the link time it counts is the priced one."""
    platform = load_platform_text(SOC)
    model = fan_out()
    graph = import_model(model)
    placement = place(graph, platform, pins=FAN_OUT_PINS)
    out = hetgen.compile(platform, model, out=tmp_path / "out", native_only=True, pins=FAN_OUT_PINS, opt=COUNTED)
    report = simulation_report(out)
    (coprocessor,) = [d for d in report.devices if d.path == COPROCESSOR]
    over_link = [t for t in placement.transfers if t.links]
    assert coprocessor.link_copies == len(over_link)
    assert coprocessor.link_bytes == sum(t.bytes for t in over_link)
    assert coprocessor.link_us == pytest.approx(sum(t.cost_us for t in over_link), abs=0.01)
    assert report.transfer_simulated_us == pytest.approx(report.transfer_estimate_us, rel=0.02)


@pytest.mark.cc
def test_explain_total_is_bench_estimate(tmp_path, cli):
    model = REPO / "examples" / "resnet_tiny.onnx"
    out = tmp_path / "out"
    built = cli("soc", model, "-o", out, "--native-only", *COUNTED)
    assert built.returncode == 0, built.stderr
    explained = cli("explain", "soc", model, "--format", "json")
    assert explained.returncode == 0, explained.stderr
    benched = cli("bench", out, "--runs", "1", "--format", "json")
    assert benched.returncode == 0, benched.stderr
    total = json.loads(explained.stdout)["total_us"]
    assert json.loads(benched.stdout)["estimate_us"] == round(total, 3)


# -- the shipped platforms x the model families the tests use ---------------------------------------

MODELS = {
    "tiny_cnn": tiny_cnn,
    "resnet_tiny": lambda: onnx.load(REPO / "examples" / "resnet_tiny.onnx"),
    "transformer": transformer_encoder,
}
CASES = [
    (platform, model, mode)
    for platform in ("soc", "dual", "slowlink", "host")
    for model in MODELS
    # greedy offloads whatever an accelerator can take: the simulator then counts most of the program
    for mode in (("cost", "greedy") if platform != "host" else ("cost",))
]


@pytest.mark.cc
@pytest.mark.parametrize(("platform_name", "model_name", "mode"), CASES)
def test_estimate_and_simulation_agree(tmp_path, platform_name, model_name, mode):
    platform = load_platform(str(REPO / "platforms" / f"{platform_name}.yaml"))
    model = MODELS[model_name]()
    graph = import_model(model)
    placement = place(graph, platform, mode=mode)
    explained = explain_json(placement, graph)
    out = hetgen.compile(platform, model, out=tmp_path / "out", native_only=True, placement=mode, opt=COUNTED)
    report = simulation_report(out)
    assert report.estimate_us == pytest.approx(explained["total_us"], abs=5e-4)  # one price (the JSON: to 1 ns)
    assert abs(report.with_estimates_us / report.estimate_us - 1) <= TOLERANCE, (
        report.with_estimates_us,
        report.estimate_us,
    )
    for group in report.groups:
        if group.simulated_us is not None:
            assert abs(group.simulated_us / group.estimate_us - 1) <= TOLERANCE, group
    if report.transfer_estimate_us:
        assert abs(report.transfer_simulated_us / report.transfer_estimate_us - 1) <= TOLERANCE
    for device in report.devices:  # each copy over a link, counted as priced
        below = device.path.removesuffix("/host") if device.path.endswith("/host") else device.path
        over = [t for t in placement.transfers if any(link.below == below for link in t.links)]
        assert (device.link_copies, device.link_bytes) == (len(over), sum(t.bytes for t in over)), device.path
    if mode == "greedy":  # the accelerators do most of the work: the comparison means something
        assert report.counted_us > 0.5 * report.with_estimates_us


@pytest.mark.cc
def test_overlapping_branches_are_priced_as_simulated(tmp_path):
    """Two independent branches, one on the npu behind the co-processor and one on the root: both
    the price and the simulation run them concurrently, agree within the tolerance, and take less
    than the parts one after the other."""
    from test_concurrency import two_branches

    pins = {
        "npu_conv0": NPU,
        "npu_relu0": NPU,
        "npu_conv1": NPU,
        "root_conv0": "s",
        "root_relu0": "s",
        "root_conv1": "s",
        "join": "s",
    }
    platform = load_platform_text(SOC)
    model = two_branches()
    placement = place(import_model(model), platform, pins=pins)
    parts = sum(g.cost_us for g in placement.groups) + sum(t.cost_us for t in placement.transfers)
    out = hetgen.compile(platform, model, out=tmp_path / "out", native_only=True, pins=pins, opt=COUNTED)
    report = simulation_report(out)
    assert report.estimate_us == pytest.approx(placement.total_us)
    assert placement.total_us < 0.85 * parts
    assert report.with_estimates_us < 0.85 * report.serial_us
    assert abs(report.with_estimates_us / placement.total_us - 1) <= TOLERANCE, (
        report.with_estimates_us,
        placement.total_us,
    )
