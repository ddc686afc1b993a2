"""The energy objective (hetgen/partition/energy.py): `options.objective` and `--objective`, the
kinds' and links' energy figures, a hand-computed energy, and the two objectives against each other."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.cli import parser
from hetgen.errors import PlacementError, PlatformError
from hetgen.frontend import import_model
from hetgen.partition import place
from hetgen.partition.explain import explain_json, explain_text
from hetgen.platform import load_platform, load_platform_text
from hetgen.runtime.explain_html import explain_html

ROOT = Path(__file__).resolve().parent.parent

ONE_CORE = """\
name: one
kinds:
  core:
    refines: native
    energy: {pj_per_mac: 1, pj_per_byte: {main: 0.5}, static_mw: 1000}
target: {kind: core, runtime: vm}
options: {objective: OBJECTIVE}
"""


def matmul_graph():
    """x[1, 64] @ w[64, 32]: 2,048 MACs; 4 * (64 + 2,048 + 32) = 8,576 bytes of memory traffic."""
    w = numpy_helper.from_array(np.ones((64, 32), np.float32), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])
    model = helper.make_model(
        helper.make_graph([node], "tiny", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)]
    )
    return import_model(model)


def test_energy_of_a_tiny_graph_by_hand():
    platform = load_platform_text(ONE_CORE.replace("OBJECTIVE", "energy"))
    placement = place(matmul_graph(), platform)
    assert placement.objective == "energy"
    # native's figures: launch 0.05 us + max(4,096 flops / (30 GFLOP/s x 0.5), 8,576 B / 20 GB/s) us
    makespan = 0.05 + max(4096 / (30e3 * 0.5), 8576 / 20e3)
    assert placement.total_us == pytest.approx(makespan)
    # 2,048 MACs x 1 pJ + 8,576 B x 0.5 pJ + 1,000 mW x the makespan (mW x us = nJ)
    expected_nj = 2048 * 1 / 1000 + 8576 * 0.5 / 1000 + 1000 * makespan
    assert placement.energy.total_nj == pytest.approx(expected_nj)
    (device,) = placement.energy.devices
    assert (device.macs, device.main_bytes, device.local_bytes) == (2048, 8576, 0)
    document = explain_json(placement, matmul_graph())
    assert document["objective"] == "energy"
    assert document["energy"]["total_uj"] == pytest.approx(expected_nj / 1000, abs=1e-4)
    assert "objective: energy; energy per inference" in explain_text(placement, matmul_graph())
    page = explain_html(placement, matmul_graph(), platform)
    assert f"<li>objective: energy; energy per inference {expected_nj / 1000:.3f} uJ" in page


def test_unknown_objective_is_refused_with_its_line():
    with pytest.raises(PlatformError) as error:
        load_platform_text(ONE_CORE.replace("OBJECTIVE", "speed"), file="one.yaml")
    (diagnostic,) = error.value.diagnostics
    assert (diagnostic.file, diagnostic.line) == ("one.yaml", 7)
    assert "'objective' of options cannot be 'speed'" in diagnostic.message
    assert "latency, throughput, energy" in diagnostic.message


def test_throughput_is_accepted_beside_energy():
    """The three objectives share one setting: throughput (hetgen/partition/throughput.py) is
    accepted by the file and the command line alike."""
    platform = load_platform_text(ONE_CORE.replace("OBJECTIVE", "throughput"))
    assert platform.options["objective"] == "throughput"
    assert parser().parse_args(["explain", "soc", "m.onnx", "--objective", "throughput"]).objective == "throughput"


def test_command_line_objective_wins():
    platform = load_platform_text(ONE_CORE.replace("OBJECTIVE", "energy"))
    assert place(matmul_graph(), platform, objective="latency").objective == "latency"
    args = parser().parse_args(["generate", "soc", "m.onnx", "--objective", "energy"])
    assert args.objective == "energy"
    assert parser().parse_args(["explain", "soc", "m.onnx"]).objective is None


def test_missing_energy_figures_refuse_the_energy_objective():
    text = (ROOT / "platforms/soc.yaml").read_text()
    without = text.replace(", pj_per_byte: 40}", "}")
    assert without != text
    platform = load_platform_text(without, file=str(ROOT / "platforms/soc.yaml"))
    with pytest.raises(PlacementError, match="the link of soc/vdevice0 has no pj_per_byte"):
        place(matmul_graph(), platform, objective="energy")
    # a kind without figures is named; latency still places, and explain says there are no figures
    bare = ONE_CORE.replace("    energy: {pj_per_mac: 1, pj_per_byte: {main: 0.5}, static_mw: 1000}\n", "")
    bare = bare.replace(
        "refines: native", "role: controller\n    figures: {peak_gflops: 1, bandwidth_gbps: 1, launch_us: 1}"
    )
    platform = load_platform_text(bare.replace("OBJECTIVE", "latency"))
    with pytest.raises(PlacementError, match=r"kind 'core' \(target one\) declares no energy pj_per_mac, static_mw"):
        place(matmul_graph(), platform, objective="energy")
    placement = place(matmul_graph(), platform)
    assert placement.energy is None and "energy" not in explain_text(placement, matmul_graph())
    assert explain_json(placement, matmul_graph())["energy"] is None


def test_energy_figures_are_validated():
    bad = ONE_CORE.replace("pj_per_mac: 1,", "pj_per_mac: -1,").replace("{main: 0.5}", "{dram: 0.5}")
    with pytest.raises(PlatformError) as error:
        load_platform_text(bad.replace("OBJECTIVE", "energy"), file="one.yaml")
    messages = [d.message for d in error.value.diagnostics]
    assert any(
        "'pj_per_mac' of 'energy' of kind 'core' (pJ per multiply-accumulate) must be at least 0" in m for m in messages
    )
    assert any("unknown key 'dram'" in m and "accepted: local, main" in m for m in messages)


@pytest.mark.parametrize("name", ["corstone-300", "ethos-u65"])
def test_each_objective_wins_its_own_measure(name):
    """Where the two placements differ: the energy placement uses less energy than the latency
    one, and the latency placement is faster than the energy one (both priced as explain prices
    them; benchmarks/bench_objectives.py: 8.6 % less energy for 10.9 % more time on corstone-300,
    1.9 % for 10.9 % on ethos-u65: the matmuls the npu would run cost more energy in copies)."""
    platform = load_platform(ROOT / f"platforms/{name}.yaml")
    graph = import_model(str(ROOT / "examples/transformer_tiny.onnx"))
    latency = place(graph, platform, objective="latency")
    energy = place(graph, platform, objective="energy")
    assert energy.energy.total_nj < latency.energy.total_nj * 0.99
    assert latency.total_us < energy.total_us * 0.95
    assert {g.target for g in energy.groups} != {g.target for g in latency.groups} or any(
        a.target != b.target for a, b in zip(energy.groups, latency.groups)
    )
