"""Names that must be valid C identifiers."""

from __future__ import annotations

import re

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "_Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert _Thread_local".split()
)


def c_identifier(text: str, fallback: str) -> str:
    """A C identifier made from `text` (invalid characters become '_'); `fallback` if nothing is left."""
    cleaned = re.sub(r"__+", "_", re.sub(r"[^0-9A-Za-z_]", "_", text).strip("_")) or fallback
    if cleaned[:1].isdigit():
        cleaned = f"_{cleaned}"
    if cleaned in C_KEYWORDS:
        cleaned += "_"
    return cleaned
