"""One typed step list, one interpreter (issue 19 item 2): the placement's price and bench's replay
run the same steps through `run_timeline` (hetgen/spec/timeline.py) and differ only in the timing
they pass. Here both get the cost model's estimates: the price of a placement (the scheduler's steps)
is the replay of the program lowering emitted for it (lowering's steps, read back from the manifest's
encoding), step list for step list and makespan for makespan. No compiler runs: fast."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnx
import pytest

from hetgen import lower
from hetgen.frontend import import_model
from hetgen.partition.cost import Topology
from hetgen.partition.search import place
from hetgen.partition.timeline import estimated_timing, placement_makespan, placement_program
from hetgen.platform.loader import load_platform, load_platform_text
from hetgen.spec.timeline import DeviceCopy, KernelCall, ProgramSteps, run_timeline
from test_concurrency import PINS as BRANCH_PINS
from test_concurrency import PLATFORM as BRANCH_PLATFORM
from test_concurrency import two_branches
from test_one_truth import FAN_OUT_PINS, SOC, fan_out

REPO = Path(__file__).resolve().parent.parent


def _resnet_tiny():
    return onnx.load(REPO / "examples" / "resnet_tiny.onnx")


CASES = {
    "soc-resnet_tiny": (lambda: load_platform(str(REPO / "platforms" / "soc.yaml")), _resnet_tiny, None, "cost"),
    "soc-resnet_tiny-greedy": (
        lambda: load_platform(str(REPO / "platforms" / "soc.yaml")),
        _resnet_tiny,
        None,
        "greedy",
    ),
    "dual-resnet_tiny": (lambda: load_platform(str(REPO / "platforms" / "dual.yaml")), _resnet_tiny, None, "cost"),
    "dual-resnet_tiny-greedy": (
        lambda: load_platform(str(REPO / "platforms" / "dual.yaml")),
        _resnet_tiny,
        None,
        "greedy",
    ),
    "coprocessor-fan_out": (lambda: load_platform_text(SOC), fan_out, FAN_OUT_PINS, "cost"),
    "npu-two_branches": (
        lambda: load_platform_text(BRANCH_PLATFORM.format(runtime="vm")),
        two_branches,
        BRANCH_PINS,
        "cost",
    ),
}


def _without_calls(program: ProgramSteps) -> dict:
    """Each controller's devices and the steps other than its kernel calls (a group lowering cuts
    into several kernels is one call in the scheduler's steps, several in lowering's)."""
    return {
        path: (
            [d.path for d in steps.devices],
            [[s for s in entry if type(s) is not KernelCall] for entry in steps.entries],
        )
        for path, steps in program.controllers.items()
    }


@pytest.mark.parametrize("case", list(CASES))
def test_the_price_is_the_replay_of_the_program_at_the_estimates(case):
    make_platform, make_model, pins, mode = CASES[case]
    platform, graph = make_platform(), import_model(make_model())
    placement = place(graph, platform, mode=mode, **({"pins": pins} if pins else {}))
    transfer_us = Topology(platform).transfer_us

    # the price: the scheduler's steps, timed at the estimates
    # (a claimed cascade's groups run as one invocation: hetgen/partition/cascades.py)
    cascades = placement.cascades
    priced, groups = placement_program(placement.groups, graph, platform, cascades)
    price = run_timeline(priced, estimated_timing(priced, groups, transfer_us))
    assert price == placement_makespan(placement.groups, graph, platform, transfer_us, cascades) == placement.total_us

    # the replay: lowering's steps, through the manifest's encoding, timed at the same estimates
    emitted = lower.lower(graph, platform, placement).timed_program()
    recorded = ProgramSteps.from_json(json.loads(json.dumps(emitted.to_json())))
    assert recorded.to_json() == emitted.to_json()
    assert recorded.controllers.keys() == emitted.controllers.keys()
    assert all(recorded.controllers[p].entries == emitted.controllers[p].entries for p in emitted.controllers)
    replayed = dataclasses.replace(recorded, accelerators=emitted.accelerators)  # not recorded: bench counts them
    assert _without_calls(replayed) == _without_calls(priced)  # the same copies, invocations and waits
    assert any(type(s) is DeviceCopy and s.out for c in replayed.controllers.values() for e in c.entries for s in e)
    assert run_timeline(replayed, estimated_timing(replayed, groups, transfer_us)) == pytest.approx(price, rel=1e-9)
