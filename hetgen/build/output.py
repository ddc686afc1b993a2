"""Write a generated project to disk: complete or not at all, touching only what changed.

Everything is rendered in memory first, so a user error in generation writes nothing. The project
is then written and built in a *staging* folder beside the destination and swapped in only when
the build succeeded, so a failed generation or build leaves a new destination absent and an
existing one exactly as it was (same files, bytes and timestamps).

The staging folder starts as a copy of the existing project with its timestamps (and ninja's
`.ninja_log` / `.ninja_deps`) preserved, and a file whose bytes are unchanged is not rewritten, so
ninja rebuilds only what really changed. build.ninja names every path relative to the project
folder, so the build done in staging stays valid after the swap. Files a previous generation wrote
and this one does not are removed (listed in `.hetgen-files`).

`write_project` alone updates a folder in place, file by file through atomic renames: that is what
build.ninja's regenerate rule needs, since ninja runs inside the folder and reloads build.ninja from
it (swapping the folder under a running ninja would leave it in a deleted directory).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from hetgen.codegen.project import GeneratedFile
from hetgen.errors import HetgenError

FILE_LIST = ".hetgen-files"
FAILED_SUFFIX = ".hetgen-failed"  # `<out>.hetgen-failed/`: the last failed build, beside the destination
BUILD_LOG = "build.log"  # ninja's whole output, in the failed-build folder


def _unique_sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}-{secrets.token_hex(4)}")


def _write_atomic(path: Path, content: bytes) -> None:
    """Write through a temporary file and a rename. The file is created by open(), not mkstemp,
    so it gets the usual permissions (0666 less the umask), not 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = _unique_sibling(path, "tmp")
    try:
        with open(temporary, "xb") as stream:
            stream.write(content)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def check_destination(out_dir: Path) -> None:
    """Refuse a destination that is a file, or a folder of something other than a hetgen project."""
    if out_dir.exists() and not out_dir.is_dir():
        raise HetgenError(f"{out_dir}: exists and is not a folder; give -o a folder for the generated project")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / FILE_LIST).is_file():
        raise HetgenError(
            f"{out_dir}: a non-empty folder that hetgen did not generate; hetgen will not write into it. "
            "Give -o a new or empty folder, or one hetgen generated before"
        )


def _cannot_write(out_dir: Path, error: OSError) -> HetgenError:
    return HetgenError(f"{out_dir}: cannot write the generated project: {error.strerror} ({error.filename})")


def write_project(out_dir: Path, files: tuple[GeneratedFile, ...]) -> tuple[str, ...]:
    """Write `files` under `out_dir` in place; return the relative paths whose content changed."""
    check_destination(out_dir)
    try:
        return _write(out_dir, files)
    except OSError as error:
        raise _cannot_write(out_dir, error) from None


def _write(out_dir: Path, files: tuple[GeneratedFile, ...]) -> tuple[str, ...]:
    listing = "".join(f"{f.path}\n" for f in sorted(files, key=lambda f: f.path)).encode()
    all_files = (*files, GeneratedFile(FILE_LIST, listing))
    out_dir.mkdir(parents=True, exist_ok=True)
    previous = set()
    list_file = out_dir / FILE_LIST
    if list_file.is_file():
        previous = set(list_file.read_text().splitlines())
    changed = []
    for generated in all_files:
        target = out_dir / generated.path
        if target.is_file() and target.read_bytes() == generated.content:
            continue
        _write_atomic(target, generated.content)
        if generated.path != FILE_LIST:
            changed.append(generated.path)
    for stale in sorted(previous - {f.path for f in files}):
        (out_dir / stale).unlink(missing_ok=True)
    return tuple(changed)


def failed_dir(out_dir: Path) -> Path:
    """Where the last failed build of `out_dir` is kept: `build.log` and the staged `project/`."""
    return out_dir.with_name(out_dir.name + FAILED_SUFFIX)


def stage(out_dir: Path) -> Path:
    """A new staging folder beside `out_dir` holding a copy of the existing project, timestamps kept.

    Copies, not hard links: ninja appends to `.ninja_log` in place and tools may rewrite outputs in
    place, which through a hard link would change the project we promise to leave untouched."""
    check_destination(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = _unique_sibling(out_dir, "staging")
        staging.mkdir()  # not mkdtemp: the project folder gets the usual permissions, not 0700
        if out_dir.is_dir():
            shutil.copytree(out_dir, staging, symlinks=True, copy_function=shutil.copy2, dirs_exist_ok=True)
    except OSError as error:
        raise _cannot_write(out_dir, error) from None
    return staging


def commit(staging: Path, out_dir: Path) -> None:
    """Swap the staged project in: the old folder is renamed aside, the staged one into place, then
    the old one removed. If the second rename fails the old folder is put back."""
    try:
        aside = None
        if out_dir.exists():
            aside = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.old-"))
            os.replace(out_dir, aside)  # replaces the empty placeholder folder
        try:
            os.replace(staging, out_dir)
        except BaseException:
            if aside is not None:
                os.replace(aside, out_dir)
            raise
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        shutil.rmtree(failed_dir(out_dir), ignore_errors=True)  # a stale failure would mislead
    except OSError as error:
        discard(staging)
        raise _cannot_write(out_dir, error) from None


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def keep_failed(staging: Path, out_dir: Path) -> Path:
    """Keep a failed build's staged project as `<out>.hetgen-failed/project/` (its log lies beside
    it), so the compiler's messages, which name paths inside the project, can be followed."""
    kept = failed_dir(out_dir) / "project"
    try:
        shutil.rmtree(kept, ignore_errors=True)
        kept.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, kept)
    except OSError:
        discard(staging)
    return kept
