"""Bytes live at each step of a program: each buffer from the first step that touches it to the last
one. The one rule behind the activation budget of `options.memory: lean`
(hetgen/partition/prepack.py), the peak that decides which Concats are views
(hetgen/partition/concat_views.py) and the bound the generated program is held to
(hetgen/lower/peak_memory.py); each of them says which buffers it counts and what a step touches.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence


def live_bytes(
    touches: Sequence[Iterable[str]],
    nbytes: Mapping[str, int],
    from_start: Collection[str] = (),
    to_end: Collection[str] = (),
) -> list[int]:
    """Per step, the bytes of the buffers live across it: `touches[step]` names the buffers the step
    reads or writes, `nbytes` their sizes. A buffer of `from_start` is live from the first step
    (it exists before the program runs), one of `to_end` until the last (it outlives the program)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    end = len(touches)
    for step, names in enumerate(touches):
        for name in names:
            first.setdefault(name, 0 if name in from_start else step)
            last[name] = end - 1 if name in to_end else step
    delta = [0] * (end + 1)  # a difference array: the cost is steps + touches, not lifetimes
    for name, start in first.items():
        delta[start] += nbytes[name]
        delta[last[name] + 1] -= nbytes[name]
    return list(itertools.accumulate(delta[:end]))
