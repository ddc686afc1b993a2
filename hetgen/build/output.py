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

One writer at a time: `writing(out_dir)` holds an exclusive lock on `<out>.hetgen-lock` beside the
destination for the whole generate, build and swap, and a second hetgen on the same `-o` stops at
once with "another hetgen is writing DIR (pid N)" rather than waiting (a user who started two
runs wants to know, and a silent wait behind a long build looks like a hang). Holding the lock, a
writer knows any staging or set-aside folder of this destination, and any temporary file inside it,
belongs to a run that died (killed, power lost) and removes it; a project set aside by a swap that
died half-way is put back first.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks, one writer per -o is then the user's to ensure
    fcntl = None

from hetgen.codegen.project import GeneratedFile
from hetgen.errors import HetgenError

FILE_LIST = ".hetgen-files"
FAILED_SUFFIX = ".hetgen-failed"  # `<out>.hetgen-failed/`: the last failed build, beside the destination
BUILD_LOG = "build.log"  # ninja's whole output, in the failed-build folder
LOCK_SUFFIX = ".hetgen-lock"  # `<out>.hetgen-lock`: held by the one hetgen writing `<out>`


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
    # shutil.Error (copytree's) is an OSError without strerror or filename: its text says it all.
    reason = error.strerror or " ".join(str(error).split())[:300] or type(error).__name__
    where = f" ({error.filename})" if error.filename else ""
    return HetgenError(f"{out_dir}: cannot write the generated project: {reason}{where}")


def lock_path(out_dir: Path) -> Path:
    return out_dir.with_name(out_dir.name + LOCK_SUFFIX)


@contextmanager
def writing(out_dir: Path) -> Iterator[None]:
    """Hold the lock of `out_dir` (an absolute path) while the body writes it; refuse at once when
    another hetgen holds it. The lock file is removed on the way out, while still held: a run that
    opened the old file meanwhile sees, once it gets the lock, that the path names another file (or
    none) and tries again."""
    if fcntl is None or not out_dir.name:
        yield
        return
    path = lock_path(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        descriptor = _acquire(path, out_dir)
    except OSError as error:
        raise _cannot_write(out_dir, error) from None
    try:
        _remove_stale(out_dir)
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(descriptor)  # releases the lock


def _acquire(path: Path, out_dir: Path) -> int:
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
            os.close(descriptor)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            pid = f" (pid {holder})" if holder.isdigit() else ""
            raise HetgenError(
                f"{out_dir}: another hetgen is writing this project{pid}; wait for it to finish, "
                "or give this run another -o"
            ) from None
        try:
            same = os.path.samestat(os.fstat(descriptor), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
            return descriptor
        os.close(descriptor)  # the holder removed the file we opened as it finished: take the new one


_TEMPORARY = re.compile(r"\..+\.tmp-\d+-[0-9a-f]{8}")  # what `_write_atomic` writes before its rename


def _sibling_pattern(out_dir: Path) -> re.Pattern:
    """The hidden siblings a run of `out_dir` makes: staging folders and the set-aside old project."""
    return re.compile(rf"\.{re.escape(out_dir.name)}\.(staging-\d+-[0-9a-f]{{8}}|old-[A-Za-z0-9_]{{8}})")


def _remove_stale(out_dir: Path) -> None:
    """With the lock held, every staging or set-aside sibling of `out_dir` is a dead run's. A swap
    that died between its two renames left the project only set aside: it is put back."""
    pattern = _sibling_pattern(out_dir)
    stale = sorted(p for p in out_dir.parent.iterdir() if pattern.fullmatch(p.name) and p.is_dir())
    set_aside = [p for p in stale if ".old-" in p.name]
    if set_aside and not out_dir.exists():
        newest = max(set_aside, key=lambda p: p.stat().st_mtime)
        os.replace(newest, out_dir)
        stale.remove(newest)
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    if out_dir.is_dir():  # an in-place update (build.ninja's regenerate rule) killed mid-write
        for folder, _, names in os.walk(out_dir):
            for name in names:
                if _TEMPORARY.fullmatch(name):
                    Path(folder, name).unlink(missing_ok=True)


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
