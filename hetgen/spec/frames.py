"""Frames pipelined across devices: the program's root entry cut into stages at its waits, run frame
after frame in the order the generated `_run_frames` runs them, and timed by the rules of
hetgen/spec/timeline.py with one difference: a device is shared by every frame in flight, so its
clock carries over from frame to frame, and a wait waits for its own frame's submissions only (a
fence per submission, as a hardware command queue has), not for work queued after them.

The order (templates/model/model.c.j2: `_run_frames` runs the same): at step t the root runs stage 0 of frame
t, then stage 1 of frame t-1, ..., stage S-1 of frame t-S+1: new work is submitted before the
root waits for older frames, so device d works on frame n while the root finishes frame n-1. Each
frame in flight has its own workspace (its arena, its devices' memories): S of them.

`resource_busy` is the work each resource does per frame (the root's kernels and copies; each of
its devices' invocations, a co-processor's whole sub-program): the steady-state period of any
pipelined schedule is at least the busiest one's, and `frames_timeline` measures the period this
order reaches.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.spec.timeline import DeviceCopy, DeviceInvoke, DeviceWait, KernelCall, ProgramSteps, Timing, run_timeline


def stages(entry: tuple) -> tuple[tuple, ...]:
    """The root entry cut before each run of waits: stage k+1 starts by waiting for what stage k
    (of the same frame, one step earlier) submitted."""
    cuts = [0]
    for index, step in enumerate(entry):
        if type(step) is DeviceWait and index > 0 and type(entry[index - 1]) is not DeviceWait:
            cuts.append(index)
    cuts.append(len(entry))
    return tuple(tuple(entry[a:b]) for a, b in zip(cuts, cuts[1:]) if b > a) or ((),)


def stage_bounds(kinds: list[str]) -> list[tuple[int, int]]:
    """The same cut over a list of step kinds ("wait" or another): (start, end) index pairs."""
    cuts = [0]
    for index, kind in enumerate(kinds):
        if kind == "wait" and index > 0 and kinds[index - 1] != "wait":
            cuts.append(index)
    cuts.append(len(kinds))
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a] or [(0, 0)]


def stage_submissions(steps: list[tuple[str, int | None]]) -> list[tuple[int, ...]]:
    """For each stage of `steps` ((kind, device) pairs: kind "wait", "invoke", another device
    operation such as "copy", or "" for the root's own work), the devices whose queued invocations
    the end of the stage hands to their worker threads (templates/runtime/hg_frames.c): those invoked
    since the device's last wait whose next operation in the frame is a wait. A copy or another
    invocation before that wait would touch the device's memory or queue while it runs, so such a
    device's invocations run where the frame waits, as in a run of one frame."""
    kinds = ["wait" if kind == "wait" else "" for kind, _ in steps]
    submissions = []
    for _, end in stage_bounds(kinds):
        last = {}  # each device's last invocation or wait before the cut
        for kind, device in steps[:end]:
            if kind in ("invoke", "wait"):
                last[device] = kind
        following = {}  # each device's first operation after the cut
        for kind, device in steps[end:]:
            if device is not None:
                following.setdefault(device, kind)
        submissions.append(tuple(sorted(d for d, k in last.items() if k == "invoke" and following.get(d) == "wait")))
    return submissions


def resource_busy(program: ProgramSteps, timing: Timing) -> dict[str, float]:
    """Each resource's work per frame: the root (its kernel calls and the copies it makes) and each
    of its devices (the time of every sub-program submitted to it)."""
    busy: dict[str, float] = {program.root: 0.0}

    def trace(controller, start, us, device, step, entry) -> None:
        if controller != program.root:
            return
        if type(step) is DeviceInvoke:
            busy[device] = busy.get(device, 0.0) + us
        else:
            busy[program.root] += us

    run_timeline(program, timing, trace)
    return busy


@dataclass(frozen=True)
class FrameTimes:
    starts: tuple[float, ...]  # when the root began each frame
    finishes: tuple[float, ...]  # when each frame's outputs were complete
    depth: int  # frames in flight (stages of the root entry)

    @property
    def steady(self) -> tuple[int, int]:
        """The frames that finish while the pipeline is full (a new frame starts at every step):
        frame f finishes at step f + depth - 1, and steps depth - 1 .. n - 1 are full."""
        last = len(self.finishes) - self.depth
        return max(last // 2, 0), max(last, 0)

    @property
    def period_us(self) -> float:
        """The steady-state period: the mean gap between frames finishing in the full pipeline."""
        first, last = self.steady
        if last <= first:
            return self.finishes[-1] - self.finishes[-2] if len(self.finishes) > 1 else sum(self.finishes)
        return (self.finishes[last] - self.finishes[first]) / (last - first)

    @property
    def latency_us(self) -> float:
        """One frame's time from start to finish in the full pipeline."""
        last = self.steady[1]
        return self.finishes[last] - self.starts[last] if self.finishes else 0.0


def frames_for(depth: int, at_least: int = 16) -> int:
    """Enough frames for a steady state to measure: four times the frames in flight, and more."""
    return max(at_least, 4 * depth + 8)


def frames_timeline(program: ProgramSteps, timing: Timing, frames: int) -> FrameTimes:
    """`frames` frames through the pipelined program, timed step by step."""
    controllers = program.controllers
    root = controllers[program.root]
    parts = stages(root.entries[0])
    depth = len(parts)
    now = 0.0
    free: dict[str, float] = {}
    done: dict[tuple[int, str], float] = {}
    starts = [0.0] * frames
    finishes = [0.0] * frames

    def sub_us(path: str, index: int) -> float:  # a co-processor's sub-program, as run_timeline times it
        steps = controllers[path]
        clock, busy = 0.0, {}
        for step in steps.entries[index]:
            kind = type(step)
            if kind is KernelCall:
                clock += timing.call_us(path, step)
            elif kind is DeviceCopy:
                clock += timing.copy_us(path, steps.devices[step.device], step)
            elif kind is DeviceInvoke:
                device = steps.devices[step.device].path
                us = (
                    sub_us(device, step.program)
                    if device in controllers
                    else timing.invocation_us(device, step.program)
                )
                busy[device] = max(clock, busy.get(device, 0.0)) + us
            else:
                clock = max(clock, busy.get(steps.devices[step.device].path, 0.0))
        return max([clock, *busy.values()])

    for t in range(frames + depth - 1):
        for s in range(depth):
            frame = t - s
            if frame < 0 or frame >= frames:
                continue
            if s == 0:
                starts[frame] = now
            for step in parts[s]:
                kind = type(step)
                if kind is KernelCall:
                    now += timing.call_us(program.root, step)
                elif kind is DeviceCopy:
                    now += timing.copy_us(program.root, root.devices[step.device], step)
                elif kind is DeviceInvoke:
                    device = root.devices[step.device].path
                    start = max(now, free.get(device, 0.0))
                    if device in controllers:
                        us = sub_us(device, step.program)
                    else:
                        us = timing.invocation_us(device, step.program)
                    free[device] = done[frame, device] = start + us
                else:
                    now = max(now, done.get((frame, root.devices[step.device].path), 0.0))
            if s == depth - 1:
                mine = [us for (f, _), us in done.items() if f == frame]
                finishes[frame] = max([now, *mine])
    return FrameTimes(tuple(starts), tuple(finishes), depth)
