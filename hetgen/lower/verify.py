"""The lowered programs' invariants, checked by `Lowered.verify()` before codegen: a broken one is a
hetgen bug.

What the runtimes rely on and the C cannot check for itself: every buffer a step names is where
its target's memory plan put it, two buffers that share bytes are never live at once (in the order
the program runs, device sub-programs inlined where they are invoked; for a root whose arena is in a device's
memory, across the two, what a sub-program touches live until the root waits for it),
every kernel called belongs
to the program that calls it, and every device step names a device, a sub-program and device
memory that exist.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from hetgen.errors import InternalError
from hetgen.lower.memory import ALIGNMENT
from hetgen.lower.program import (
    BufferRef,
    Call,
    Copy,
    DeviceCopyIn,
    DeviceCopyOut,
    Invoke,
    Lowered,
    Program,
    ProgramRole,
    Region,
    Wait,
)
from hetgen.lower.workspace import device_program_path
from hetgen.platform.model import Target

# Names of buffers a tiled accelerator's steps use outside its memory plan (hetgen/lower/tiled.py).
TILE_BUFFERS = ("sram", "scratch")


@dataclass
class _Check:
    lowered: Lowered
    problems: list[str] = field(default_factory=list)
    clock: int = 0
    # per program's target: buffer name -> (first, last) time it was touched
    touched: dict[Target, dict[str, list[int]]] = field(default_factory=dict)
    # per device: the buffers its invoked sub-programs touched, live for its controller until it
    # waits (the device runs its own steps in order: among themselves they are live as touched)
    running: dict[Target, set[str]] = field(default_factory=dict)
    waited: dict[Target, dict[str, int]] = field(default_factory=dict)  # device -> buffer -> last wait

    def __post_init__(self) -> None:
        # Program.devices names each device by its path.
        self.by_path = {program.target.path_str: program for program in self.lowered.programs}
        self.planned = {
            program.target: {name: (offset, nbytes) for name, offset, nbytes in program.memory.buffers}
            for program in self.lowered.programs
        }

    def fail(self, program: Program, message: str) -> None:
        self.problems.append(f"{program.target.path_str}: {message}")

    def child(self, program: Program, device: int) -> Program | None:
        if not 0 <= device < len(program.devices):
            self.fail(program, f"a step names device {device}; the program drives {len(program.devices)}")
            return None
        return self.by_path.get(device_program_path(program.devices[device], self.by_path))

    def touch(self, program: Program, name: str) -> None:
        name = program.memory.holder(name)  # a Concat's input inside its output lives as the output
        span = self.touched.setdefault(program.target, {}).setdefault(name, [self.clock, self.clock])
        span[1] = self.clock

    def ref(self, program: Program, ref: BufferRef) -> None:
        if ref.region is Region.ARENA:
            self.arena_ref(program, ref)
        elif ref.region is Region.WEIGHTS:
            if not 0 <= ref.position <= program.weights.size:
                self.fail(program, f"{ref.tensor!r} at weights offset {ref.position}, past {program.weights.size}")
        elif ref.region in (Region.INPUT, Region.OUTPUT):
            tensors = program.inputs if ref.region is Region.INPUT else program.outputs
            if program.role is not ProgramRole.ROOT or not 0 <= ref.position < len(tensors):
                self.fail(program, f"{ref.tensor!r} is caller {ref.region.name.lower()} {ref.position}; there is none")

    def arena_ref(self, program: Program, ref: BufferRef) -> None:
        plan = program.memory
        planned = self.planned[program.target]
        if ref.tensor in planned:
            offset, nbytes = planned[ref.tensor]
            if not offset <= ref.position <= offset + nbytes:
                self.fail(program, f"{ref.tensor!r} referenced at {ref.position}; planned at {offset} ({nbytes} bytes)")
            self.touch(program, ref.tensor)
        elif ref.tensor.split(":")[0] in TILE_BUFFERS:
            if ref.position >= plan.arena_size and ref.position:
                self.fail(program, f"{ref.tensor!r} at {ref.position}, past the arena ({plan.arena_size} bytes)")
        else:
            self.fail(program, f"{ref.tensor!r} is referenced in the arena but was never planned")

    def run(self, program: Program, entry: int) -> None:
        units = set(map(id, program.units))
        for step in program.entries[entry]:
            self.clock += 1
            if isinstance(step, Call):
                if id(step.unit) not in units:
                    self.fail(program, f"calls {step.unit.fn}, which is not one of its kernels")
                for arg in step.args:
                    self.ref(program, arg)
            elif isinstance(step, Copy):
                self.ref(program, step.src)
                self.ref(program, step.dst)
            elif isinstance(step, (DeviceCopyIn, DeviceCopyOut)):
                self.ref(program, step.src if isinstance(step, DeviceCopyIn) else step.dst)
                child = self.child(program, step.device)
                offset = step.dst_offset if isinstance(step, DeviceCopyIn) else step.src_offset
                if child is not None:
                    self.device_memory(child, step.tensor, offset, step.nbytes)
            elif isinstance(step, Invoke):
                child = self.child(program, step.device)
                if child is not None and not 0 <= step.program < len(child.entries):
                    self.fail(program, f"invokes sub-program {step.program}; {child.target.path_str} has "
                              f"{len(child.entries)}")  # fmt: skip
                elif child is not None:
                    start = self.clock
                    self.run(child, step.program)
                    spans = self.touched.get(child.target, {})
                    running = self.running.setdefault(child.target, set())
                    running.update(name for name, (_, last) in spans.items() if last > start)
            elif isinstance(step, Wait):
                # the device ran asynchronously until now: what its sub-programs touched was live
                child = self.child(program, step.device)
                if child is not None:
                    waited = self.waited.setdefault(child.target, {})
                    for name in self.running.pop(child.target, ()):
                        waited[name] = self.clock

    def device_memory(self, child: Program, tensor: str, offset: int, nbytes: int) -> None:
        planned = self.planned[child.target]
        if tensor not in planned:
            self.fail(child, f"{tensor!r} is copied into its memory but was never planned there")
            return
        start, size = planned[tensor]
        if offset != start or nbytes > size:
            self.fail(child, f"{tensor!r} copied at {offset} ({nbytes} bytes); planned at {start} ({size} bytes)")
        self.touch(child, tensor)

    def plans(self) -> None:
        for program in self.lowered.programs:
            plan = program.memory
            for name, offset, nbytes in plan.buffers:
                if offset % ALIGNMENT or offset + nbytes > plan.arena_size:
                    self.fail(program, f"buffer {name!r} at {offset} ({nbytes} bytes) in an arena of {plan.arena_size}")
            self.overlaps(program)
            if program.arena_in:
                self.shared(program)

    def shared(self, program: Program) -> None:
        """A root whose arena is in a device's local memory (hetgen/lower/shared_arena.py): its
        buffers and the device's must not share bytes while both are live either, the device's
        live until the root waits for the sub-program that touched them."""
        device = self.by_path.get(program.arena_in)
        if device is None:
            self.fail(program, f"its arena is in {program.arena_in!r}, which has no program")
            return
        ours = self.touched.get(program.target, {})
        waited = self.waited.get(device.target, {})
        theirs = {
            name: (first, max(last, waited.get(name, last)))
            for name, (first, last) in self.touched.get(device.target, {}).items()
        }
        buffers = [(ours[name], program.arena_base + offset, nbytes, f"{name} (root)")
                   for name, offset, nbytes in program.memory.buffers if name in ours]  # fmt: skip
        buffers += [(theirs[name], offset, nbytes, f"{name} ({device.target.path_str})")
                    for name, offset, nbytes in device.memory.buffers if name in theirs]  # fmt: skip
        self.sweep(program, [(span[0], span[1], start, start + max(n, 1), name) for span, start, n, name in buffers])

    def overlaps(self, program: Program) -> None:
        spans = self.touched.get(program.target, {})
        self.sweep(
            program,
            [
                (spans[name][0], spans[name][1], offset, offset + max(nbytes, 1), name)
                for name, offset, nbytes in program.memory.buffers
                if name in spans
            ],
        )

    def sweep(self, program: Program, buffers) -> None:
        """Buffers (first, last, start, end, name) that share bytes must not be live at once (live:
        first to last touch). A sweep over the buffers by first touch compares each with those still
        live then, so the cost is the buffers times how many are live at once, not all pairs that
        reuse the same bytes."""
        lasts = {name: last for _, last, _, _, name in buffers}
        placed = sorted((first, start, end, name) for first, _, start, end, name in buffers)
        live: dict[str, tuple[int, int]] = {}  # name -> its bytes [start, end), while live
        ending: list[tuple[int, str]] = []  # (last touch, name) of the live ones, a heap
        for first, start, end, name in placed:
            while ending and ending[0][0] < first:
                del live[heapq.heappop(ending)[1]]
            for other, (other_start, other_end) in live.items():
                if other_start < end and start < other_end:
                    pair = (other, name) if (other_start, other) < (start, name) else (name, other)
                    self.fail(program, f"buffers {pair[0]!r} and {pair[1]!r} share bytes while both are live")
            live[name] = (start, end)
            heapq.heappush(ending, (lasts[name], name))


def broken_invariants(lowered: Lowered) -> tuple[str, ...]:
    """Every invariant `lowered` breaks, each once, in the order found (none: it holds them all)."""
    root = lowered.root
    if root.role is not ProgramRole.ROOT:
        return (f"the first program ({root.target.path_str}) is not the root's",)
    check = _Check(lowered)
    for entry in range(len(root.entries)):
        check.run(root, entry)
    check.plans()
    return tuple(dict.fromkeys(check.problems))


def verified(lowered: Lowered) -> Lowered:
    """`lowered`, unchanged, when it holds the invariants the runtimes rely on; otherwise an
    InternalError listing every broken one."""
    problems = broken_invariants(lowered)
    if problems:
        listed = "\n  ".join(problems)
        raise InternalError(f"the lowered program breaks its invariants:\n  {listed}")
    return lowered
