"""Where templates and shipped platforms live: beside the source tree, or inside the wheel."""

from __future__ import annotations

from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    installed = Path(__file__).resolve().parent / name  # mapped into the wheel by pyproject.toml
    if installed.is_dir():
        return installed
    return _SOURCE_ROOT / name


def templates_dir() -> Path:
    return _data_dir("templates")


def platforms_dir() -> Path:
    return _data_dir("platforms")


def boards_dir() -> Path:
    """The board catalogue: one platform file per real SoC or board (docs/boards.md)."""
    return platforms_dir() / "boards"
