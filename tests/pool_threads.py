"""The process's threads as the kernel lists them (/proc/self/task), for the tests that check that a
model's worker pool starts its workers and that closing (or collecting) the model stops them.

A started worker is listed at once: pthread_create returns after the kernel has added the thread.
A joined worker is not gone at once: pthread_join returns when the kernel clears the thread's tid,
early in the thread's exit (exit_mm), but the kernel lists the thread until it reaps it, later in
that exit, and on a loaded machine the exiting thread can be preempted in between. Measured on 2
cores at load ~16: 3 of 30,000 hg_threads_shutdown calls returned with the joined worker still
listed, for up to 1.5 ms (a bare pthread_create/pthread_join loop: 2 of 20,000). A test that counted
the threads right after closing a model was flaky for that, not for the pool. So the tests name the
workers a run started and wait, bounded, for the kernel to drop them: a worker that still runs
never goes, and the wait fails.
"""

from __future__ import annotations

import os
import time

REAPED_WITHIN_S = 10.0  # thousands of times the worst delay measured, so only a running worker fails


def thread_ids() -> frozenset[int]:
    return frozenset(int(name) for name in os.listdir("/proc/self/task"))


def started_since(before: frozenset[int]) -> frozenset[int]:
    """The threads listed now that were not listed in `before` (a thread of `before` that ended
    since does not count)."""
    return thread_ids() - before


def exited(threads: frozenset[int]) -> bool:
    """Whether none of `threads` is listed any more, waiting up to REAPED_WITHIN_S for the kernel to
    reap threads that have been joined."""
    deadline = time.monotonic() + REAPED_WITHIN_S
    while threads & thread_ids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    return True
