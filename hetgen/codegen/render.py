"""Jinja environment shared by all code generation: sandboxed, strict, whitespace-tidy, deterministic."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jinja2.exceptions import SecurityError

from hetgen.codegen.sandbox import (
    TemplateRefused,
    TemplateSandbox,
    Where,
    bounded_printed,
    budgeted,
    describe,
    is_template_failure,
    refusal_site,
)
from hetgen.errors import HetgenError, InternalError
from hetgen.names import is_printable_ascii
from hetgen.ops._common import float_literal
from hetgen.templates_dir import templates_dir

INDENT = "    "  # one level of the generated C's indentation
# The deepest nest `loop_nest` lays out: a kernel nests at most a loop per dimension of its widest
# tensor (HG_MAX_RANK, 8) and a few of its own; a kind's template may not ask for a gigabyte of spaces.
MAX_LOOP_LEVELS = 64


@dataclass(frozen=True)
class LoopHeader:
    indent: str
    var: str
    extent: int


@dataclass(frozen=True)
class LoopNest:
    """A nest of loops (each with `var` and `extent`) laid out from indentation level `depth`: the
    `for` headers with their indentation, the closing braces' indentation (innermost first), and the
    body's indentation and level (where a nest inside this one starts)."""

    headers: tuple[LoopHeader, ...]
    closers: tuple[str, ...]
    body: str
    level: int


def loop_nest(loops, depth: int) -> LoopNest:
    """The `loop_nest` filter: `loops` laid out from indentation level `depth` (kernels/_loops.j2)."""
    if not isinstance(depth, int) or isinstance(depth, bool) or not 0 <= depth <= MAX_LOOP_LEVELS:
        raise TemplateRefused(f"loop_nest's depth must be an integer from 0 to {MAX_LOOP_LEVELS}, not {depth!r}")
    loops = tuple(itertools.islice(loops, MAX_LOOP_LEVELS + 1))
    if depth + len(loops) > MAX_LOOP_LEVELS:
        raise TemplateRefused(f"loop_nest would nest more than {MAX_LOOP_LEVELS} levels")
    level = depth + len(loops)
    headers = tuple(
        LoopHeader(INDENT * (depth + i), _field(loop, "var"), _field(loop, "extent")) for i, loop in enumerate(loops)
    )
    closers = tuple(INDENT * (level - 1 - i) for i in range(len(loops)))
    return LoopNest(headers, closers, INDENT * level, level)


def _field(item, name: str):
    return item[name] if isinstance(item, Mapping) else getattr(item, name)


def _printed(value):
    """Every value a template prints: one that is not printable ASCII (a newline aside) is a name that
    skipped `hetgen.names`, and a hetgen bug, caught here before it reaches C."""
    if isinstance(value, str) and not is_printable_ascii(value.replace("\n", "")):
        raise InternalError(f"a template printed {value[:80]!r}: names must be escaped by hetgen.names")
    return value


@cache
def environment(extra_dirs: tuple[str, ...] = ()) -> TemplateSandbox:
    """Templates are searched in `extra_dirs` first (a kind's own templates), then hetgen's. All
    render in the sandbox; with a kind's folder from outside hetgen's, under a budget too
    (hetgen/codegen/sandbox.py). The folders of hetgen's own kinds (the npu's, templates/vecunit/)
    are hetgen's code, as trusted as the rest of templates/."""
    search = [*extra_dirs, str(templates_dir())]
    own = templates_dir().resolve()
    bounded = any(not Path(folder).resolve().is_relative_to(own) for folder in extra_dirs)
    finalize = _bounded_printed if bounded else _printed
    return TemplateSandbox(search, bounded, {"cfloat": float_literal, "loop_nest": loop_nest}, finalize)


def forget_templates() -> None:
    """Drop the compiled templates. Jinja re-checks a cached template's own file only, so a template
    added since to a folder earlier on the search path (a kind's override) would go unseen by a
    long-lived process (`hetgen.compile` called again); each generation starts afresh."""
    environment.cache_clear()


def _bounded_printed(value):
    bounded_printed(value)
    if isinstance(value, str) and not is_printable_ascii(value.replace("\n", "")):
        raise TemplateRefused(f"printed {value[:80]!r}: generated C is printable ASCII")
    return value


def render(template: str, extra_dirs: tuple[str, ...] = (), *, origin: str = "", **context) -> str:
    """`template` rendered with `context`. A template of a kind's folder (`extra_dirs`, which
    `origin` names for messages: the kind and the platform file that declared it) that fails or is
    refused is a HetgenError at its file and line."""
    extra_dirs = tuple(extra_dirs)
    env = environment(extra_dirs)
    if not env.bounded:
        return env.get_template(template).render(**context)
    try:
        with budgeted() as budget:
            parts = []
            for part in env.get_template(template).generate(**context):
                budget.charge(len(part))
                parts.append(part)
            return "".join(parts)
    except HetgenError:
        raise
    except Exception as error:
        site = refusal_site(error, extra_dirs) if is_template_failure(error) else None
        if site is None:  # raised in hetgen's own templates or code: a hetgen bug, not the kind's
            raise
        raise _refused(error, site, origin) from None


def _refused(error: BaseException, site: Where, origin: str) -> HetgenError:
    where = f"{site.file}:{site.line}" if site.line else site.file
    source = f" (a template of {origin})" if origin else ""
    verdict = "template refused" if isinstance(error, SecurityError) else "template error"
    return HetgenError(f"{where}: {verdict}{source}: {describe(error)}")


def template_path(template: str, extra_dirs: tuple[str, ...] = ()) -> Path:  # noqa: D103
    for folder in (*extra_dirs, str(templates_dir())):
        candidate = Path(folder) / template
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(template)
