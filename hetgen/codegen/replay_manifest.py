"""The controllers' programs as the manifest records them for `hetgen bench`'s replay
(hetgen/runtime/replay.py reads them): per controller, its devices with how each counts a copy, and
its entries' steps (kernel calls, copies, invocations, waits)."""

from __future__ import annotations

from hetgen.lower.program import Call, DeviceCopyIn, DeviceCopyOut, Invoke, ProgramRole, Wait
from hetgen.platform.device_model import DEFAULT_CLOCK_MHZ


def program_manifest(lowered) -> dict:
    """The controllers' programs as `replay` reads them from the manifest: per controller path, its
    devices (path, kind of timing) and its entries' steps."""
    by_path = {p.target.path_str: p for p in lowered.programs}
    result = {}
    for program in lowered.programs:
        if program.role is ProgramRole.ACCELERATOR:
            continue
        entries = []
        for entry in program.entries:
            steps = []
            for step in entry:
                if isinstance(step, Call):
                    steps.append({"call": list(step.unit.nodes)})
                elif isinstance(step, (DeviceCopyIn, DeviceCopyOut)):
                    steps.append({"copy": step.device, "bytes": step.nbytes})
                elif isinstance(step, Invoke):
                    steps.append({"invoke": step.device, "program": step.program})
                elif isinstance(step, Wait):
                    steps.append({"wait": step.device})
            entries.append(steps)
        devices = []
        for path in program.devices:
            child = by_path.get(path) or by_path[_host_of(lowered, path)]  # a composite: its host's program
            devices.append({"path": child.target.path_str, **_copy_timing(child)})
        result[program.target.path_str] = {"devices": devices, "entries": entries}
    return result


def _host_of(lowered, path: str) -> str:
    for program in lowered.programs:
        if program.role.value == "coprocessor" and program.target.path_str.rsplit("/", 1)[0] == path:
            return program.target.path_str
    return path


def _copy_timing(program) -> dict:
    """How the device counts one copy to or from its controller (hg_sim.c, hg_link_account)."""
    model, link = program.device_model, program.counted_link
    if model is not None:
        return {
            "clock_mhz": model.clock_mhz,
            "dma_setup_cycles": model.dma_setup_cycles,
            "dma_bytes_per_cycle": model.dma_bytes_per_cycle,
            "link_latency_cycles": model.link_latency_cycles,
            "link_bytes_per_cycle": model.link_bytes_per_cycle,
        }
    if link is not None:
        return {
            "clock_mhz": link.clock_mhz,
            "dma_setup_cycles": 0,
            "dma_bytes_per_cycle": 0.0,
            "link_latency_cycles": link.latency_cycles,
            "link_bytes_per_cycle": link.bytes_per_cycle,
        }
    return {"clock_mhz": DEFAULT_CLOCK_MHZ, "dma_setup_cycles": 0, "dma_bytes_per_cycle": 0.0}
