"""A pytest plugin that writes each test's CPU seconds, where the shared 2-core machine's wall time
follows the other sessions' load (docs/testing.md, "Keeping CI within its budget"):

    HG_CPU_TIMES=/tmp/cpu PYTHONPATH=tests python -m pytest -p cpu_times -n 2 -q -m "not cc"
    cat /tmp/cpu.* | sort -rn | head -25

Each process that runs tests (each xdist worker) writes `$HG_CPU_TIMES.<worker>`: one line a test,
its CPU seconds (user + system, its own and its reaped children's: a `python -m hetgen` it ran
counts), its wall seconds and its node id, tab-separated; first a `#` line with the process's CPU
seconds before its first test (start-up and collection)."""

from __future__ import annotations

import os
import time

import pytest

OUT_ENV = "HG_CPU_TIMES"
_rows: list[tuple[float, float, str]] = []
_before_tests: list[float] = []


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def pytest_collection_finish(session):
    _before_tests.append(_cpu_s())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu_s(), time.perf_counter()
    yield
    _rows.append((_cpu_s() - cpu, time.perf_counter() - wall, item.nodeid))


def pytest_sessionfinish(session):
    out = os.environ.get(OUT_ENV)
    if not out or not _rows:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    lines = [f"# {_before_tests[0] if _before_tests else 0.0:.2f} CPU s before the first test"]
    lines += [f"{cpu:.3f}\t{wall:.3f}\t{nodeid}" for cpu, wall, nodeid in _rows]
    with open(f"{out}.{worker}", "w") as file:
        file.write("\n".join(lines) + "\n")
