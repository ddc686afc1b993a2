#!/usr/bin/env python3
"""Replay check: do two revisions of hetgen generate the same projects for the shipped examples?

A refactor that should change nothing proves it here. Every shipped model (examples/*.onnx) is
generated (not built) for every shipped platform (platforms/*.yaml) by this checkout and by another
revision (a temporary git worktree), and the two sets of files are compared byte for byte, after
the output folder's own absolute path is replaced by a placeholder.

    python .ci/replay.py                   # this checkout against HEAD (uncommitted changes)
    python .ci/replay.py --against main~3  # against any revision
    python .ci/replay.py --diff            # also print a unified diff of each changed text file
    python .ci/replay.py --all             # every example on every platform (see cases())

Exit status: 0 when nothing changed, 1 when something did (listed), 2 when a side failed to generate.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = b"@OUT@"
TREE_PLACEHOLDER = b"@TREE@"  # build.ninja's regenerate rule names the hetgen tree that wrote it


# The two general examples replay on every platform; the microcontroller models (MLPerf Tiny's four,
# float and int8) on the host and the microcontroller platforms they are made for. The full product
# (`--all`) is five times the generations for little more coverage: tests/test_one_fusion.py places
# every example on every platform.
EVERYWHERE = frozenset({"resnet_tiny", "transformer_tiny"})
MICRO_PLATFORMS = frozenset({"host", "mcu", "mcu-m7", "mcu-m55", "mcu-npu"})


def cases(tree: Path, everything: bool = False) -> list[tuple[Path, Path]]:
    models = sorted((tree / "examples").glob("*.onnx"))
    platforms = sorted((tree / "platforms").glob("*.yaml"))
    return [
        (platform, model)
        for platform in platforms
        for model in models
        if everything or model.stem in EVERYWHERE or platform.stem in MICRO_PLATFORMS
    ]


def generate(tree: Path, into: Path, everything: bool = False) -> dict[str, bytes]:
    """Every case's files, keyed `platform/model/relative path`; a case that fails is recorded as such."""
    files: dict[str, bytes] = {}
    env = dict(os.environ, PYTHONPATH=str(tree))
    for platform, model in cases(tree, everything):
        key = f"{platform.stem}/{model.stem}"
        out = into / key
        result = subprocess.run(
            [sys.executable, "-m", "hetgen", "generate", str(platform), str(model), "-o", str(out)],
            cwd=tree,
            env=env,
            capture_output=True,
        )
        if result.returncode != 0:
            # Refusals are part of the behaviour too (e.g. a platform that cannot hold a model).
            # (normalised like the files: the message names the platform file, inside the tree)
            files[f"{key}/<exit status>"] = f"{result.returncode}\n".encode() + normalise(result.stderr, out, tree)
            continue
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            content = path.read_bytes().replace(str(out.resolve()).encode(), PLACEHOLDER)
            files[f"{key}/{path.relative_to(out)}"] = normalise(content, out, tree)
    return files


def normalise(content: bytes, out: Path, tree: Path) -> bytes:
    """Replace what differs only because the two trees live in different folders."""
    content = content.replace(sys.executable.encode(), b"@PYTHON@")
    for folder in (out.resolve(), out):
        content = content.replace(str(folder).encode(), PLACEHOLDER)
    content = content.replace(str(tree.resolve()).encode(), TREE_PLACEHOLDER)
    # ninja_syntax wraps long lines at a width, so paths of other lengths wrap elsewhere.
    return re.sub(rb" \$\n +", b" ", content)


def other_tree(revision: str, into: Path) -> Path:
    tree = into / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), revision], cwd=ROOT, check=True)
    return tree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="HEAD", help="revision to compare with (default: HEAD)")
    parser.add_argument("--diff", action="store_true", help="print a unified diff of changed text files")
    parser.add_argument("--all", action="store_true", help="every example on every platform")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetgen-replay-") as scratch:
        scratch_path = Path(scratch)
        tree = other_tree(args.against, scratch_path)
        try:
            before = generate(tree, scratch_path / "before", args.all)
            after = generate(ROOT, scratch_path / "after", args.all)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    only_before = sorted(before.keys() - after.keys())
    only_after = sorted(after.keys() - before.keys())
    for key in changed:
        print(f"changed   {key}")
        if args.diff:
            try:
                old, new = before[key].decode().splitlines(), after[key].decode().splitlines()
            except UnicodeDecodeError:
                continue
            print("\n".join(f"    {line}" for line in difflib.unified_diff(old, new, lineterm="", n=1)))
    for key in only_before:
        print(f"removed   {key}")
    for key in only_after:
        print(f"added     {key}")
    total = len(before.keys() | after.keys())
    print(
        f"replay against {args.against}: {total} files, {len(changed)} changed, "
        f"{len(only_before)} removed, {len(only_after)} added"
    )
    return 1 if changed or only_before or only_after else 0


if __name__ == "__main__":
    raise SystemExit(main())
