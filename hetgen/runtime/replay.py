"""The generated program's time at what the devices counted: the manifest's steps
(hetgen/codegen/replay_manifest.py) run on the placement's concurrency model (hetgen/partition/timeline.py:
`makespan`), each step timed by what the simulator or the link counted for it."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from hetgen.partition.timeline import Await, Submit, Timed, Work, makespan


def copy_cycles(timing: Mapping, nbytes: int) -> int:
    """The cycles a device counts for one copy of `nbytes` (hg_sim_dma_cycles + hg_link_account)."""
    cycles = 0
    rate = float(timing.get("dma_bytes_per_cycle") or 0.0)
    if rate > 0.0:
        cycles += int(timing.get("dma_setup_cycles", 0)) + (math.ceil(nbytes / rate) if nbytes else 0)
    link_rate = float(timing.get("link_bytes_per_cycle") or 0.0)
    if link_rate > 0.0:
        cycles += int(float(timing.get("link_latency_cycles", 0.0)) + nbytes / link_rate + 0.5)
    return cycles


def replay(
    programs: Mapping[str, Mapping],
    root: str,
    call_us: Callable[[str, Sequence[str]], float],
    invocation_us: Callable[[str, int], float],
) -> float:
    """The generated program's time: the root's entry 0 timed by `makespan`, each controller's
    kernel call at `call_us(controller, nodes)`, each copy at what its device counts for it, each
    accelerator's sub-program at `invocation_us(device, program)` (what the simulator counted), each
    co-processor's sub-program replayed the same way."""

    def entry_us(path: str, index: int) -> float:
        program = programs[path]
        devices = program["devices"]
        steps: list[Timed] = []
        for step in program["entries"][index]:
            if "call" in step:
                steps.append(Work(call_us(path, step["call"])))
            elif "copy" in step:
                timing = devices[step["copy"]]
                steps.append(Work(copy_cycles(timing, step["bytes"]) / float(timing["clock_mhz"])))
            elif "invoke" in step:
                device = devices[step["invoke"]]["path"]
                if device in programs:
                    steps.append(Submit(device, entry_us(device, step["program"])))
                else:
                    steps.append(Submit(device, invocation_us(device, step["program"])))
            elif "wait" in step:
                steps.append(Await(devices[step["wait"]]["path"]))
        return makespan(steps)

    return entry_us(root, 0)
