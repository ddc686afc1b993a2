"""The shortcut that keeps placement fast must not change a placement: the schedule the price is
timed on (`timing_only`) has exactly the steps lowering's schedule has."""

from __future__ import annotations

import random

import pytest

from hetgen.partition import place
from hetgen.partition.timeline import placement_schedule
from hetgen.platform.model import Link
from hetgen.spec.schedule import SCall, SLoadWeight
from partition_fixtures import flat, residual_net, soc, wide_random_dag


def _steps(entry) -> list:
    """A schedule entry as timing sees it: weight loads are inside the device's time."""
    return [
        SCall(step.unit, ()) if isinstance(step, SCall) else step for step in entry if not isinstance(step, SLoadWeight)
    ]


@pytest.mark.parametrize(
    "platform",
    [soc(), soc(npu_memory=None), flat(npu_link=Link(8.0, 10.0), npu_memory=256 * 1024)],
    ids=["soc-isolated-npu", "soc", "flat-isolated-npu"],
)
@pytest.mark.parametrize("mode", ["cost", "greedy"])
def test_timing_only_schedule_has_every_step_of_lowerings(platform, mode):
    for graph in (residual_net(12), wide_random_dag(random.Random(5), 120, 8)):
        groups = place(graph, platform, mode=mode).groups
        full, kept = placement_schedule(groups, graph, platform)
        timing, kept_too = placement_schedule(groups, graph, platform, timing_only=True)
        assert kept == kept_too
        assert timing.devices == full.devices
        assert timing.entries.keys() == full.entries.keys()
        for target, entries in full.entries.items():
            assert [_steps(entry) for entry in timing.entries[target]] == [_steps(entry) for entry in entries]
        assert len(full.entries) > 1 and full.events and not timing.events  # devices ran; only lowering plans memory
