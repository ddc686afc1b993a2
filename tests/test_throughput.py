"""The throughput objective (issue 23, item 6): `options.objective` / `--objective`, the period of a
pipelined schedule (hetgen/spec/frames.py), the search that minimises it
(hetgen/partition/throughput.py) and explain's pipeline. Fast: no C compiler."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from hetgen.cli import main
from hetgen.errors import PlacementError, PlatformError
from hetgen.frontend import import_model
from hetgen.partition import place
from hetgen.partition.explain import explain_json, explain_text
from hetgen.partition.search import objective_request
from hetgen.partition.throughput import placement_pipeline
from hetgen.platform.loader import load_platform, load_platform_text
from hetgen.spec.frames import frames_timeline, resource_busy, stage_submissions, stages
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

ROOT = Path(__file__).resolve().parent.parent
SOC = (ROOT / "platforms" / "soc.yaml").read_text()


# --- objective parsing ---------------------------------------------------------------------------


def test_objective_option_parses_and_defaults_to_latency():
    plain = load_platform_text(SOC, file="soc.yaml")
    assert "objective" not in plain.options  # absent: the canonical tree (and generated files) unchanged
    assert objective_request(plain, None) == "latency"
    piped = load_platform_text(SOC + "options:\n  objective: throughput\n", file="soc.yaml")
    assert objective_request(piped, None) == "throughput"
    assert objective_request(piped, "latency") == "latency"  # the command line overrides the file


def test_objective_refusals():
    with pytest.raises(PlatformError) as caught:
        load_platform_text(SOC + "options:\n  objective: thruput\n", file="soc.yaml")
    text = str(caught.value)
    assert "soc.yaml:" in text and "'objective' of options cannot be 'thruput'" in text
    assert "throughput" in text and "latency" in text
    with pytest.raises(PlacementError, match="unknown objective 'speed'"):
        objective_request(load_platform_text(SOC, file="soc.yaml"), "speed")


def test_cli_refuses_an_unknown_objective(capfd):
    code = main(["explain", "soc", str(ROOT / "examples" / "resnet_tiny.onnx"), "--objective", "fast"])
    assert code == 2
    assert "unknown objective 'fast'" in capfd.readouterr().err


# --- the period of a hand-made two-stage program ---------------------------------------------------


@dataclass(frozen=True)
class Fixed:
    """Each step's time by hand: kernels by their first node's name, copies 5 us, the device's program."""

    kernel: dict
    device_us: float

    def call_us(self, target, call):
        return self.kernel[call.nodes[0]]

    def copy_us(self, controller, device, copy):
        return 5.0

    def invocation_us(self, device, program):
        return self.device_us


def two_stage(device_us: float) -> tuple[ProgramSteps, Fixed]:
    """root: A (10 us), copy in, invoke the npu, wait, copy out, B (20 us): 40 us of root work a frame."""
    entry = (
        KernelCall(("a",)),
        DeviceCopy(0, 64),
        DeviceInvoke(0, 0),
        DeviceWait(0),
        DeviceCopy(0, 64, True),
        KernelCall(("b",)),
    )
    program = ProgramSteps(
        "root", {"root": ControllerSteps((DeviceRef("root/npu"),), (entry,))}, {"root/npu": ((KernelCall(("n",)),),)}
    )
    return program, Fixed({"a": 10.0, "b": 20.0, "n": device_us}, device_us)


@pytest.mark.parametrize("device_us, period", [(50.0, 50.0), (25.0, 40.0)])
def test_two_stage_period(device_us, period):
    program, timing = two_stage(device_us)
    assert [len(s) for s in stages(program.controllers["root"].entries[0])] == [3, 3]
    assert resource_busy(program, timing) == {"root": 40.0, "root/npu": device_us}
    alone = run_timeline(program, timing)
    assert alone == 40.0 + device_us  # one frame: nothing overlaps
    times = frames_timeline(program, timing, 12)
    assert times.depth == 2
    # pipelined: the npu works on frame n while the root finishes frame n-1 and starts frame n+1
    assert times.period_us == pytest.approx(period)
    assert times.period_us < alone
    assert times.finishes == tuple(sorted(times.finishes))


def test_a_wait_waits_for_its_own_frame_only():
    """Frame n+1's submission is queued before frame n's wait: waiting for the whole queue (not the
    frame's own fence) would serialise every frame at A + copy + device + copy + B."""
    program, timing = two_stage(50.0)
    times = frames_timeline(program, timing, 12)
    assert times.period_us < 80.0
    first = frames_timeline(program, timing, 1)
    assert first.finishes == (90.0,)  # the one frame: 10 + 5 + 50 + 5 + 20


# --- the search ----------------------------------------------------------------------------------


def test_a_stage_hands_a_device_to_its_worker_only_where_a_wait_comes_next():
    """Device 0 is waited for next: its invocation goes to its worker at the end of stage 0. Device 1
    gets a copy first (its memory must not be touched while it runs), so its invocations run where
    the frame waits for it, and go to the worker only once a wait is next (the end of stage 1)."""
    steps = [
        ("copy", 0), ("invoke", 0), ("invoke", 1), ("", None),  # stage 0
        ("wait", 0), ("copy", 1), ("invoke", 1), ("copy", 0),  # stage 1
        ("wait", 1), ("", None),  # stage 2
    ]  # fmt: skip
    assert stage_submissions(steps) == [(0,), (1,), ()]
    assert stage_submissions([("", None)]) == [()]


@pytest.mark.parametrize("platform", ["soc", "dual", "slowlink"])
def test_throughput_period_at_most_latency_placements(platform):
    plat = load_platform(ROOT / "platforms" / f"{platform}.yaml")
    graph = import_model(str(ROOT / "examples" / "resnet_tiny.onnx"))
    latency = place(graph, plat)
    throughput = place(graph, plat, objective="throughput")
    assert latency.objective == "latency" and latency.pipeline is None
    assert throughput.objective == "throughput"
    ours = throughput.pipeline
    theirs = placement_pipeline(latency, graph, plat)
    assert ours.period_us <= theirs.period_us + 1e-6
    assert ours.latency_period_us == pytest.approx(theirs.period_us, rel=1e-6)
    # the period is the busiest resource's work, and the generated order reaches it
    assert ours.period_us == pytest.approx(max(ours.busy_us.values()))
    assert ours.frames_period_us == pytest.approx(ours.period_us, rel=1e-6)
    assert ours.period_us <= throughput.total_us + 1e-6
    if ours.bound_us:  # both at the search's prices
        assert ours.bound_us <= ours.searched_us + 1e-6
    # every group is in one resource's stage
    staged = [g for names in ours.stages.values() for g in names]
    assert sorted(staged) == sorted(g.name for g in throughput.groups)


def test_pipelining_beats_one_frame_at_a_time_on_soc():
    """resnet_tiny on soc: the co-processor's npu work and the root's own overlap across frames."""
    plat = load_platform(ROOT / "platforms" / "soc.yaml")
    graph = import_model(str(ROOT / "examples" / "resnet_tiny.onnx"))
    placement = place(graph, plat, objective="throughput")
    pipeline = placement.pipeline
    assert pipeline.depth >= 2
    assert pipeline.stages["soc/vdevice0/host"]  # the npu's groups are the co-processor's stage
    targets = {g.name: g.target for g in placement.groups}
    assert all(targets[name] == "soc" for name in pipeline.stages["soc"])
    assert all(targets[name].startswith("soc/vdevice0/") for name in pipeline.stages["soc/vdevice0/host"])
    assert pipeline.period_us < 0.8 * pipeline.latency_us
    text = explain_text(placement, graph)
    assert "pipeline (objective throughput): period" in text
    assert f"soc/vdevice0/host: {pipeline.busy_us['soc/vdevice0/host']:.1f} us a frame" in text
    document = explain_json(placement, graph)
    assert document["pipeline"]["depth"] == pipeline.depth
    assert {r["path"] for r in document["pipeline"]["resources"]} == {"soc", "soc/vdevice0/host"}
    jsonschema = pytest.importorskip("jsonschema")
    from hetgen.partition.explain_schema import EXPLAIN_SCHEMA

    assert not list(jsonschema.Draft202012Validator(EXPLAIN_SCHEMA).iter_errors(document))


def test_three_npu_cores_take_different_stages():
    """rk3588 (the board catalogue: three npu cores): the latency placement keeps resnet8 on one
    core; for throughput the stages spread over the cores, each core's work a frame a third of it."""
    plat = load_platform(ROOT / "platforms" / "boards" / "rk3588.yaml")
    graph = import_model(str(ROOT / "examples" / "resnet8.onnx"))
    pipeline = place(graph, plat, objective="throughput").pipeline
    cores = [path for path, groups in pipeline.stages.items() if "npu" in path and groups]
    assert len(cores) == 3
    assert pipeline.period_us < pipeline.latency_period_us / 2
    assert pipeline.frames_period_us == pytest.approx(pipeline.period_us, rel=0.02)
