"""Split a placed, ordered list of kernel units into per-controller step lists.

Each controller sees its units as either local or belonging to one of its child devices.
Consecutive units of one child form a *segment*: one sub-program of that child, preceded by
copies of the tensors it needs that are not already there and followed by copies of the tensors
it produced that something outside the child reads. Composite children (a co-processor with its
own accelerators) are split again from their host's point of view, recursively.

Submissions are asynchronous: a controller invokes a device's sub-program and waits for it (and
copies its results out) only before the first step that reads one of them, before its next
submission to the same device, or at the end of its own program. Work that does not depend on the
device runs in between (`timed_program` gives the steps hetgen/spec/timeline.py times).

Steps here are symbolic (tensors named, not yet placed in memory); every write and read of a tensor
on a target is recorded with its time (the unit index) so memory can be planned per target. Every
table is keyed by the `Target` itself (hashed by its path), not by a spelling of its path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hetgen.platform.model import Role, Target
from hetgen.spec.timeline import (
    ControllerSteps,
    DeviceCopy,
    DeviceInvoke,
    DeviceRef,
    DeviceWait,
    KernelCall,
    ProgramSteps,
)


@dataclass(frozen=True)
class Sym:
    """A tensor as held by one target's memory."""

    target: Target
    tensor: str


@dataclass(frozen=True)
class SCall:
    unit: int
    args: tuple[Sym | None, ...]


@dataclass(frozen=True)
class SLoadWeight:  # accelerator: DMA one constant from its weight store into local memory
    target: Target
    tensor: str


@dataclass(frozen=True)
class SCopyIn:
    device: int
    src: Sym
    dst: Sym


@dataclass(frozen=True)
class SCopyOut:
    device: int
    src: Sym
    dst: Sym


@dataclass(frozen=True)
class SInvoke:
    device: int
    program: int


@dataclass(frozen=True)
class SWait:
    device: int


@dataclass
class Schedule:
    """Mutable while being built; read by lowering once complete."""

    entries: dict[Target, list[list]] = field(default_factory=dict)  # target -> entries of steps
    devices: dict[Target, list[Target]] = field(default_factory=dict)  # controller -> the devices it drives
    events: dict[Target, dict[str, list[int]]] = field(default_factory=dict)  # target -> tensor -> times
    present: dict[Target, set[str]] = field(default_factory=dict)  # target -> tensors held now

    def touch(self, target: Target, tensor: str, time: int) -> None:
        self.events.setdefault(target, {}).setdefault(tensor, []).append(time)
        self.present.setdefault(target, set()).add(tensor)


@dataclass(frozen=True)
class _Pending:
    """A submission a controller has not waited for: the device, and its results for readers outside it."""

    device: Target
    leaving: tuple[str, ...]


@dataclass(frozen=True)
class UnitInfo:
    target: Target
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def subtree(target: Target) -> set[Target]:
    return set(target.walk())


def child_devices(controller: Target, platform_root: Target) -> tuple[Target, ...]:
    """The devices a controller drives: the root's devices, or its composite's devices."""
    if controller.path == platform_root.path:
        return platform_root.devices
    for target in platform_root.walk():
        if target.host is not None and target.host.path == controller.path:
            return target.devices
    return ()


class Scheduler:
    def __init__(
        self,
        units: list[UnitInfo],
        root: Target,
        constants: set[str],
        graph_outputs: set[str],
        graph_inputs: set[str],
        isolated: frozenset[Target] = frozenset(),
        *,
        timing_only: bool = False,
        joined: frozenset[int] = frozenset(),
    ):
        """`isolated`: accelerators that run each unit as its own invocation (hetgen/spec/invocation.py),
        loading only that unit's weights. Tensors stay in the device's memory between invocations as
        anywhere else: copied in once, copied out only for a reader outside the device.

        `timing_only`: the same steps, with only what timing them needs (hetgen/partition/timeline.py
        prices a placement so): no read and write times for the memory plan (`Schedule.events`
        stays empty), no call arguments (`SCall.args` is empty), no weight loads.

        `joined`: units that run in the same invocation of an isolated accelerator as the unit
        before them (a cascade's later layers: hetgen/spec/cascade_program.py runs them stripe by
        stripe, so the tensors between them never leave the device's SRAM)."""
        self.isolated = isolated
        self.joined = joined
        self.timing_only = timing_only
        self.units = units
        self.root = root
        self.constants = constants
        self.graph_outputs = graph_outputs
        self.graph_inputs = graph_inputs
        self.schedule = Schedule()
        self._touch = self._hold if timing_only else self.schedule.touch
        self._slots: dict[tuple[Target, Target], int] = {}  # (a unit's target, controller) -> its slot
        self._subtrees: dict[Target, set[Target]] = {}  # a device -> every target of its subtree
        self.readers: dict[str, list[int]] = {}
        for index, unit in enumerate(units):
            for name in unit.inputs:
                if name:
                    self.readers.setdefault(name, []).append(index)

    def run(self) -> Schedule:
        for name in self.graph_inputs:
            self.schedule.present.setdefault(self.root, set()).add(name)
        entry = self.controller_entry(self.root, list(range(len(self.units))))
        self.schedule.entries.setdefault(self.root, []).insert(0, entry)
        return self.schedule

    def _subtree(self, device: Target) -> set[Target]:
        targets = self._subtrees.get(device)
        if targets is None:
            targets = self._subtrees[device] = subtree(device)
        return targets

    def _hold(self, target: Target, tensor: str, time: int) -> None:
        """`Schedule.touch` without the time: which tensors each target holds is all timing needs."""
        present = self.schedule.present.get(target)
        if present is None:
            present = self.schedule.present[target] = set()
        present.add(tensor)

    def _slot(self, unit_target: Target, controller: Target, devices: tuple[Target, ...]) -> int:
        slot = self._slots.get((unit_target, controller))
        if slot is None:
            slot = self._slots[unit_target, controller] = self._find_slot(unit_target, controller, devices)
        return slot

    def _find_slot(self, unit_target: Target, controller: Target, devices: tuple[Target, ...]) -> int:
        if unit_target == controller:
            return -1
        for index, device in enumerate(devices):
            if unit_target in self._subtree(device):
                return index
        raise ValueError(f"{unit_target.path_str} is not reachable from {controller.path_str}")

    def controller_entry(self, controller: Target, unit_indices: list[int]) -> list:
        """The steps of `controller` running `unit_indices` (in order)."""
        devices = child_devices(controller, self.root)
        used = self.schedule.devices.setdefault(controller, [])  # only devices that get work, in first-use order
        steps: list = []
        segments: list[tuple[int, list[int]]] = []
        for index in unit_indices:
            slot = self._slot(self.units[index].target, controller, devices)
            # Only the controller that drives an isolated accelerator splits its work: from further
            # up, the co-processor in front of it is one device that keeps its intermediates.
            isolated = slot >= 0 and devices[slot] in self.isolated and index not in self.joined
            if segments and segments[-1][0] == slot and not isolated:
                segments[-1][1].append(index)
            else:
                segments.append((slot, [index]))
        pending: dict[int, _Pending] = {}  # device index -> its submission not waited for yet
        for slot, members in segments:
            if slot < 0:
                for index in members:
                    self._wait_for_readers(controller, pending, self.units[index].inputs, index, steps)
                    steps.append(self.local_call(controller, index))
                continue
            device = devices[slot]
            if device not in used:
                used.append(device)
            number = used.index(device)
            produced = {name for index in members for name in self.units[index].outputs if name}
            reads = [name for index in members for name in self.units[index].inputs if name and name not in produced]
            if number in pending:  # the device's queue takes one submission at a time
                steps += self._wait(controller, number, pending.pop(number), members[0])
            self._wait_for_readers(controller, pending, reads, members[0], steps)
            segment, leaving = self.device_segment(controller, number, device, members)
            steps += segment
            pending[number] = _Pending(device, leaving)
        last = unit_indices[-1] if unit_indices else 0
        for number in list(pending):
            steps += self._wait(controller, number, pending.pop(number), last)
        return steps

    def _wait_for_readers(self, controller: Target, pending: dict, names, time: int, steps: list) -> None:
        """Wait for every pending device whose results `names` include, in submission order."""
        wanted = set(names)
        for number in [n for n, p in pending.items() if wanted.intersection(p.leaving)]:
            steps += self._wait(controller, number, pending.pop(number), time)

    def _wait(self, controller: Target, number: int, submitted: _Pending, time: int) -> list:
        """Wait for device `number`, then copy out what it produced for readers outside it. The
        tensors stay live on both sides until `time`, the step the copies come before."""
        device = submitted.device
        memory_target = device.host if device.role is Role.COMPOSITE else device
        steps: list = [SWait(number)]
        for name in submitted.leaving:
            self._touch(memory_target, name, time)
            self._touch(controller, name, time)
            steps.append(SCopyOut(number, Sym(memory_target, name), Sym(controller, name)))
        return steps

    def local_call(self, target: Target, index: int, inner: frozenset[str] = frozenset()) -> SCall:
        """`inner`: tensors the call does not name (None in its arguments) and the target's memory
        never holds: a cascade's, which stay in the device's SRAM (`accelerator_entry`)."""
        unit = self.units[index]
        if self.timing_only:
            present = self.schedule.present.setdefault(target, set())
            present.update(name for name in unit.inputs if name and name not in self.constants)
            present.update(name for name in unit.outputs if name)
            return SCall(index, ())
        args = []
        for name in unit.inputs:
            if not name or name in inner:
                args.append(None)
                continue
            if name not in self.constants:
                self.schedule.touch(target, name, index)
            args.append(Sym(target, name))
        for name in unit.outputs:
            if name and name not in inner:
                self.schedule.touch(target, name, index)
            args.append(Sym(target, name) if name and name not in inner else None)
        return SCall(index, tuple(args))

    def cascade_inner(self, members: list[int]) -> frozenset[str]:
        """The tensors a cascade's units (`members`, one invocation) pass only among themselves: each
        produced by one of them, read by no unit outside them and not a graph output. Its command list
        (hetgen/spec/cascade_program.py) keeps them as stripes in SRAM and never writes them to the
        device's memory, so they get no slot there."""
        inside = set(members)
        produced = {name for index in members for name in self.units[index].outputs if name}
        return frozenset(
            name
            for name in produced
            if name not in self.graph_outputs and all(r in inside for r in self.readers.get(name, []))
        )

    def device_segment(self, controller: Target, slot: int, device: Target, members: list[int]) -> tuple[list, tuple]:
        """Copies in and the submission; and the tensors to copy out once the controller waits."""
        start, end = members[0], members[-1]
        inside = self._subtree(device)
        memory_target = device.host if device.role is Role.COMPOSITE else device
        produced_here = {name for index in members for name in self.units[index].outputs if name}
        needed = []
        held = [tensors for tensors in map(self.schedule.present.get, inside) if tensors]  # by the device's targets
        for index in members:
            for name in self.units[index].inputs:
                if name and name not in self.constants and name not in produced_here and name not in needed:
                    # A tensor the device already holds is not sent again, isolated or not: its
                    # memory plan keeps it live from its first use to its last either way.
                    if not any(name in tensors for tensors in held):
                        needed.append(name)
        steps: list = []
        for name in needed:
            self._touch(controller, name, start)
            self._touch(memory_target, name, start)
            steps.append(SCopyIn(slot, Sym(controller, name), Sym(memory_target, name)))
        if device.role is Role.COMPOSITE:
            entry = self.controller_entry(device.host, members)
        else:
            entry = self.accelerator_entry(device, members)
        programs = self.schedule.entries.setdefault(memory_target, [])
        programs.append(entry)
        steps.append(SInvoke(slot, len(programs) - 1))
        leaving = []
        for name in sorted(produced_here, key=lambda n: (min(self.readers.get(n, [end + 1])), n)):
            outside = any(self.units[r].target not in inside for r in self.readers.get(name, []) if r > end)
            if name in self.graph_outputs or outside:
                leaving.append(name)
        return steps, tuple(leaving)

    def accelerator_entry(self, device: Target, members: list[int]) -> list:
        if device in self.isolated:  # tiled: each tile DMAs its slice of the weights (tiling.py)
            inner = self.cascade_inner(members) if len(members) > 1 else frozenset()
            calls = [self.local_call(device, index, inner) for index in members]
            if len(members) > 1 and not self.timing_only:
                # a cascade (`joined`) runs its units stripe by stripe: each tensor it reads from or
                # writes to the device's memory is live from the invocation's first unit to its last;
                # the tensors inside it (`inner`) are only its SRAM stripes
                for index in members:
                    for name in (*self.units[index].inputs, *self.units[index].outputs):
                        if name and name not in self.constants and name not in inner:
                            self.schedule.touch(device, name, members[0])
                            self.schedule.touch(device, name, members[-1])
            return calls
        if self.timing_only:  # the weights' loads are inside the device's time, not steps of their own
            return [self.local_call(device, index) for index in members]
        steps: list = []
        loaded: set[str] = set()
        for index in members:
            for name in self.units[index].inputs:
                if name in self.constants and name not in loaded:
                    loaded.add(name)
                    self.schedule.touch(device, name, members[0])
                    steps.append(SLoadWeight(device, name))
        for index in members:
            call = self.local_call(device, index)
            for name in self.units[index].inputs:
                if name in self.constants:
                    self.schedule.touch(device, name, index)
            steps.append(call)
        return steps


def timed_program(
    schedule: Schedule, root: Target, unit_nodes: Sequence[tuple[str, ...]], nbytes: Callable[[str], int]
) -> ProgramSteps:
    """The schedule's steps as hetgen/spec/timeline.py times them: each call named by its unit's IR
    nodes (`unit_nodes`), each copy with its tensor's `nbytes`; each device by the path of the program
    it runs (a composite: its host). Weight loads are inside an accelerator's time, not steps."""
    calls = [KernelCall(nodes) for nodes in unit_nodes]
    controllers, accelerators = {}, {}
    for target, entries in schedule.entries.items():
        devices = schedule.devices.get(target)
        if devices is None:  # an accelerator: its sub-programs' calls
            accelerators[target.path_str] = tuple(
                tuple(calls[step.unit] for step in entry if type(step) is SCall) for entry in entries
            )
            continue
        timed_entries = []
        for entry in entries:
            timed = []
            for step in entry:
                kind = type(step)
                if kind is SCall:
                    timed.append(calls[step.unit])
                elif kind is SCopyIn:
                    timed.append(DeviceCopy(step.device, nbytes(step.src.tensor)))
                elif kind is SCopyOut:
                    timed.append(DeviceCopy(step.device, nbytes(step.src.tensor), True))
                elif kind is SInvoke:
                    timed.append(DeviceInvoke(step.device, step.program))
                elif kind is SWait:
                    timed.append(DeviceWait(step.device))
            timed_entries.append(tuple(timed))
        refs = tuple(DeviceRef((d.host if d.host is not None else d).path_str) for d in devices)
        controllers[target.path_str] = ControllerSteps(refs, tuple(timed_entries))
    return ProgramSteps(root.path_str, controllers, accelerators)
