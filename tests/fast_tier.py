"""The fast tier (`python -m pytest -m "not cc"`) is honest: it runs with a folder first on PATH whose
compilers, ninja, qemu and chromium fail loudly, so a test that builds C but lacks `@pytest.mark.cc`
fails there instead of quietly making the fast tier slow (docs/testing.md).

Two ways a test could reach a real tool past PATH are closed too: hetgen runs the `ninja` package's
binary by its absolute path (`ninja.BIN_DIR`, hetgen/build/ninja_file.py), so that attribute points at
the wrappers' folder in this process; and a test that expects a build to fail would still pass on a
wrapper's refusal, so every wrapper also appends its command line to a log, and a test during which
the log grew fails whatever it asserted (conftest.py).
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
import stat
import tempfile
from pathlib import Path

ENV = "HETGEN_FAST_TIER"  # "1": the wrappers go first on PATH whatever -m selects; "record": see RECORD_ENV
# With HETGEN_FAST_TIER=record the wrappers log and then run the real tool, and each test that ran
# one is written to this file: how the existing tests were classified in one run of the whole suite.
RECORD_ENV = "HETGEN_FAST_TIER_RECORD"
LOG_ENV = "HETGEN_FAST_TIER_LOG"  # where the wrappers write what they were asked to run
BIN_ENV = "HETGEN_FAST_TIER_BIN"  # the wrappers' folder, made once by the first process (xdist's controller)
MESSAGE = "the fast tier ran a compiler: mark this test cc (@pytest.mark.cc, docs/testing.md)"

# Always wrapped, installed or not (a test that finds one with shutil.which must not skip quietly);
# then every program on PATH whose name matches one of PATTERNS (cross compilers, versioned ones).
NAMES = ("cc", "c++", "gcc", "g++", "clang", "clang++", "cpp", "tcc", "ccache", "sccache", "distcc", "ninja",
         "chromium", "chromium-browser", "google-chrome")  # fmt: skip
PATTERNS = ("gcc-*", "g++-*", "clang-*", "clang++-*", "*-gcc", "*-gcc-*", "*-g++", "*-g++-*", "*-cc", "qemu-*")

WRAPPER = """#!/bin/sh
# hetgen's fast tier (tests/fast_tier.py): {name} is not run here.
printf '%s\\n' {name_quoted}" $*" >> "${{{log_env}:-/dev/null}}"
{action}
"""
REFUSE = """echo "{name}: {message}" >&2
exit 97"""


_created: list[Path] = []  # the folder this process made (and removes at the end of the run)


def wanted(deselects_cc: bool) -> bool:
    """Whether this run is the fast tier: `-m` deselects the cc tests, or HETGEN_FAST_TIER=1."""
    return deselects_cc or os.environ.get(ENV) in ("1", "record")


def recording() -> bool:
    return os.environ.get(ENV) == "record"


def _tool_names() -> set[str]:
    names = set(NAMES)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            entries = os.listdir(folder or ".")
        except OSError:
            continue
        names.update(entry for entry in entries if any(fnmatch.fnmatchcase(entry, p) for p in PATTERNS))
    return names


def install() -> Path:
    """Write the wrappers into a fresh folder, put it first on PATH (inherited by every subprocess
    and xdist worker), point the log at a file inside it and `ninja.BIN_DIR` at it; return it.
    A second call in the same process tree (an xdist worker) reuses the controller's folder with a
    log of its own, so what a worker's test ran is never blamed on a test of another worker."""
    existing = os.environ.get(BIN_ENV)
    if existing and Path(existing).is_dir():
        folder = Path(existing)
    else:
        import ninja

        folder = Path(tempfile.mkdtemp(prefix="hetgen-fast-tier-"))
        _created.append(folder)
        for name in sorted(_tool_names()):
            path = folder / name
            action = REFUSE.format(name=name, message=MESSAGE)
            real = str(Path(ninja.BIN_DIR) / "ninja") if name == "ninja" else shutil.which(name)
            if recording() and real:
                action = f'exec {shlex.quote(real)} "$@"'
            path.write_text(WRAPPER.format(name=name, name_quoted=shlex.quote(name), log_env=LOG_ENV, action=action))
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        os.environ[BIN_ENV] = str(folder)
        os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[LOG_ENV] = str(folder / f"ran-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log")
    os.environ.setdefault(ENV, "1")
    import ninja

    ninja.BIN_DIR = str(folder)
    return folder


def log_size() -> int:
    try:
        return os.stat(os.environ[LOG_ENV]).st_size
    except (KeyError, OSError):
        return 0


def ran_since(offset: int) -> list[str]:
    """The tool command lines this process's wrappers (its subprocesses' included) logged past byte
    `offset`."""
    try:
        with open(os.environ[LOG_ENV], "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace").splitlines()
    except (KeyError, OSError):
        return []


def active() -> bool:
    return os.environ.get(ENV) in ("1", "record") and LOG_ENV in os.environ


def refusing() -> bool:
    """The fast tier proper: the wrappers refuse (not recording)."""
    return os.environ.get(ENV) == "1" and LOG_ENV in os.environ


def remove() -> None:
    """Remove the wrappers' folder, in the process that made it (the workers have finished by then)."""
    while _created:
        shutil.rmtree(_created.pop(), ignore_errors=True)
