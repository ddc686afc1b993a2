"""How a kernel splits its work between the worker pool's threads (templates/runtime/hg_threads.c).

A kernel big enough to be worth it is cut, at generate time, into a fixed number of tasks over its
outermost independent dimension (rows of a LayerNorm or Softmax, heads of an attention, chunks of
an elementwise loop), and calls `hg_parallel_for` with them; a smaller one stays the serial code it
always was. The cut never depends on the thread count: with one thread the same tasks run one after
another on the caller, so every element is computed by the same code in the same order whatever
the count, and 1- and 2-thread runs agree bit for bit. Where a target has no pool (bare metal),
`hg_parallel_for` is an inline loop (hg_threads.h), so the tasks compile to the serial loop.

What a kernel gives the pool is data on its `Kernel` (`parallel`: a `Parallel`), set by the lowering
from the very split it renders, so the cost model (hetgen/partition/cost.py) prices the split the
generated code makes and never decides one of its own. A lowering that splits adds one argument,
`parallel=_parallel.tasks_of(split)`; one that calls the GEMM, `parallel=_parallel.gemm(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.ops._gemm_plan import gemm_parallelism

HELPER = "hg_threads.c"

# A task should outweigh what claiming it and waking a worker cost (a few microseconds): at least
# this many units of work (about one float element through a simple expression each).
MIN_TASK_WORK = 16384
# What one hg_parallel_for call costs besides its tasks (publishing the job, workers that spin
# between calls claiming their first task, the caller waiting for the last): a few microseconds.
# Waking a sleeping worker costs more, but the workers spin between a model's kernels (hg_threads.c).
POOL_CALL_US = 2.0
# What one barrier of hg_parallel_phases costs besides the phases it separates: each run publishes
# "phase done" with a store to its own cache line and the others see it (a cache line's round trip
# between this VM's two CPUs: 260-280 ns, FAR apart), each run reads the units the others wrote,
# and the runs wait for the slowest. Measured (2 runs of 1 us of work a phase, the fastest of
# 20 x 200 calls at load average 3): 1.62-1.67 us a phase, 0.6 us over the ideal; and a 128-unit
# GRU's step (2 us alone) ran no faster on two threads than on one. So 1 us.
POOL_BARRIER_US = 1.0
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


@dataclass(frozen=True)
class GemmCall:
    """`calls` hg_sgemm_ex calls on an m x n x k product, A and/or B in panels from generate time."""

    m: int
    n: int
    k: int
    calls: int = 1
    a_packed: bool = False
    b_packed: bool = False

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k * self.calls

    def speedup(self, threads: int) -> float:
        return gemm_parallelism(self.m, self.n, self.k, threads, self.a_packed, self.b_packed)


def task_speedup(tasks: int, threads: int) -> float:
    """`tasks` equal tasks on `threads`: min(threads, tasks) run at once and the busiest takes
    ceil(tasks / threads) of them."""
    if threads <= 1 or tasks < 2:
        return 1.0
    return tasks / -(-tasks // min(threads, tasks))


def pays(serial_us: float, tasks: int, calls: int = 1, threads: int = 2, barriers: int = 0) -> bool:
    """Whether work that takes `serial_us` on the caller alone, cut into `tasks` and handed out in
    `calls` hg_parallel_for calls (with `barriers` hg_parallel_phases barriers between their
    phases), is faster through the pool of `threads` (2: the least that shares) as the cost model
    prices it (hetgen/partition/cost.py `kernel_us`): the time the other threads take off it must
    outweigh the calls and barriers."""
    saved = serial_us - serial_us / task_speedup(tasks, threads)
    return saved > calls * POOL_CALL_US + barriers * POOL_BARRIER_US


@dataclass(frozen=True)
class Phase:
    """One step of a kernel that runs in steps (Winograd's input transform, its 16 products, its
    output transform): `work` units of it in all, run as `calls` hg_parallel_for calls of `tasks`
    tasks each (1: serially on the caller), with `barriers` barriers between the phases of those
    calls in all (hg_parallel_phases: a recurrent layer's steps)."""

    work: int
    tasks: int
    calls: int = 1
    barriers: int = 0


@dataclass(frozen=True)
class Parallel:
    """How a kernel's work is shared between the pool's threads: `tasks` fixed tasks in one
    hg_parallel_for call (1: serial), its GEMM calls (`gemms`), each split at run time by
    hg_gemm.c's rule (`gemm_parallelism`), steps of fixed tasks (`phases`), or GEMM calls and
    steps both (a recurrent layer's input projections and its time steps)."""

    tasks: int = 1
    gemms: tuple[GemmCall, ...] = ()
    phases: tuple[Phase, ...] = ()

    def speedup(self, threads: int) -> float:
        """How many threads' worth of speed the kernel's compute gets from `threads`: with fixed
        tasks, `task_speedup`; through the GEMM, each call's own speed-up, and in phases each
        phase's, all weighted by their work (a GEMM's multiply-add counts two units, as a phase
        counts flops: a recurrent layer has both)."""
        if threads <= 1:
            return 1.0
        if not self.gemms and not self.phases:
            return task_speedup(self.tasks, threads)
        work = sum(2 * g.macs for g in self.gemms) + sum(p.work for p in self.phases)
        serial = sum(2 * g.macs / g.speedup(threads) for g in self.gemms)
        serial += sum(p.work / task_speedup(p.tasks, threads) for p in self.phases)
        return work / serial if serial else 1.0

    def pool_calls(self, threads: int) -> int:
        """The hg_parallel_for calls one run makes that hand work to other threads."""
        if threads <= 1:
            return 0
        if not self.gemms and not self.phases:
            return 1 if self.tasks > 1 else 0
        calls = sum(g.calls for g in self.gemms if g.speedup(threads) != 1.0)
        return calls + sum(p.calls for p in self.phases if p.tasks > 1)

    def barriers(self, threads: int) -> int:
        """The hg_parallel_phases barriers one run passes on the pool's threads."""
        return sum(p.barriers for p in self.phases if p.tasks > 1) if threads > 1 else 0


SERIAL = Parallel()


def tasks_of(split: Split | int | None) -> Parallel:
    """A kernel that runs `split` (`split()`'s answer, or a task count) through hg_parallel_for."""
    tasks = split.tasks if isinstance(split, Split) else (split or 1)
    return Parallel(tasks=tasks) if tasks > 1 else SERIAL


def gemm(*calls: GemmCall) -> Parallel:
    """A kernel whose work is its GEMM calls."""
    return Parallel(gemms=tuple(call for call in calls if call.calls > 0))


def phased(*phases: Phase) -> Parallel:
    """A kernel that runs in steps, each of fixed tasks (or serial)."""
    return Parallel(phases=phases) if any(p.tasks > 1 for p in phases) else SERIAL
