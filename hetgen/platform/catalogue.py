"""The board catalogue: platform files of real SoCs and boards in `platforms/boards/` (docs/boards.md).

Each file's header says what it models, what it cannot and whether it runs under emulation, and
lists its sources; `hetgen boards` prints one line per tag from the first header line and the
emulator of the root target's toolchain.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hetgen.platform.loader import load_platform
from hetgen.templates_dir import boards_dir


@dataclasses.dataclass(frozen=True)
class Board:
    tag: str
    path: Path
    title: str  # the header's first line: the SoC or board and what it holds
    root_kind: str
    emulator: tuple[str, ...]  # the root's emulator; empty: build-only


def board_files() -> tuple[Path, ...]:
    folder = boards_dir()
    return tuple(sorted(folder.glob("*.yaml"))) if folder.is_dir() else ()


def header_lines(path: Path) -> list[str]:
    """The comment block at the top of a board file, without the leading '# '."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return lines


def board(path: Path) -> Board:
    platform = load_platform(path)
    title = []
    for line in header_lines(path):  # the first paragraph, joined
        if not line.strip():
            break
        title.append(line.strip())
    root = platform.root
    return Board(path.stem, path, " ".join(title), root.kind.name, tuple(root.toolchain.emulator))


def boards() -> tuple[Board, ...]:
    return tuple(board(path) for path in board_files())


def emulator_name(emulator: tuple[str, ...]) -> str:
    """`qemu-aarch64`, or `qemu-system-arm -M mps3-an547` where the machine matters."""
    if "-M" in emulator[:-1]:
        return f"{emulator[0]} -M {emulator[emulator.index('-M') + 1]}"
    return emulator[0]


def boards_table() -> str:
    rows = boards()
    width = max((len(b.tag) for b in rows), default=0)
    lines = []
    for b in rows:
        run = f"runs under {emulator_name(b.emulator)}" if b.emulator else "build-only"
        lines.append(f"{b.tag:<{width}}  {b.root_kind}; {run}")
        lines.append(f"{'':<{width}}  {b.title}")
    return "\n".join(lines) + "\n" if lines else ""
