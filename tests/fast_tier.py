"""The tiers below the full suite are honest (docs/testing.md): each runs with a folder first on PATH
whose tools that tier must not need fail loudly, so a test that uses one but lacks its marker fails
there instead of quietly making that tier slow or dependent on what is installed.

- The fast tier (`-m "not cc"`): compilers, ninja, cross toolchains, qemu and chromium refuse.
- The integration tier (`-m "not external"`): the native compiler and ninja run; cross toolchains
  (`*-linux-gnu-*`, `arm-none-eabi-*`, clang with a `--target` of another machine), qemu and chromium
  refuse.

Two ways a test could reach a real tool past PATH are closed too: hetgen runs the `ninja` package's
binary by its absolute path (`ninja.BIN_DIR`, hetgen/build/ninja_file.py), so in the fast tier that
attribute points at the wrappers' folder in this process; and a test that expects a build to fail
would still pass on a wrapper's refusal, so every refusing wrapper also appends its command line to
a log, and a test during which the log grew fails whatever it asserted (conftest.py).
"""

from __future__ import annotations

import fnmatch
import os
import platform
import shlex
import shutil
import stat
import tempfile
from pathlib import Path

# "1" (or "fast"): the fast tier's wrappers whatever -m selects; "integration": the integration tier's;
# "record": see RECORD_ENV. Set by conftest.py from -m when unset.
ENV = "HETGEN_FAST_TIER"
FAST, INTEGRATION, RECORD = "fast", "integration", "record"
# With HETGEN_FAST_TIER=record every wrapper logs and then runs the real tool, and each test phase is
# written to this file with the tools it ran: how the existing tests were classified, in one run.
RECORD_ENV = "HETGEN_FAST_TIER_RECORD"
LOG_ENV = "HETGEN_FAST_TIER_LOG"  # where the wrappers write what they were asked to run
BIN_ENV = "HETGEN_FAST_TIER_BIN"  # the wrappers' folder, made once by the first process (xdist's controller)
MESSAGES = {
    FAST: "the fast tier ran a compiler: mark this test cc (@pytest.mark.cc, docs/testing.md)",
    INTEGRATION: (
        "the integration tier ran a cross compiler, qemu or chromium: "
        "mark this test external (@pytest.mark.external, docs/testing.md)"
    ),
}
MESSAGE = MESSAGES[FAST]

# The fast tier's tools. Always wrapped, installed or not (a test that finds one with shutil.which
# must not skip quietly); then every program on PATH whose name matches one of PATTERNS.
NAMES = ("cc", "c++", "gcc", "g++", "clang", "clang++", "cpp", "tcc", "ccache", "sccache", "distcc", "ninja")
PATTERNS = ("gcc-*", "g++-*", "clang-*", "clang++-*", "*-gcc", "*-gcc-*", "*-g++", "*-g++-*", "*-cc")
# The external tier's tools (refused by both other tiers): the cross toolchains the shipped kinds name
# (compiler and archiver: hetgen's generation checks both are on PATH unless --native-only), the
# emulators and the browser, always; then the programs on PATH that match EXTERNAL_PATTERNS. A tool
# of this machine's own triplet (x86_64-linux-gnu-gcc on x86_64) is its native compiler, not a cross one.
EXTERNAL_NAMES = ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-ar", "riscv64-linux-gnu-gcc", "riscv64-linux-gnu-ar",
                  "arm-none-eabi-gcc", "arm-none-eabi-ar", "qemu-aarch64", "qemu-riscv64", "qemu-arm",
                  "qemu-system-arm", "chromium", "chromium-browser", "google-chrome")  # fmt: skip
EXTERNAL_PATTERNS = ("*-linux-gnu-*", "*-linux-gnueabi*-*", "arm-none-eabi-*", "*-elf-*", "qemu-*")
# clang is the integration tier's native compiler, and an external one given another machine's target.
CLANGS = ("clang", "clang++", "clang-[0-9]*", "clang++-[0-9]*")

WRAPPER = """#!/bin/sh
# hetgen's {tier} tier (tests/fast_tier.py): {name} is not run here.
{action}
"""
LOG = """printf '%s\\n' {name_quoted}" $*" >> "${{{log_env}:-/dev/null}}\""""
REFUSE = """{log}
echo "{name}: {message}" >&2
exit 97"""
# clang in the integration tier: runs unless a --target (or -target) names another machine.
CLANG_CROSS = """cross= previous=
for argument in "$@"; do
  case "$previous" in -target) case "$argument" in {host}-*|{host}) ;; *) cross=1 ;; esac ;; esac
  case "$argument" in --target=*) case "${{argument#--target=}}" in {host}-*|{host}) ;; *) cross=1 ;; esac ;; esac
  previous=$argument
done
if [ -n "$cross" ]; then
{refuse}
fi
exec {real} "$@\""""


_created: list[Path] = []  # the folder this process made (and removes at the end of the run)


def selectable(markexpr: str, fixed: dict[str, bool]) -> bool:
    """Whether `-m markexpr` selects some test whose markers are `fixed` (name: present or not), the
    markers it does not name being any (a search over the names the expression asks about)."""
    from _pytest.mark.expression import Expression

    expression = Expression.compile(markexpr)

    def search(assumed: dict[str, bool]) -> bool:
        asked: list[str] = []

        def matcher(name: str, /, **kwargs) -> bool:
            if name in fixed:
                return fixed[name]
            if name not in assumed:
                asked.append(name)
            return assumed.get(name, False)

        if expression.evaluate(matcher):
            return True
        if not asked:
            return False
        name = asked[0]
        return search({**assumed, name: False}) or search({**assumed, name: True})

    return search({})


def tier_of_markexpr(markexpr: str) -> str | None:
    """The tier `-m markexpr` runs: FAST when it selects no `cc` test (`external` implies `cc`, so
    none of those either), INTEGRATION when it selects no `external` test, else None (the full suite,
    real tools)."""
    if not markexpr:
        return None
    if not selectable(markexpr, {"cc": True}):
        return FAST
    if not selectable(markexpr, {"cc": True, "external": True}):
        return INTEGRATION
    return None


def tier(from_markexpr: str | None) -> str | None:
    """Which wrappers this run gets: HETGEN_FAST_TIER when set, else what `-m` leaves out (conftest.py)."""
    value = os.environ.get(ENV)
    if value in ("1", FAST):
        return FAST
    if value in (INTEGRATION, RECORD):
        return value
    return from_markexpr


def recording() -> bool:
    return os.environ.get(ENV) == RECORD


def host_machine() -> str:
    return platform.machine()


def _native(name: str) -> bool:
    """A tool of this machine's own triplet (x86_64-linux-gnu-gcc): the native toolchain."""
    return name.startswith(f"{host_machine()}-")


def _on_path(patterns) -> set[str]:
    found = set()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            entries = os.listdir(folder or ".")
        except OSError:
            continue
        found.update(entry for entry in entries if any(fnmatch.fnmatchcase(entry, p) for p in patterns))
    return found


def external_names() -> set[str]:
    return {name for name in set(EXTERNAL_NAMES) | _on_path(EXTERNAL_PATTERNS) if not _native(name)}


def is_external(command_line: str) -> bool:
    """Whether a logged command line (`tool args...`) ran a tool of the external tier."""
    words = command_line.split()
    if not words:
        return False
    name = words[0]
    if any(fnmatch.fnmatchcase(name, p) for p in (*EXTERNAL_PATTERNS, *EXTERNAL_NAMES)) and not _native(name):
        return True
    if any(fnmatch.fnmatchcase(name, p) for p in CLANGS):
        targets = [w[len("--target=") :] for w in words if w.startswith("--target=")]
        targets += [b for a, b in zip(words, words[1:]) if a == "-target"]
        return any(t != host_machine() and not t.startswith(f"{host_machine()}-") for t in targets)
    return False


def _wrappers(which: str) -> dict[str, str]:
    """{tool name: the wrapper's body} for tier `which`."""
    refusing = which != RECORD
    message = MESSAGES.get(which, "")
    bodies = {}

    def body(name: str, real: str | None, refuse: bool) -> str:
        log = LOG.format(name_quoted=shlex.quote(name), log_env=LOG_ENV)
        if refuse or not real:
            return REFUSE.format(log=log, name=name, message=message or MESSAGES[FAST])
        return f'{log}\nexec {shlex.quote(real)} "$@"'

    def real_of(name: str) -> str | None:
        if name == "ninja":
            import ninja

            return str(Path(ninja.BIN_DIR) / "ninja")
        return shutil.which(name)

    external = external_names()
    if which in (FAST, RECORD):
        for name in sorted(set(NAMES) | _on_path(PATTERNS) | external):
            bodies[name] = body(name, real_of(name), refusing)
        return bodies
    for name in sorted(external):  # INTEGRATION
        bodies[name] = body(name, real_of(name), True)
    for name in sorted(_on_path(CLANGS)):
        real = real_of(name)
        if real:
            log = LOG.format(name_quoted=shlex.quote(name), log_env=LOG_ENV)
            refuse = REFUSE.format(log=log, name=name, message=message)
            bodies[name] = CLANG_CROSS.format(host=host_machine(), refuse=refuse, real=shlex.quote(real))
    return bodies


def install(which: str) -> Path:
    """Write tier `which`'s wrappers into a fresh folder, put it first on PATH (inherited by every
    subprocess and xdist worker), point the log at a file inside it and, in the fast tier (and when
    recording), `ninja.BIN_DIR` at it; return it. A second call in the same process tree (an xdist
    worker) reuses the controller's folder with a log of its own, so what a worker's test ran is never
    blamed on a test of another worker."""
    existing = os.environ.get(BIN_ENV)
    if existing and Path(existing).is_dir():
        folder = Path(existing)
    else:
        folder = Path(tempfile.mkdtemp(prefix="hetgen-fast-tier-"))
        _created.append(folder)
        for name, action in _wrappers(which).items():
            path = folder / name
            path.write_text(WRAPPER.format(tier=which, name=name, action=action))
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        os.environ[BIN_ENV] = str(folder)
        os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[LOG_ENV] = str(folder / f"ran-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log")
    if os.environ.get(ENV) not in ("1", FAST, INTEGRATION, RECORD):
        os.environ[ENV] = which
    if which in (FAST, RECORD):
        import ninja

        ninja.BIN_DIR = str(folder)
    return folder


def current() -> str | None:
    """The tier whose wrappers this process runs with (None: no wrappers)."""
    return tier(None) if LOG_ENV in os.environ else None


def message() -> str:
    return MESSAGES.get(current() or FAST, MESSAGE)


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
    return current() is not None


def refusing() -> str | None:
    """The tier whose wrappers refuse in this run (FAST or INTEGRATION); None when none do."""
    which = current()
    return which if which in (FAST, INTEGRATION) else None


def remove() -> None:
    """Remove the wrappers' folder, in the process that made it (the workers have finished by then)."""
    while _created:
        shutil.rmtree(_created.pop(), ignore_errors=True)
