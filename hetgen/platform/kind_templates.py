"""A kind's `templates:` folder: it must exist, and each template in it must override one of hetgen's.

A kind's folder is searched before hetgen's own templates when its kernels are rendered
(hetgen/codegen/kernels.py), so it holds replacements of shipped kernel templates under their
shipped names (`kernels/elementwise.c.j2`). A folder
that does not exist, or a template whose name hetgen never renders (a typo, a wrong subfolder),
would be silently ignored and the kind would run hetgen's defaults: both are refused at the
`templates:` line, with the near miss.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from hetgen.platform.model import SourcePos
from hetgen.platform.schema import Problems, close_match
from hetgen.templates_dir import templates_dir

TEMPLATE_SUFFIX = ".j2"
KERNELS = "kernels"
MAX_FILES = 1000  # a templates folder is a handful of files; walking a home folder is a mistake


def check_templates_folder(base: Path, folder: str, pos: SourcePos, what: str, problems: Problems) -> str | None:
    """The absolute folder, or None (with a problem at `pos`) when it is missing or names no template."""
    path = (base / folder).resolve()
    if not path.is_dir():
        state = "is not a folder" if path.exists() else "does not exist"
        problems.add(
            pos, f"{what}: '{folder}' ({path}) {state}; give a folder of kernel templates, relative to this file"
        )
        return None
    names = _template_names(path)
    if names is None:
        problems.add(
            pos, f"{what}: '{folder}' ({path}) holds more than {MAX_FILES} files and folders; is it the right folder?"
        )
        return None
    shipped = shipped_templates()
    stray = sorted(name for name in names if name not in shipped)
    for name in stray:
        problems.add(
            pos,
            f"{what}: '{folder}/{name}' overrides no template of hetgen{close_match(name, shipped)}; "
            f"a kind's templates replace shipped ones under the same name (as kernels/elementwise.c.j2)",
        )
    if not names:
        problems.add(
            pos, f"{what}: '{folder}' ({path}) holds no templates (*{TEMPLATE_SUFFIX}); give the folder that does"
        )
    return None if stray or not names else str(path)


def _template_names(root: Path) -> list[str] | None:
    """Every template under `root` by its '/'-separated relative name; None past MAX_FILES."""
    names, seen = [], 0
    for folder, folders, files in os.walk(root):  # symlinked folders are not followed: no cycles
        seen += len(files) + len(folders)
        if seen > MAX_FILES:
            return None
        names += [Path(folder, f).relative_to(root).as_posix() for f in files if f.endswith(TEMPLATE_SUFFIX)]
    return names


@lru_cache(maxsize=1)
def shipped_templates() -> frozenset[str]:
    """The templates a kind may replace: kernel templates (hetgen/codegen/kernels.py renders only
    those with the kind's folder first; a project's model and runtime files are hetgen's own)."""
    root = templates_dir()
    found = (root / KERNELS).rglob(f"*{TEMPLATE_SUFFIX}")
    return frozenset(p.relative_to(root).as_posix() for p in found if p.is_file())
