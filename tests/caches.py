"""The tests' cache folder, and the compiled bytecode of every Python process of a test run kept
there, outside the source tree (docs/testing.md, "Keeping CI within its budget").

The folder is HG_TEST_CACHE (default ~/.cache/hetgen-tests; "off": no cache): the ONNX node cases
(tests/conformance.py) and the bytecode below live there.

Where PYTHONDONTWRITEBYTECODE is set (this shared machine sets it), Python compiles every module of
hetgen and every test module from source in every process: each xdist worker at collection (6 s of
CPU of its 8) and each `python -m hetgen` a test runs as a command (0.5 s of its 1.7). So a run whose
Python would write no bytecode writes it instead to a cache folder of its own (PYTHONPYCACHEPREFIX,
inherited by the workers and every subprocess): the source tree stays as clean as the variable
keeps it, and the first process to import a module compiles it for the others and for later runs
(`pycache` in the tests' cache folder). A machine that writes bytecode already (no variable) is left
as it is: its `__pycache__` folders do the same.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CACHE_ENV = "HG_TEST_CACHE"  # the folder of the tests' caches; "off": none


def folder() -> Path | None:
    """The tests' cache folder (HG_TEST_CACHE; default ~/.cache/hetgen-tests), or None for "off"."""
    setting = os.environ.get(CACHE_ENV, "")
    if setting == "off":
        return None
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hetgen-tests"


def install_bytecode_cache() -> Path | None:
    """Write bytecode under the cache folder from now on, in this process and the ones it starts;
    return the folder, or None where Python writes bytecode already or the cache is off."""
    cache = folder()
    if not sys.dont_write_bytecode or cache is None:
        return None
    prefix = Path(sys.pycache_prefix) if sys.pycache_prefix else cache / "pycache"
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.pycache_prefix = str(prefix)  # read at each import: pytest's rewritten test modules included
    sys.dont_write_bytecode = False
    return prefix
