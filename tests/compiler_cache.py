"""One compiler cache for every test build of a run (docs/testing.md, "Keeping CI within its budget").

Most of the integration and external tiers' compile time is the same translation units compiled
again: every project copies the same runtime files (hg_gemm.c, hg_threads.c, hg_vm.c, ...) and
compiles them with the same flags, and many tests build the same small model on the same platform.
So a run that selects `cc` tests puts a folder first on PATH whose compilers (`cc`, `gcc`, `clang`,
the cross compilers) are links to ccache, which runs the real compiler found on the PATH as it was
(CCACHE_PATH): also when a test links one of them into a PATH of its own, and without a second
ccache under a build whose launcher is ccache already. ccache gives back an object only for the
same preprocessed text, compiler and flags, and compiles otherwise (a link, an assembler file that
`.incbin`s its weights): what a test builds, its flags, its warnings and what runs are the same;
only repeated compiles are skipped.

The cache folder is the run's own (made by the first process, xdist's controller, and removed at
its end), so a run neither reads nor fills the machine's cache, and a CI run's time does not depend
on an earlier one. `HG_TEST_CCACHE=off` runs the compilers directly; `HG_TEST_CCACHE=DIR` keeps the
cache in DIR across runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

ENV = "HG_TEST_CCACHE"
BIN_ENV = "HG_TEST_CCACHE_BIN"  # the links' folder, made once by the first process
# The compilers a test build runs: the native ones (ninja's `cc`, tests' `gcc` and `clang`) and the
# cross compilers of the shipped kinds (the external tier's board builds).
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "aarch64-linux-gnu-gcc", "riscv64-linux-gnu-gcc", "arm-none-eabi-gcc")

_created: list[Path] = []  # what this process made (and removes at the end of the run)


def install() -> Path | None:
    """Put the caching compilers first on PATH (inherited by every subprocess and xdist worker) with
    CCACHE_DIR and CCACHE_PATH set; return their folder, or None when ccache is missing or
    HG_TEST_CCACHE=off. An xdist worker finds the controller's folder already on PATH."""
    setting = os.environ.get(ENV, "")
    ccache = shutil.which("ccache")
    if setting == "off" or ccache is None:
        return None
    existing = os.environ.get(BIN_ENV)
    if existing and Path(existing).is_dir():
        return Path(existing)
    folder = Path(tempfile.mkdtemp(prefix="hetgen-ccache-"))
    _created.append(folder)
    links = folder / "bin"
    links.mkdir()
    for name in COMPILERS:
        if shutil.which(name) is not None:  # a missing one stays missing (tests skip on shutil.which)
            (links / name).symlink_to(ccache)
    os.environ["CCACHE_DIR"] = setting or str(folder / "cache")
    os.environ["CCACHE_PATH"] = os.environ.get("PATH", "")  # where ccache finds the real compilers
    os.environ[BIN_ENV] = str(links)
    os.environ["PATH"] = f"{links}{os.pathsep}{os.environ.get('PATH', '')}"
    return links


def remove() -> None:
    """Remove the links and the run's cache, in the process that made them."""
    while _created:
        shutil.rmtree(_created.pop(), ignore_errors=True)
