"""The workspace: one caller-provided block that holds every byte of mutable state a run touches.

The root's workspace is its arena followed by one block per child device, recursively (a root
whose arena is shared with a device's activations, hetgen/lower/shared_arena.py, has none of its
own before the blocks: its arena is that device's, past the device's SRAM). A device's
block is a fixed header (a co-processor's pending queue; a simulated accelerator's queue and
counters), then its arena (a co-processor's workspace, an accelerator's local memory), then its own
children's blocks. Two runs given different workspaces share nothing mutable, so every generated
runtime is re-entrant; the library's static copy of this block is only the no-workspace convenience.

Python decides every offset here; the generated C `_Static_assert`s that its structs fit them.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.errors import InternalError
from hetgen.lower.memory import ALIGNMENT

# Bytes reserved at the start of each device's block for its C state struct (queue, counters); the
# generated C asserts `sizeof` fits, for every ABI it is built for.
STATE_HEADER_SIZE = 192
# A simulated accelerator's header continues with one 64-bit cycle counter per command of its
# programs (hg_sim.h), so `hetgen bench` can show each kernel's simulated time.
COUNTER_BYTES = 8


def simulator_counters(program) -> int:
    """How many per-command cycle counters a program's state header holds: one per command of a
    simulated accelerator, none elsewhere."""
    return sum(len(entry) for entry in program.entries) if program.device_model is not None else 0


@dataclass(frozen=True)
class ChildBlock:
    path: str  # the child program's target path
    offset: int  # from the start of the parent's block
    size: int


@dataclass(frozen=True)
class WorkspaceLayout:
    """One program's block: [header | arena | child blocks...], every part 64-byte aligned."""

    header_size: int  # 0 for the root, which keeps no state between runs
    arena_offset: int
    arena_size: int
    children: tuple[ChildBlock, ...]  # in the order of Program.devices
    size: int  # the whole block, children included


@dataclass(frozen=True)
class SimulatedDevice:
    """A simulated accelerator anywhere below the root, with its block's offset in the root's workspace."""

    path: str
    offset: int


def _aligned(value: int) -> int:
    return (value + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def device_program_path(device: str, program_paths) -> str:
    """The program that serves a device path: the device itself, or a composite device's host."""
    return device if device in program_paths else f"{device}/host"


def plan_workspaces(programs) -> dict[str, WorkspaceLayout]:
    """Every program's block layout, keyed by target path; programs[0] is the root."""
    by_path = {program.target.path_str: program for program in programs}
    layouts: dict[str, WorkspaceLayout] = {}

    def plan(path: str, is_root: bool) -> WorkspaceLayout:
        program = by_path[path]
        header = 0 if is_root else STATE_HEADER_SIZE + _aligned(COUNTER_BYTES * simulator_counters(program))
        # An accelerator's local memory is at least one aligned line, as its static storage was.
        arena = _aligned(max(program.workspace_arena_size, 0 if is_root else ALIGNMENT))
        # an arena shared with a device's (hetgen/lower/shared_arena.py) lies in that device's block
        offset = header + (0 if program.arena_in else arena)
        arena_offset, shared = header, False
        children = []
        for device in program.devices:
            child_path = device_program_path(device, by_path)
            child = plan(child_path, False)
            children.append(ChildBlock(child_path, offset, child.size))
            if child_path == program.arena_in:
                arena_offset, shared = offset + child.arena_offset + program.arena_base, True
                if program.arena_base + arena > child.arena_size:
                    raise InternalError(f"{path}: its arena does not fit in {child_path}'s local memory")
            offset += child.size
        if program.arena_in and not shared:
            raise InternalError(f"{path}: its arena is in {program.arena_in}, which is not one of its devices")
        layout = WorkspaceLayout(header, arena_offset, arena, tuple(children), max(_aligned(offset), ALIGNMENT))
        layouts[path] = layout
        return layout

    plan(programs[0].target.path_str, True)
    return layouts


def simulated_devices(programs, layouts: dict[str, WorkspaceLayout]) -> tuple[SimulatedDevice, ...]:
    """Every simulated accelerator below the root (and every co-processor that counts the copies over
    its link), depth first, with its absolute workspace offset."""
    by_path = {program.target.path_str: program for program in programs}
    found: list[SimulatedDevice] = []

    def walk(path: str, base: int) -> None:
        for child in layouts[path].children:
            program = by_path[child.path]
            if program.device_model is not None or program.counted_link is not None:  # it keeps counters
                found.append(SimulatedDevice(child.path, base + child.offset))
            walk(child.path, base + child.offset)

    walk(programs[0].target.path_str, 0)
    return tuple(found)
