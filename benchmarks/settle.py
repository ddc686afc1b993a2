"""A settle gap between two engines' runs in an interleaved benchmark: waits until no other thread of
this process is using a CPU, so each engine's runs get the cores they would have alone.

onnxruntime's intra-op pool spins after a run by default (measured here: its worker used 43.8 ms of
CPU after a 0.5 ms ShuffleNet run at 2 threads, /proc/self/task/*/schedstat), and hetgen's workers
spin HG_THREADS_SPIN_US; a run that starts meanwhile shares its second core with the other engine's
spinning thread. Waiting for them changes neither engine's settings: each still spins after its own
runs, and each meets its own pool as it left it.
"""

from __future__ import annotations

import os
import threading
import time

IDLE_WINDOW_S = (
    0.010  # the other threads must stay idle this long (a spinner preempted on a loaded machine looks idle for a while)
)
IDLE_CPU_S = 0.0002  # "idle": less than this much CPU time between them over the window
LONGEST_S = 0.5  # give up (a thread that never settles: say, another engine's own work)


def _other_threads_cpu_s() -> float | None:
    """The CPU time (s) of this process's threads but the calling one, or None where /proc is absent."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    own = str(threading.get_native_id())
    total = 0
    for task in tasks:
        if task == own:
            continue
        try:
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended
    return total / 1e9


def settle() -> float:
    """Waits until this process's other threads have been idle for IDLE_WINDOW_S (at most LONGEST_S,
    or a fixed LONGEST_S / 10 where /proc is absent); returns the seconds it waited."""
    start = time.perf_counter()
    before = _other_threads_cpu_s()
    if before is None:
        time.sleep(LONGEST_S / 10)
        return time.perf_counter() - start
    while time.perf_counter() - start < LONGEST_S:
        time.sleep(IDLE_WINDOW_S)
        now = _other_threads_cpu_s()
        if now - before < IDLE_CPU_S:
            break
        before = now
    return time.perf_counter() - start
