"""One arena for a bare-metal controller and the accelerator whose arena is in the controller's RAM.

An Ethos-U in Vela's Sram_Only or Shared_Sram memory mode keeps its tensor arena in the system SRAM,
which a bare-metal controller (the Corstone-300's Cortex-M55) also uses as its RAM
(hetgen/platform/memory_modes.py `arena_in_system_sram`). Planned apart, the controller's arena and
the npu's add up even where their tensors are never live at the same time (the fully connected
layer's input copied out of the npu, the quantized input copied in). Here both are planned as ONE
liveness-planned arena: it lies in the npu's block of the workspace, past its SRAM and emulation
workspace (where its activations lived), and the root's arena is that same region
(`Program.arena_in`, hetgen/lower/workspace.py), so its tensors take bytes the npu's tensors free.

Liveness is over the root's step list, the order the program runs: a root tensor is live from the
first root step that names it to the last; a tensor in the npu's memory from its copy in to its
copy out, and across every invocation that names it, from the invocation to the wait for it (the
controller runs its own steps meanwhile: the npu's tensors must not share bytes with them). The
npu's queue takes one invocation at a time (its wait comes before its next invocation), so the
npu's own tensors conflict exactly as in its separate plan (hetgen/lower/verify.py checks both).
"""

from __future__ import annotations

from hetgen.errors import InternalError
from hetgen.lower.memory import Interval, MemoryPlan, plan_memory
from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.memory_modes import arena_in_system_sram
from hetgen.platform.model import Role, Target
from hetgen.spec.schedule import SCall, SCopyIn, SCopyOut, SInvoke, SWait

ROOT, DEVICE = "0", "1"  # the planned buffers' name prefixes: the root's, the device's


def shared_arena_device(root: Target, schedule, isolated: frozenset[Target]) -> Target | None:
    """The one accelerator the bare-metal `root` drives whose arena is in the root's RAM (a tiled
    Ethos-U in Sram_Only or Shared_Sram); None where there is none, or more than one (one arena can
    lie in one device's block only), or the root's arena is split over memory banks."""
    if not is_bare_metal(root) or root.memories:
        return None
    found = [
        device
        for device in schedule.devices.get(root, ())
        if device.role is Role.ACCELERATOR and device in isolated and arena_in_system_sram(device)
    ]
    return found[0] if len(found) == 1 else None


def shared_intervals(root: Target, device: Target, schedule, graph, kernels) -> list[Interval]:
    """The lifetimes, in positions of the root's step list, of the root's arena tensors (its kernels'
    workspaces included; not the caller's inputs and outputs) and of the device's activations."""
    (entry,) = schedule.entries[root]
    number = schedule.devices[root].index(device)
    keep_out = set(graph.inputs) | set(graph.outputs)
    spans: dict[tuple[str, str], list[int]] = {}

    def touch(side: str, name: str, first: int, last: int) -> None:
        if name in graph.constants or (side == ROOT and name in keep_out):
            return
        span = spans.setdefault((side, name), [first, last])
        span[0], span[1] = min(span[0], first), max(span[1], last)

    def touch_sym(sym, position: int) -> None:
        if sym.target == root:
            touch(ROOT, sym.tensor, position, position)
        elif sym.target == device:
            touch(DEVICE, sym.tensor, position, position)

    intervals: list[Interval] = []
    invoked: dict[int, int] = {}  # a device program -> the position it was invoked at, until waited for
    waited: list[tuple[int, int, int]] = []  # (program, invoked at, waited at)
    for position, step in enumerate(entry):
        if isinstance(step, SCall):
            for arg in step.args:
                if arg is not None:
                    touch_sym(arg, position)
            if kernels[step.unit].scratch_bytes:
                intervals.append(
                    Interval(f"{ROOT}scratch:{step.unit}", kernels[step.unit].scratch_bytes, position, position)
                )
        elif isinstance(step, (SCopyIn, SCopyOut)):
            touch_sym(step.src, position)
            touch_sym(step.dst, position)
        elif isinstance(step, SInvoke) and step.device == number:
            invoked[step.program] = position
        elif isinstance(step, SWait) and step.device == number:
            waited += [(program, start, position) for program, start in invoked.items()]
            invoked.clear()
    if invoked:
        raise InternalError(f"{device.path_str}: sub-programs {sorted(invoked)} are invoked but never waited for")
    programs = schedule.entries.get(device, [])
    for program, start, end in waited:
        for step in programs[program]:
            for arg in step.args if isinstance(step, SCall) else ():
                if arg is not None and arg.target == device:
                    touch(DEVICE, arg.tensor, start, end)
    for side, target, skip in ((ROOT, root, keep_out), (DEVICE, device, set())):
        expected = {
            name for name in schedule.events.get(target, {}) if name not in graph.constants and name not in skip
        }
        found = {name for (where, name) in spans if where == side}
        if found != expected:
            raise InternalError(
                f"{target.path_str}: the shared arena's tensors {sorted(found ^ expected)} are not the schedule's"
            )
    intervals += [
        Interval(side + name, nbytes_of(graph, name), first, last) for (side, name), (first, last) in spans.items()
    ]
    return intervals


def nbytes_of(graph, name: str) -> int:
    return graph.types[name].nbytes


def plan_shared(root: Target, device: Target, schedule, graph, kernels, base: int) -> tuple[MemoryPlan, MemoryPlan]:
    """The root's plan and the device's over one arena: the device's buffers `base` bytes into its
    local memory (past its SRAM and emulation workspace), the root's at the same bytes, from the
    start of the root's arena (which the workspace places there)."""
    plan = plan_memory(shared_intervals(root, device, schedule, graph, kernels))
    root_buffers = tuple((name[1:], offset, nbytes) for name, offset, nbytes in plan.buffers if name[0] == ROOT)
    device_buffers = tuple(
        (name[1:], base + offset, nbytes) for name, offset, nbytes in plan.buffers if name[0] == DEVICE
    )
    root_plan = MemoryPlan(tuple(sorted(root_buffers)), plan.arena_size, plan.total_bytes, plan.lower_bound)
    device_plan = MemoryPlan(
        tuple(sorted(device_buffers)),
        base + plan.arena_size,
        base + plan.total_bytes,
        base + plan.lower_bound,
    )
    return root_plan, device_plan
