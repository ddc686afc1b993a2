"""The program's timed steps and the one interpreter that times them: the placement's price and
`hetgen bench`'s replay run the same steps through `run_timeline`, and differ only in the `Timing`
they pass (the cost model's estimates; what the simulator and the links counted).

A controller submits a device's sub-program and goes on with its own work; it waits only before the
first step that reads the device's results, before its next submission to that device, or at its
end (hetgen/spec/schedule.py writes the program that way). Timed by these rules:

- the controller has a clock: its own work (a kernel, a copy it makes) moves it by that work's time;
- each device it drives has a clock: a submission at controller time t starts at
  max(t, the device's clock) (its inputs were copied in before t) and moves the device's clock to
  start + the sub-program's time (its invocation overhead included: the launch);
- a wait moves the controller's clock to the device's clock;
- the program's time is its controller's final clock (a co-processor's program, timed the same way,
  is the time of the submission that invoked it).

The steps (`KernelCall`, `DeviceCopy`, `DeviceInvoke`, `DeviceWait`) come from the scheduler for the
placement's price (hetgen/spec/schedule.py: `timed_program`), from lowering for the generated
program (hetgen/lower/program.py: `Lowered.timed_program`), and from the manifest for bench
(`ProgramSteps.from_json`; codegen writes lowering's with `to_json`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from hetgen.platform.device_model import DEFAULT_CLOCK_MHZ

# --- the steps -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelCall:
    """A kernel the target runs itself, named by the IR nodes it computes."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class DeviceCopy:
    """The controller copies `nbytes` to its device `device` (an index into its devices), or from it (`out`)."""

    device: int
    nbytes: int
    out: bool = False


@dataclass(frozen=True)
class DeviceInvoke:
    """The controller submits sub-program `program` to its device `device` (asynchronously: see DeviceWait)."""

    device: int
    program: int


@dataclass(frozen=True)
class DeviceWait:
    device: int


TimedStep = KernelCall | DeviceCopy | DeviceInvoke | DeviceWait


@dataclass(frozen=True)
class CopyTiming:
    """How a device counts one copy to or from its controller (hg_sim.c's hg_sim_dma_cycles and
    hg_link_account): cycles at `clock_mhz`. No link: `link_bytes_per_cycle` None (not recorded)."""

    clock_mhz: float = DEFAULT_CLOCK_MHZ
    dma_setup_cycles: int = 0
    dma_bytes_per_cycle: float = 0.0
    link_latency_cycles: float | None = None
    link_bytes_per_cycle: float | None = None

    def cycles(self, nbytes: int) -> int:
        """The cycles the device counts for one copy of `nbytes`: its DMA, then the link."""
        cycles = 0
        rate = float(self.dma_bytes_per_cycle or 0.0)
        if rate > 0.0:
            cycles += int(self.dma_setup_cycles) + (math.ceil(nbytes / rate) if nbytes else 0)
        link_rate = float(self.link_bytes_per_cycle or 0.0)
        if link_rate > 0.0:
            cycles += int(float(self.link_latency_cycles or 0.0) + nbytes / link_rate + 0.5)
        return cycles

    def us(self, nbytes: int) -> float:
        return self.cycles(nbytes) / float(self.clock_mhz)

    def to_json(self) -> dict:
        data = {
            "clock_mhz": self.clock_mhz,
            "dma_setup_cycles": self.dma_setup_cycles,
            "dma_bytes_per_cycle": self.dma_bytes_per_cycle,
        }
        if self.link_bytes_per_cycle is not None:
            data["link_latency_cycles"] = self.link_latency_cycles
            data["link_bytes_per_cycle"] = self.link_bytes_per_cycle
        return data

    @classmethod
    def from_json(cls, data: Mapping) -> CopyTiming:
        return cls(
            data["clock_mhz"],
            data.get("dma_setup_cycles", 0),
            data.get("dma_bytes_per_cycle", 0.0),
            data.get("link_latency_cycles"),
            data.get("link_bytes_per_cycle"),
        )


@dataclass(frozen=True)
class DeviceRef:
    """A device a controller drives: the path of the program it runs (a co-processor's host for a
    composite), and how it counts a copy (None where nothing counts it: the placement's steps)."""

    path: str
    copies: CopyTiming | None = None


@dataclass(frozen=True)
class ControllerSteps:
    """One controller's program: the devices it drives (indexed by the steps) and its entries (the
    root's entry 0 is the model's run; a co-processor's entries are the sub-programs invoked on it)."""

    devices: tuple[DeviceRef, ...]
    entries: tuple[tuple[TimedStep, ...], ...]


@dataclass(frozen=True)
class ProgramSteps:
    """The whole program as timing sees it: the root, every controller's steps, and each
    accelerator's sub-programs as the kernel calls they run (what an estimate of their time reads;
    the manifest does not record them: bench takes an accelerator's time from its counters)."""

    root: str
    controllers: Mapping[str, ControllerSteps]
    accelerators: Mapping[str, tuple[tuple[KernelCall, ...], ...]] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The manifest's `program` (hetgen.json)."""
        return {
            "root": self.root,
            "controllers": {
                path: {
                    "devices": [
                        {"path": d.path, **(d.copies.to_json() if d.copies is not None else {})} for d in c.devices
                    ],
                    "entries": [[step_to_json(step) for step in entry] for entry in c.entries],
                }
                for path, c in self.controllers.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping) -> ProgramSteps:
        controllers = {}
        for path, item in data["controllers"].items():
            devices = tuple(
                DeviceRef(d["path"], CopyTiming.from_json(d) if "clock_mhz" in d else None) for d in item["devices"]
            )
            entries = tuple(tuple(step_from_json(step) for step in entry) for entry in item["entries"])
            controllers[path] = ControllerSteps(devices, entries)
        return cls(data["root"], controllers)


def step_to_json(step: TimedStep) -> dict:
    if isinstance(step, KernelCall):
        return {"call": list(step.nodes)}
    if isinstance(step, DeviceCopy):
        return {"copy": step.device, "bytes": step.nbytes, **({"out": True} if step.out else {})}
    if isinstance(step, DeviceInvoke):
        return {"invoke": step.device, "program": step.program}
    if isinstance(step, DeviceWait):
        return {"wait": step.device}
    raise TypeError(f"not a timed step: {step!r}")


def step_from_json(data: Mapping) -> TimedStep:
    if "call" in data:
        return KernelCall(tuple(data["call"]))
    if "copy" in data:
        return DeviceCopy(data["copy"], data["bytes"], bool(data.get("out", False)))
    if "invoke" in data:
        return DeviceInvoke(data["invoke"], data["program"])
    if "wait" in data:
        return DeviceWait(data["wait"])
    raise ValueError(f"not a timed step: {data!r}")


# --- the timing sources --------------------------------------------------------------------------


class Timing(Protocol):
    """What each step takes: the interpreter's only input besides the steps."""

    def call_us(self, target: str, call: KernelCall) -> float:
        """A kernel call on `target` (a controller's, or one of an accelerator's)."""
        ...

    def copy_us(self, controller: str, device: DeviceRef, copy: DeviceCopy) -> float:
        """A copy between `controller` and one of its devices (to it, or `copy.out` from it)."""
        ...

    def invocation_us(self, device: str, program: int) -> float:
        """An accelerator's sub-program `program`, its invocation overhead included."""
        ...


def call_shares(program: ProgramSteps, groups: Iterable[tuple[str, tuple[str, ...], float]]) -> dict:
    """Each kernel call's part of the estimates of the groups `(name, nodes, us)` whose nodes it
    runs, keyed `(target, call nodes)`: a group lowered as several calls on a target gives each a
    share (lowering never fuses across groups, so a call normally has one group; one that had
    several would take each of their shares)."""
    group_of: dict[str, tuple[str, float]] = {}
    for name, nodes, us in groups:
        for node in nodes:
            group_of[node] = (name, us)
    calls: dict[tuple[str, str], int] = {}  # (target, group) -> the calls that run its nodes
    runs: dict[tuple[str, tuple[str, ...]], dict[str, float]] = {}  # (target, call nodes) -> its groups
    every = [(path, entry) for path, c in program.controllers.items() for entry in c.entries]
    every += [(path, entry) for path, entries in program.accelerators.items() for entry in entries]
    for path, entry in every:
        for step in entry:
            if type(step) is not KernelCall:
                continue
            seen: dict[str, float] = {}
            for node in step.nodes:
                group = group_of.get(node)
                if group is not None:
                    seen.setdefault(*group)
            for name in seen:
                calls[path, name] = calls.get((path, name), 0) + 1
            runs.setdefault((path, step.nodes), seen)
    return {key: sum(us / calls[key[0], name] for name, us in seen.items()) for key, seen in runs.items()}


@dataclass(frozen=True)
class Estimated:
    """The cost model's timing: each call at its share of its group's estimate (`call_shares`),
    each copy at `transfer_us(from, to, bytes)`, an accelerator's sub-program at its calls' sum."""

    shares: Mapping[tuple[str, tuple[str, ...]], float]
    transfer_us: Callable[[str, str, int], float]
    accelerators: Mapping[str, tuple[tuple[KernelCall, ...], ...]]

    def call_us(self, target: str, call: KernelCall) -> float:
        return self.shares.get((target, call.nodes), 0.0)

    def copy_us(self, controller: str, device: DeviceRef, copy: DeviceCopy) -> float:
        if copy.out:
            return self.transfer_us(device.path, controller, copy.nbytes)
        return self.transfer_us(controller, device.path, copy.nbytes)

    def invocation_us(self, device: str, program: int) -> float:
        shares = self.shares
        return sum(shares.get((device, call.nodes), 0.0) for call in self.accelerators[device][program])


# --- the interpreter -----------------------------------------------------------------------------


class Clocks:
    """A controller's clock and the clocks of the devices it drives, moved by the rules above."""

    def __init__(self) -> None:
        self.now = 0.0
        self.free: dict[str, float] = {}

    def work(self, us: float) -> None:
        self.now += us

    def submit(self, device: str, us: float) -> None:
        self.free[device] = max(self.now, self.free.get(device, 0.0)) + us

    def wait(self, device: str) -> None:
        self.now = max(self.now, self.free.get(device, 0.0))

    def end(self) -> float:
        return max([self.now, *self.free.values()])


Trace = Callable[[str, float, float, str, TimedStep, int], None]


def run_timeline(program: ProgramSteps, timing: Timing, trace: Trace | None = None) -> float:
    """The program's time by the rules above: the root's entry 0, each step at what `timing` says
    (a co-processor's sub-program interpreted the same way, recursively). `trace`, if given, is
    told every timed step as `(controller, start_us, us, device path or "", step, entry)` on the
    program's clock (the explain page draws its timelines from it; it changes no time)."""
    controllers = program.controllers

    def entry_us(path: str, index: int, offset: float) -> float:
        steps = controllers[path]
        devices = steps.devices
        clocks = Clocks()
        for step in steps.entries[index]:
            kind = type(step)
            if kind is KernelCall:
                us = timing.call_us(path, step)
                if trace is not None:
                    trace(path, offset + clocks.now, us, "", step, index)
                clocks.work(us)
            elif kind is DeviceCopy:
                us = timing.copy_us(path, devices[step.device], step)
                if trace is not None:
                    trace(path, offset + clocks.now, us, devices[step.device].path, step, index)
                clocks.work(us)
            elif kind is DeviceInvoke:
                device = devices[step.device].path
                start = max(clocks.now, clocks.free.get(device, 0.0))
                if device in controllers:
                    us = entry_us(device, step.program, offset + start)
                else:
                    us = timing.invocation_us(device, step.program)
                if trace is not None:
                    trace(path, offset + start, us, device, step, index)
                clocks.submit(device, us)
            else:
                clocks.wait(devices[step.device].path)
        return clocks.end()

    return entry_us(program.root, 0, 0.0)
