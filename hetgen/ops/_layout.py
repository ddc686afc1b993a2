"""Index arithmetic shared by the tensor-operator lowerings: strides, broadcasting, dimension
collapsing and the loop nests the templates lay out.

Every kernel walks its output in row-major order through a nest of loops with constant bounds.
Each operand is addressed by a linear expression of the loop variables; before the nest is built,
dimensions of extent 1 are dropped and neighbouring dimensions that are contiguous for *every*
operand are merged, so an elementwise add of equal shapes is one flat loop and a per-channel bias
is a (rows, channels, pixels) nest whose inner loop is unit-stride.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from hetgen.ops.base import Unsupported


@dataclass(frozen=True)
class Loop:
    var: str  # C loop variable
    extent: int


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise Unsupported(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides that read a `shape` tensor broadcast (numpy rules) to `out_shape`."""
    shape = tuple(shape)
    pad = len(out_shape) - len(shape)
    if pad < 0:
        raise Unsupported(f"cannot broadcast shape {shape} to {tuple(out_shape)}")
    own = contiguous_strides(shape)
    strides = [0] * pad
    for extent, stride, out_extent in zip(shape, own, out_shape[pad:]):
        if extent == out_extent:
            strides.append(stride)
        elif extent == 1:
            strides.append(0)
        else:
            raise Unsupported(f"cannot broadcast shape {shape} to {tuple(out_shape)}")
    return tuple(strides)


def collapse(
    extents: Sequence[int], strides: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop extent-1 dimensions and merge neighbours that are contiguous for every operand.

    `strides[k]` are operand k's element strides over `extents`. Returns the collapsed extents and
    each operand's strides over them (both in the same outer-to-inner order).
    """
    kept = [(e, [s[d] for s in strides]) for d, e in enumerate(extents) if e != 1]
    merged: list[tuple[int, list[int]]] = []
    for extent, dim_strides in kept:
        if merged:
            outer_extent, outer_strides = merged[-1]
            if all(o == s * extent for o, s in zip(outer_strides, dim_strides)):
                merged[-1] = (outer_extent * extent, dim_strides)
                continue
        merged.append((extent, dim_strides))
    out_extents = tuple(e for e, _ in merged)
    out_strides = tuple(tuple(s[k] for _, s in merged) for k in range(len(strides)))
    return out_extents, out_strides


def loops_for(extents: Sequence[int], prefix: str = "i") -> tuple[Loop, ...]:
    return tuple(Loop(f"{prefix}{d}", int(e)) for d, e in enumerate(extents))


def index_expr(loops: Sequence[Loop], strides: Sequence[int], offset: int = 0) -> str:
    """The C expression of the element index `offset + sum(var * stride)`."""
    terms = []
    for loop, stride in zip(loops, strides):
        if stride == 1:
            terms.append(loop.var)
        elif stride != 0:
            terms.append(f"{loop.var} * {stride}" if stride > 0 else f"{loop.var} * ({stride})")
    if offset or not terms:
        terms.append(str(offset) if offset >= 0 else f"({offset})")
    return " + ".join(terms)


def element_view(shape: Sequence[int]) -> np.ndarray:
    """A zero-memory array of `shape` whose byte strides equal its element strides.

    numpy's own view operations (slicing, transposing, broadcasting, reshaping) applied to it give
    the element strides and offset of a data-movement operator's source; see `view_strides`.
    """
    base = np.zeros(1, dtype=np.uint8)
    return as_strided(base, shape=tuple(shape), strides=contiguous_strides(shape), writeable=False)


def view_strides(view: np.ndarray, root: np.ndarray) -> tuple[tuple[int, ...], int]:
    """(element strides, element offset) of a view derived from `element_view(...)` `root`."""
    offset = view.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return tuple(int(s) for s in view.strides), int(offset)
