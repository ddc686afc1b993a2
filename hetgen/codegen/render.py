"""Jinja environment shared by all code generation: strict, whitespace-tidy, deterministic."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

from hetgen.errors import InternalError
from hetgen.names import is_printable_ascii
from hetgen.templates_dir import templates_dir


def _c_float(value: float) -> str:
    """A float literal that round-trips exactly through the C compiler."""
    value = float(value)
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = repr(value)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f"


def _printed(value):
    """Every value a template prints: one that is not printable ASCII (a newline aside) is a name that
    skipped `hetgen.names`, and a hetgen bug, caught here before it reaches C."""
    if isinstance(value, str) and not is_printable_ascii(value.replace("\n", "")):
        raise InternalError(f"a template printed {value[:80]!r}: names must be escaped by hetgen.names")
    return value


@cache
def environment(extra_dirs: tuple[str, ...] = ()) -> jinja2.Environment:
    """Templates are searched in `extra_dirs` first (a kind's own templates), then hetgen's."""
    search = [*extra_dirs, str(templates_dir())]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(search),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=_printed,
    )
    env.filters["cfloat"] = _c_float
    return env


def render(template: str, extra_dirs: tuple[str, ...] = (), **context) -> str:
    return environment(tuple(extra_dirs)).get_template(template).render(**context)


def template_path(template: str, extra_dirs: tuple[str, ...] = ()) -> Path:  # noqa: D103
    for folder in (*extra_dirs, str(templates_dir())):
        candidate = Path(folder) / template
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(template)
