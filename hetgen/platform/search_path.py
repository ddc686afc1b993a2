"""Finding a platform file from a path or a tag (`soc` → `soc.yaml` on the search path).

The environment is the CLI's to read: `default_search_path(os.environ)` turns it, and the working
directory, into an explicit tuple that travels as an argument. The shipped platforms folder, then
the board catalogue (`platforms/boards/`: real SoCs, docs/boards.md), are always searched last, so
`hetgen soc model.onnx` and `hetgen imx93 model.onnx` work anywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from hetgen.errors import PlatformError
from hetgen.platform.schema import close_match
from hetgen.templates_dir import boards_dir, platforms_dir

ENV_VAR = "HETGEN_PLATFORM_PATH"
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_SUFFIXES = (".yaml", ".yml")


def default_search_path(env: Mapping[str, str], cwd: str | os.PathLike = ".") -> tuple[str, ...]:
    """`<cwd>/platforms`, then the `HETGEN_PLATFORM_PATH` entries (os.pathsep-separated)."""
    entries = [entry for entry in env.get(ENV_VAR, "").split(os.pathsep) if entry]
    return (str(Path(cwd) / "platforms"), *entries)


def search_dirs(search_path: Sequence[str | os.PathLike] = ()) -> tuple[Path, ...]:
    """The folders a tag is looked up in, in order: `search_path`, the shipped platforms, the board
    catalogue."""
    dirs: dict[Path, Path] = {}  # resolved -> as given: ./platforms and the shipped folder may coincide
    for entry in (*search_path, platforms_dir(), boards_dir()):
        dirs.setdefault(Path(entry).resolve(), Path(entry))
    return tuple(dirs.values())


def is_tag(spec: str) -> bool:
    """A bare name (no folder, no .yaml) names a platform on the search path."""
    return bool(_TAG.match(spec)) and not spec.endswith(_SUFFIXES)


def platform_tags(search_path: Sequence[str | os.PathLike] = ()) -> tuple[str, ...]:
    """Every tag the search path offers, sorted (an earlier folder hides a later one's same name)."""
    tags = {
        path.stem
        for folder in search_dirs(search_path)
        if folder.is_dir()
        for path in folder.iterdir()
        if path.suffix in _SUFFIXES and path.is_file()
    }
    return tuple(sorted(tags))


def find_platform(spec: str | os.PathLike, search_path: Sequence[str | os.PathLike] = ()) -> Path:
    """The file `spec` names: itself if it is a path, else the first `<tag>.yaml` on the search path."""
    if isinstance(spec, os.PathLike) or not is_tag(spec):
        path = Path(spec)
        if not path.is_file():
            reason = "is a folder" if path.is_dir() else "is not a regular file" if path.exists() else "does not exist"
            raise PlatformError(f"{spec}: platform file {reason}; give a .yaml file or a platform tag")
        return path
    for folder in search_dirs(search_path):
        for suffix in _SUFFIXES:
            candidate = folder / f"{spec}{suffix}"
            if candidate.is_file():
                return candidate
    tags = platform_tags(search_path)
    searched = ", ".join(str(folder) for folder in search_dirs(search_path))
    raise PlatformError(
        f"no platform named '{spec}'{close_match(spec, tags)}; searched: {searched}; "
        f"available: {', '.join(tags) or '(none)'}"
    )
