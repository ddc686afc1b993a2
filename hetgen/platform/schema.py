"""Closed-schema helpers: read typed values out of positioned YAML and collect every problem.

Readers never raise on bad input; they record a `Diagnostic` and return None, so one pass over a
file reports all of its problems at once (the edtlib habit). Each message says what is wrong and
what would be accepted.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from hetgen.errors import Diagnostic, PlatformError
from hetgen.names import C_KEYWORDS, MAX_IDENTIFIER
from hetgen.platform.model import SourcePos
from hetgen.platform.yaml_positions import YMap, YNode, YScalar, YSeq, describe

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
ATTRIBUTE_TYPES = ("int", "float", "str", "bool", "list[str]")
# The largest number a platform file may give: no size, rate or figure comes near it, and every
# later step (float(), C literals, cost arithmetic) stays exact and fast below it.
MAX_NUMBER = 1e30


class Problems:
    """Diagnostics collected over one load; raised together, in file order, by `raise_if_any`."""

    def __init__(self) -> None:
        self._found: dict[Diagnostic, None] = {}  # a dict keeps the first report of a repeat only

    def add(self, pos: SourcePos, message: str) -> None:
        self._found[Diagnostic(pos.file, pos.line, pos.column, message)] = None

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        self._found.update(dict.fromkeys(diagnostics))

    def __len__(self) -> int:
        return len(self._found)

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return tuple(sorted(self._found, key=lambda d: (d.file, d.line, d.column)))

    def raise_if_any(self) -> None:
        found = self.diagnostics
        if not found:
            return
        files = sorted({d.file for d in found})
        summary = "" if len(found) == 1 else f"{len(found)} problems in {', '.join(files)}"
        raise PlatformError(summary, found)


def is_c_identifier(name: str) -> bool:
    """A name that is used as is in C and in file names: a C identifier of at most 63 characters."""
    return bool(_C_IDENTIFIER.match(name)) and name not in C_KEYWORDS and len(name) <= MAX_IDENTIFIER


def close_match(word: str, accepted: Iterable[str]) -> str:
    """`" (did you mean 'x'?)"` for a near miss, else ""."""
    match = difflib.get_close_matches(word, list(accepted), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "(none)"


def check_keys(
    node: YMap,
    accepted: Iterable[str],
    what: str,
    problems: Problems,
    legacy: Mapping[str, str] | None = None,
    listed: Iterable[str] | None = None,
) -> None:
    """Report every key of `node` that is not in `accepted`, suggesting the closest accepted one.

    `listed` (default: `accepted`) is what the message offers; it may leave out keys that are
    known but wrong in this place, which get their own, more precise, message elsewhere.
    """
    accepted = tuple(accepted)
    listed = tuple(listed) if listed is not None else accepted
    legacy = legacy or {}
    for key, _ in node.entries:
        if key.value in accepted:
            continue
        if key.value in legacy:
            problems.add(key.pos, f"'{key.value}' is no longer accepted in {what}; write '{legacy[key.value]}'")
            continue
        hint = close_match(key.value, listed)
        problems.add(key.pos, f"unknown key '{key.value}' in {what}{hint}; accepted: {listing(listed)}")


def expect_map(node: YNode | None, what: str, problems: Problems, pos: SourcePos) -> YMap | None:
    if node is None:
        problems.add(pos, f"{what} is missing; expected a mapping")
        return None
    if isinstance(node, YMap):
        return node
    if isinstance(node, YScalar) and node.value is None:
        return YMap((), node.pos)  # `key:` with nothing after it reads as an empty mapping
    problems.add(node.pos, f"{what} must be a mapping, not {describe(node)}")
    return None


def expect_seq(node: YNode, what: str, problems: Problems) -> YSeq | None:
    if isinstance(node, YSeq):
        return node
    problems.add(node.pos, f"{what} must be a list, not {describe(node)}")
    return None


def read_str(node: YNode, what: str, problems: Problems, choices: tuple[str, ...] = ()) -> str | None:
    if not isinstance(node, YScalar) or not isinstance(node.value, str):
        accepted = f"one of: {', '.join(choices)}" if choices else "a string"
        problems.add(node.pos, f"{what} must be {accepted}, not {describe(node)}")
        return None
    if choices and node.value not in choices:
        hint = close_match(node.value, choices)
        problems.add(node.pos, f"{what} cannot be '{node.value}'{hint}; accepted: {', '.join(choices)}")
        return None
    return node.value


def read_identifier(node: YNode, what: str, problems: Problems) -> str | None:
    name = read_str(node, what, problems)
    if name is not None and not is_c_identifier(name):
        problems.add(
            node.pos,
            f"{what} '{name}' is not a valid C identifier; use letters, digits and '_', "
            f"not starting with a digit, at most {MAX_IDENTIFIER} characters, and not a C keyword",
        )
        return None
    return name


def read_number(
    node: YNode, what: str, problems: Problems, *, integer: bool = False, minimum: float | None = None
) -> float | int | None:
    """An int, or a float (ints widen; YAML 1.1's `1e9`, which PyYAML reads as a string, is accepted)."""
    value = node.value if isinstance(node, YScalar) else None
    if isinstance(value, str) and not integer:
        try:
            value = float(value)
        except ValueError:
            value = None
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        problems.add(node.pos, f"{what} must be {'an integer' if integer else 'a number'}, not {describe(node)}")
        return None
    if abs(value) > MAX_NUMBER:  # an int of hundreds of digits would overflow float() below
        problems.add(node.pos, f"{what} must be at most {MAX_NUMBER:g} in magnitude")
        return None
    if minimum is not None and value < minimum:
        problems.add(node.pos, f"{what} must be at least {minimum:g}, not {value}")
        return None
    return value if integer else float(value)


def read_bool(node: YNode, what: str, problems: Problems) -> bool | None:
    if not isinstance(node, YScalar) or not isinstance(node.value, bool):
        problems.add(node.pos, f"{what} must be true or false, not {describe(node)}")
        return None
    return node.value


def read_str_list(node: YNode, what: str, problems: Problems) -> tuple[str, ...] | None:
    """A list of strings; a single string is split like a shell would (`cflags: -O2 -mcpu=x`)."""
    if isinstance(node, YScalar) and isinstance(node.value, str):
        try:
            return tuple(shlex.split(node.value))
        except ValueError as exc:
            problems.add(node.pos, f"{what} cannot be split into words: {exc}")
            return None
    if not isinstance(node, YSeq):
        problems.add(node.pos, f"{what} must be a list of strings, not {describe(node)}")
        return None
    seq = node
    words = [read_str(item, f"an entry of {what}", problems) for item in seq.items]
    return None if None in words else tuple(words)


def read_typed(node: YNode, type_name: str, what: str, problems: Problems, minimum: float | None = None) -> Any:
    """A value of one of `ATTRIBUTE_TYPES`; None (with a diagnostic) if it does not fit."""
    if type_name == "int":
        return read_number(node, what, problems, integer=True, minimum=minimum)
    if type_name == "float":
        return read_number(node, what, problems, minimum=minimum)
    if type_name == "bool":
        return read_bool(node, what, problems)
    if type_name == "list[str]":
        return read_str_list(node, what, problems)
    return read_str(node, what, problems)
