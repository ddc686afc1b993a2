"""Write a generated project to disk: complete or not at all, touching only what changed.

Everything is rendered in memory first, so a user error can never leave a half-written folder.
A new folder is written beside the destination and renamed into place; an existing folder is
updated file by file (each through a temporary file and an atomic rename), and a file whose bytes
are unchanged keeps its timestamp, so ninja rebuilds only what really changed. Files a previous
generation wrote and this one does not are removed (listed in `.hetgen-files`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hetgen.codegen.project import GeneratedFile
from hetgen.errors import HetgenError

FILE_LIST = ".hetgen-files"


def _write_atomic(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
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


def write_project(out_dir: Path, files: tuple[GeneratedFile, ...]) -> tuple[str, ...]:
    """Write `files` under `out_dir`; return the relative paths whose content changed."""
    check_destination(out_dir)
    try:
        return _write(out_dir, files)
    except OSError as error:
        raise HetgenError(
            f"{out_dir}: cannot write the generated project: {error.strerror} ({error.filename})"
        ) from None


def _write(out_dir: Path, files: tuple[GeneratedFile, ...]) -> tuple[str, ...]:
    listing = "".join(f"{f.path}\n" for f in sorted(files, key=lambda f: f.path)).encode()
    all_files = (*files, GeneratedFile(FILE_LIST, listing))
    if not out_dir.exists():
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
        try:
            for generated in all_files:
                target = staging / generated.path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(generated.content)
            os.replace(staging, out_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return tuple(f.path for f in files)

    previous = set()
    list_file = out_dir / FILE_LIST
    if list_file.is_file():
        previous = set(list_file.read_text().split())
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
