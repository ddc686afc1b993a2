"""How a kernel splits its work between the worker pool's threads (templates/runtime/hg_threads.c).

A kernel big enough to be worth it is cut, at generate time, into a fixed number of tasks over its
outermost independent dimension (rows of a LayerNorm or Softmax, heads of an attention, chunks of
an elementwise loop), and calls `hg_parallel_for` with them; a smaller one stays the serial code it
always was. The cut never depends on the thread count: with one thread the same tasks run one after
another on the caller, so every element is computed by the same code in the same order whatever
the count, and 1- and 2-thread runs agree bit for bit. Where a target has no pool (bare metal),
`hg_parallel_for` is an inline loop (hg_threads.h), so the tasks compile to the serial loop.
"""

from __future__ import annotations

from dataclasses import dataclass

HELPER = "hg_threads.c"

# A task should outweigh what claiming it and waking a worker cost (a few microseconds): at least
# this many units of work (about one float element through a simple expression each).
MIN_TASK_WORK = 16384
# More tasks than threads let a thread the OS runs late take fewer of them; past this, each task's
# claim costs more than the balance gains.
MAX_TASKS = 32


@dataclass(frozen=True)
class Split:
    """`units` (rows, heads, elements) cut into `tasks` runs of `chunk` units (the last one shorter)."""

    units: int
    chunk: int
    tasks: int


def split(units: int, work_per_unit: int, align: int = 1) -> Split | None:
    """The split of `units` independent units of `work_per_unit` each, or None when the whole is too
    small to share. `align`: each task starts at a multiple of it (so an elementwise chunk starts
    where a vector loop over the whole would be at a vector boundary)."""
    work = units * max(work_per_unit, 1)
    tasks = min(MAX_TASKS, units, work // MIN_TASK_WORK)
    if tasks < 2:
        return None
    chunk = -(-units // tasks)
    chunk = -(-chunk // align) * align
    tasks = -(-units // chunk)
    return Split(units, chunk, tasks) if tasks >= 2 else None
