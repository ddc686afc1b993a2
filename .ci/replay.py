#!/usr/bin/env python3
"""Replay check: the generated sources of the shipped examples, before and after a change.

    python .ci/replay.py snapshot DIR      # generate (no build) every example on every shipped platform
    python .ci/replay.py diff OLD NEW      # list what differs; exit 1 if anything does

A refactor that should change nothing shows that it changed nothing: snapshot on the old commit,
snapshot on the new one, diff. Generation only (`hetgen generate`), so it needs no compiler and
runs in well under a minute per platform.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _cases() -> list[tuple[Path, Path]]:
    platforms = sorted((REPO / "platforms").glob("*.yaml"))
    models = sorted((REPO / "examples").glob("*.onnx"))
    return [(platform, model) for platform in platforms for model in models]


def snapshot(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    # build.ninja names the checkout and the output folder (it regenerates itself): the diff
    # reads them back from here and compares with both replaced by placeholders.
    (folder / _ROOTS).write_text(f"{REPO}\n{folder}\n")
    failures = 0
    for platform, model in _cases():
        out = folder / f"{platform.stem}__{model.stem}"
        result = subprocess.run(
            [sys.executable, "-m", "hetgen", "generate", str(platform), str(model), "-o", str(out)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        # A refusal is part of the replay too: its message is what the user sees.
        (folder / f"{out.name}.log").write_text(f"exit {result.returncode}\n{result.stderr}")
        status = "ok" if result.returncode == 0 else f"exit {result.returncode}"
        print(f"{out.name}: {status}", flush=True)
        failures += result.returncode not in (0, 1)
    return 1 if failures else 0


_ROOTS = "replay-roots.txt"
_NINJA_CONTINUATION = re.compile(rb" ?\$\n +")


def _files(root: Path) -> set[Path]:
    return {path.relative_to(root) for path in root.rglob("*") if path.is_file()} - {Path(_ROOTS)}


def _normalised(snapshot: Path, relative: Path) -> bytes:
    data = (snapshot / relative).read_bytes()
    repo, folder = (snapshot / _ROOTS).read_text().split("\n")[:2]
    data = data.replace(folder.encode(), b"<OUT>").replace(repo.encode(), b"<REPO>")
    return _NINJA_CONTINUATION.sub(b" ", data)  # ninja_syntax wraps lines by their length


def diff(old: Path, new: Path) -> int:
    old_files, new_files = _files(old), _files(new)
    changed = sorted(p for p in old_files & new_files if _normalised(old, p) != _normalised(new, p))
    only_old, only_new = sorted(old_files - new_files), sorted(new_files - old_files)
    for path in changed:
        print(f"changed  {path}")
    for path in only_old:
        print(f"removed  {path}")
    for path in only_new:
        print(f"added    {path}")
    total = len(changed) + len(only_old) + len(only_new)
    print(f"{total} of {len(old_files | new_files)} files differ")
    return 1 if total else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "snapshot":
        return snapshot(Path(argv[1]).resolve())
    if len(argv) == 3 and argv[0] == "diff":
        return diff(Path(argv[1]), Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
