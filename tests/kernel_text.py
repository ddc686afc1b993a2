"""The generated kernel functions of a project, read back from its grouped kernel files
(hetgen/codegen/kernel_files.py): each starts at its `/* <name> computes <label>. */` line."""

from __future__ import annotations

import re
from pathlib import Path

MARK = re.compile(r"^/\* (\w+) computes (.*)\. \*/$", re.MULTILINE)


def kernel_functions(out: Path, folder: str | None = "host") -> dict[str, tuple[str, str]]:
    """{function name: (label, its C text)} over every kernel file of `folder` (None: of every target)."""
    found = {}
    paths = (out / folder / "kernels").glob("*.c") if folder is not None else out.rglob("kernels/*.c")
    for path in sorted(paths):
        text = path.read_text()
        marks = list(MARK.finditer(text))
        for mark, after in zip(marks, [*marks[1:], None]):
            found[mark.group(1)] = (mark.group(2), text[mark.start() : after.start() if after else len(text)])
    return found


def unit_kernels(out: Path, folder: str | None = "host") -> dict[str, str]:
    """{unit label: the C text of the function that computes it}: a shared function once per unit
    its comment names ("A; B": all of them, in the small models tests build)."""
    found = {}
    for label, text in kernel_functions(out, folder).values():
        units = label.split("; ")
        assert not units[-1].startswith("and "), f"{label!r}: not every unit is named"
        found.update(dict.fromkeys(units, text))
    return found
