"""The names and values of a pattern's declarative `where` predicates, checked when a kind is loaded.

The platform stage owns what a predicate may be called and which values it takes, so a typo in a
kind file gets a file position before any model is seen; the partition stage gives each predicate
its meaning (`hetgen/partition/predicates.py`: one check per name here, asserted on import).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from hetgen.errors import Diagnostic, PlatformError
from hetgen.ir import DType
from hetgen.platform.model import Kind, Pattern
from hetgen.platform.units import NAMED_UNITS, accepted_units, chain_problem, chain_text

DTYPE_LABELS = tuple(dtype.label for dtype in DType)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _valid_dtype(value: Any) -> str | None:
    labels = [value] if isinstance(value, str) else value
    if not isinstance(labels, (list, tuple)) or not labels or not all(isinstance(v, str) for v in labels):
        return f"dtype must be a dtype name or a list of them, not {value!r}"
    unknown = [label for label in labels if label not in DTYPE_LABELS]
    if unknown:
        return f"dtype: unknown {', '.join(unknown)}; accepted: {', '.join(DTYPE_LABELS)}"
    return None


def _valid_groups(value: Any) -> str | None:
    items = value if isinstance(value, (list, tuple)) else [value]
    if items and all(_is_count(item) or item == "depthwise" for item in items):
        return None
    return f"groups must be 1, depthwise or a list of group counts, not {value!r}"


def _valid_count(name: str) -> Callable[[Any], str | None]:
    return lambda value: None if _is_count(value) else f"{name} must be a positive integer, not {value!r}"


def _valid_attrs(value: Any) -> str | None:
    if isinstance(value, dict) or hasattr(value, "items"):
        return None
    return f"attrs must map attribute names to values, not {value!r}"


def _valid_flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"fits_memory must be true or false, not {value!r}"


# name -> what is wrong with its value, or None
PREDICATE_VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    "attrs": _valid_attrs,
    "dtype": _valid_dtype,
    "fits_memory": _valid_flag,
    "groups": _valid_groups,
    "max_kernel": _valid_count("max_kernel"),
    "max_rank": _valid_count("max_rank"),
}
ACCEPTED_PREDICATES = tuple(sorted(PREDICATE_VALIDATORS))


def where_problems(pattern: Pattern) -> list[str]:
    """What is wrong with a pattern's `where` block, one message per problem (empty when valid)."""
    problems = []
    for name, value in pattern.where.items():
        validator = PREDICATE_VALIDATORS.get(name)
        if validator is None:
            problems.append(
                f"pattern '{pattern.label}': unknown predicate '{name}'; accepted: {', '.join(ACCEPTED_PREDICATES)}"
            )
            continue
        message = validator(value)
        if message:
            problems.append(f"pattern '{pattern.label}': {message}")
    chain = chain_problem(pattern.chain, pattern.unit)
    if chain is not None:  # a kind built in Python is checked as a loaded one is (kind_parts.py)
        problems.append(
            f"pattern '{pattern.label}': its chain, {chain_text(pattern.chain)}, is not a unit the kernel table "
            f"forms: {chain}; accepted: {accepted_units()}"
        )
    if pattern.unit is not None and pattern.unit not in NAMED_UNITS:
        problems.append(
            f"pattern '{pattern.label}': the kernel table has no unit '{pattern.unit}'; accepted: {', '.join(sorted(NAMED_UNITS))}"
        )
    if not (
        isinstance(pattern.efficiency, (int, float)) and 0 < pattern.efficiency and math.isfinite(pattern.efficiency)
    ):
        problems.append(f"pattern '{pattern.label}': efficiency must be a positive number, not {pattern.efficiency!r}")
    return problems


def validate_where(patterns: Sequence[Pattern], kind: Kind) -> None:
    """Raise PlatformError listing every bad predicate of a kind's pattern table."""
    problems = [message for pattern in patterns for message in where_problems(pattern)]
    if problems:
        where = kind.source
        raise PlatformError(
            f"kind '{kind.name}' has an invalid pattern table",
            tuple(Diagnostic(where.file, where.line, where.column, message) for message in problems),
        )
