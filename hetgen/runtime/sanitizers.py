"""Sanitizer builds (`--sanitize address,undefined`) and the runtime they need in the process.

AddressSanitizer (and ThreadSanitizer, LeakSanitizer) must be the first library loaded into a
process; dlopen-ing an instrumented library into a Python that started without it aborts the whole
process. So the loader refuses such a build with the exact command to run, and `hetgen verify` runs
itself again in a child process with the runtime preloaded.
"""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Mapping
from pathlib import Path

from hetgen.build.toolchain import NATIVE_CC  # the compiler of native builds
from hetgen.codegen.manifest import Manifest, read_manifest
from hetgen.errors import HetgenError

# sanitizer -> (its runtime library, a symbol that is present once that runtime is loaded)
PRELOADED_RUNTIMES = {
    "address": ("libasan.so", "__asan_init"),
    "thread": ("libtsan.so", "__tsan_init"),
    "leak": ("liblsan.so", "__lsan_init"),
}
# Python itself leaks by a sanitizer's standards and onnxruntime is not instrumented: report only
# errors in the generated code.
SANITIZER_OPTIONS = {
    "ASAN_OPTIONS": "detect_leaks=0",
    "LSAN_OPTIONS": "detect_leaks=0",
    "UBSAN_OPTIONS": "print_stacktrace=1",
}
CHILD_MARK = "HETGEN_SANITIZER_CHILD"


def sanitizers(manifest: Manifest | None) -> tuple[str, ...]:
    return manifest.sanitize if manifest is not None else ()


def missing_runtimes(manifest: Manifest | None) -> tuple[str, ...]:
    """The runtime libraries the build needs that this process has not loaded."""
    process = ctypes.CDLL(None)
    needed = [PRELOADED_RUNTIMES[s] for s in sanitizers(manifest) if s in PRELOADED_RUNTIMES]
    return tuple(library for library, symbol in needed if not hasattr(process, symbol))


def _manifest(out_dir: Path) -> Manifest | None:
    try:
        return read_manifest(out_dir)
    except HetgenError:
        return None  # the loader reports a missing or broken project


def needs_preload(out_dir: Path) -> bool:
    return bool(missing_runtimes(_manifest(out_dir)))


def runtime_path(library: str) -> str | None:
    """Where the native compiler's sanitizer runtime lives (`cc -print-file-name=libasan.so`)."""
    try:
        found = subprocess.run(
            [NATIVE_CC, f"-print-file-name={library}"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return None
    return found if found and Path(found).is_absolute() and Path(found).exists() else None


def preload_environment(out_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` plus LD_PRELOAD of the build's sanitizer runtimes and quiet-at-exit options."""
    manifest = _manifest(out_dir)
    if environ.get(CHILD_MARK):
        raise HetgenError(_load_message(out_dir, manifest))  # preloading did not help: do not loop
    paths = []
    for library in missing_runtimes(manifest):
        path = runtime_path(library)
        if path is None:
            raise HetgenError(
                f"{out_dir}: built with -fsanitize={','.join(sanitizers(manifest))}, but {NATIVE_CC} "
                f"-print-file-name={library} finds no {library}; install the compiler's sanitizer runtime "
                "or rebuild without --sanitize"
            )
        paths.append(path)
    environment = dict(environ)
    environment["LD_PRELOAD"] = " ".join([*paths, environ.get("LD_PRELOAD", "")]).strip()
    for name, value in SANITIZER_OPTIONS.items():
        environment[name] = f"{value}:{environ[name]}" if environ.get(name) else value  # the user's win
    environment[CHILD_MARK] = "1"
    return environment


def _load_message(out_dir: Path, manifest: Manifest | None) -> str:
    missing = missing_runtimes(manifest)
    preload = " ".join(f"$({NATIVE_CC} -print-file-name={library})" for library in missing)
    return (
        f"{out_dir}: built with -fsanitize={','.join(sanitizers(manifest))}, whose runtime ({', '.join(missing)}) "
        f"must be loaded before Python starts; `hetgen verify {out_dir}` does that for you, or run Python as "
        f"LD_PRELOAD={preload} ASAN_OPTIONS=detect_leaks=0 python ... (rebuild without --sanitize to time it)"
    )


def check_runtime_loaded(out_dir: Path, manifest: Manifest) -> None:
    """Refuse, with the command to run, to dlopen a sanitizer build this process cannot host."""
    if missing_runtimes(manifest):
        raise HetgenError(_load_message(out_dir, manifest))
