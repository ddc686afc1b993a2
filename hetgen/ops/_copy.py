"""Strided copies, fills and constant data: the kernel behind every data-movement operator whose output is a fixed
rearrangement of its inputs (Transpose, Concat, Split, Slice, Expand, Tile, DepthToSpace, Pad,
Reshape and friends).

A lowering describes each output region as a numpy *view* of an `element_view` of the source (so
numpy's own slicing, transposing and broadcasting compute the strides); `copy_kernel` collapses
each copy's dimensions, turns unit-stride rows into `memcpy` and fills into `memset` where it can,
and fills the view-model of `copy.c.j2`. Elements move as unsigned integers of their size, so one
kernel serves every dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hetgen.ir import DType
from hetgen.ops import _parallel
from hetgen.ops._common import BITS_TYPE, collapse, contiguous_strides, index_expr, literal, loops_for, view_strides
from hetgen.ops.base import Kernel

TEMPLATE = "kernels/copy.c.j2"
SPLIT_TEMPLATE = "kernels/copy_split.c.j2"
# A split copy's tasks start on cache lines of the bytes it moves; a line is 16 floats' work each
# side (`_parallel.split` weighs work in float elements).
LINE_BYTES = 64


@dataclass(frozen=True)
class Copy:
    """dst[dst_offset + i . dst_strides] = src[src_offset + i . src_strides] for i over extents."""

    src_arg: int
    dst_arg: int
    extents: tuple[int, ...]
    src_strides: tuple[int, ...]
    dst_strides: tuple[int, ...]
    src_offset: int = 0
    dst_offset: int = 0


@dataclass(frozen=True)
class Fill:
    """dst[dst_offset + i . dst_strides] = value for i over extents.

    `value` is known at compile time, or with `value_arg` set, read from that argument at run time.
    """

    dst_arg: int
    extents: tuple[int, ...]
    dst_strides: tuple[int, ...]
    value: float | int
    dtype: DType
    dst_offset: int = 0
    value_arg: int | None = None


@dataclass(frozen=True)
class Data:
    """dst[0:len(values)] = values, known at compile time (Shape, Size)."""

    dst_arg: int
    values: tuple
    dtype: DType

    @property
    def extents(self) -> tuple[int, ...]:
        return (len(self.values),)


def contiguous_offset(view: np.ndarray, root: np.ndarray) -> int | None:
    """The element offset of `view` (of the source's `root` element view) in the source where its
    elements are one contiguous run of the source's, in order; else None."""
    if view.size == 0 or not view.flags.c_contiguous:
        return None
    return view_strides(view, root)[1]


def copy_from_view(src_arg: int, dst_arg: int, view: np.ndarray, root: np.ndarray) -> Copy:
    """Copy the `view` (of the source's `root` element view) into a contiguous destination."""
    strides, offset = view_strides(view, root)
    return Copy(src_arg, dst_arg, view.shape, strides, contiguous_strides(view.shape), src_offset=offset)


def copy_into_view(src_arg: int, dst_arg: int, view: np.ndarray, root: np.ndarray) -> Copy:
    """Copy a contiguous source into the `view` (of the destination's `root` element view)."""
    strides, offset = view_strides(view, root)
    return Copy(src_arg, dst_arg, view.shape, contiguous_strides(view.shape), strides, dst_offset=offset)


def whole_copy(src_arg: int, dst_arg: int, size: int) -> Copy:
    return Copy(src_arg, dst_arg, (size,), (1,), (1,))


@dataclass(frozen=True)
class Run:
    """`size` contiguous bytes from args[src_arg] + src_byte to args[dst_arg] + dst_byte."""

    src_arg: int
    src_byte: int
    dst_arg: int
    dst_byte: int
    size: int


def _contiguous_run(step: Copy | Fill | Data, itemsize: int) -> Run | None:
    """`step` as one contiguous run of bytes, or None (a fill, data, or a copy with strides)."""
    if not isinstance(step, Copy) or 0 in step.extents:
        return None
    extents, (src, dst) = collapse(step.extents, [step.src_strides, step.dst_strides])
    if len(extents) != 1 or src[0] != 1 or dst[0] != 1:
        return None
    return Run(
        step.src_arg, step.src_offset * itemsize, step.dst_arg, step.dst_offset * itemsize, extents[0] * itemsize
    )


def split_runs(runs: Sequence[Run]) -> tuple[tuple[Run, ...], ...] | None:
    """`runs` (in order, as one stream of bytes) cut into tasks of equal whole cache lines, the last
    one taking the rest; None when the whole is too small to share (`_parallel.split`). A channel
    Concat or Split at batch 1 is such a stream: one memcpy per input, one on one thread before."""
    total = sum(run.size for run in runs)
    split = _parallel.split(total // LINE_BYTES, 2 * LINE_BYTES // 4)  # a line read and written
    if split is None:
        return None
    tasks = []
    for task in range(split.tasks):
        first = task * split.chunk * LINE_BYTES
        end = total if task == split.tasks - 1 else first + split.chunk * LINE_BYTES
        pieces, start = [], 0
        for run in runs:
            low, high = max(first, start), min(end, start + run.size)
            if low < high:
                skip = low - start
                pieces.append(Run(run.src_arg, run.src_byte + skip, run.dst_arg, run.dst_byte + skip, high - low))
            start += run.size
        tasks.append(tuple(pieces))
    return tuple(tasks)


def _copy_block(copy: Copy, itemsize: int) -> dict | None:
    if 0 in copy.extents:
        return None
    extents, (src, dst) = collapse(copy.extents, [copy.src_strides, copy.dst_strides])
    block = {
        "reads": True,
        "src_arg": copy.src_arg,
        "dst_arg": copy.dst_arg,
        "src_offset": copy.src_offset,
        "dst_offset": copy.dst_offset,
        "ctype": BITS_TYPE[itemsize],
    }
    if extents and src[-1] == 1 and dst[-1] == 1:
        loops = loops_for(extents[:-1])
        src_index, dst_index = index_expr(loops, src[:-1]), index_expr(loops, dst[:-1])
        block.update(
            loops=loops, statements=(f"memcpy(dst + {dst_index}, src + {src_index}, {extents[-1] * itemsize});",)
        )
        return block
    loops = loops_for(extents)
    block.update(loops=loops, statements=(f"dst[{index_expr(loops, dst)}] = src[{index_expr(loops, src)}];",))
    return block


def _fill_block(fill: Fill) -> dict | None:
    if 0 in fill.extents:
        return None
    extents, (dst,) = collapse(fill.extents, [fill.dst_strides])
    runtime = fill.value_arg is not None
    zero_bytes = not runtime and not np.asarray(fill.value, dtype=fill.dtype.numpy).tobytes().strip(b"\0")
    block = {"reads": False, "dst_arg": fill.dst_arg, "dst_offset": fill.dst_offset, "ctype": fill.dtype.c_type}
    if zero_bytes and extents and dst[-1] == 1:
        loops = loops_for(extents[:-1])
        row_bytes = extents[-1] * fill.dtype.itemsize
        block.update(loops=loops, statements=(f"memset(dst + {index_expr(loops, dst[:-1])}, 0, {row_bytes});",))
        return block
    loops = loops_for(extents)
    value = f"((const {fill.dtype.c_type} *)args[{fill.value_arg}])[0]" if runtime else literal(fill.value, fill.dtype)
    block.update(loops=loops, statements=(f"dst[{index_expr(loops, dst)}] = {value};",))
    return block


def _data_block(data: Data) -> dict | None:
    if not data.values:
        return None
    values = ", ".join(literal(v, data.dtype) for v in data.values)
    return {
        "reads": False,
        "dst_arg": data.dst_arg,
        "dst_offset": 0,
        "ctype": data.dtype.c_type,
        "loops": (),
        "statements": (
            f"static const {data.dtype.c_type} value[{len(data.values)}] = {{ {values} }};",
            "memcpy(dst, value, sizeof value);",
        ),
    }


def copy_kernel(
    steps: Sequence[Copy | Fill | Data], itemsize: int, *, flops: int = 0, scratch_bytes: int = 0
) -> Kernel:
    """A kernel that runs `steps` (copies and fills, in order) over elements of `itemsize` bytes: where
    every step is a contiguous run and there are enough bytes, as tasks of the worker pool."""
    runs = [_contiguous_run(step, itemsize) for step in steps]
    tasks = split_runs(runs) if runs and all(runs) else None
    if tasks is not None:
        moved = 2 * sum(run.size for run in runs)
        return Kernel(
            template=SPLIT_TEMPLATE,
            params={"tasks": tasks, "chunk": sum(piece.size for piece in tasks[0])},
            flops=flops,
            bytes_accessed=moved,
            scratch_bytes=scratch_bytes,
            helpers=(_parallel.HELPER,),
            parallel=_parallel.tasks_of(len(tasks)),
        )
    blocks = []
    moved = 0
    for step in steps:
        if isinstance(step, Data):
            block = _data_block(step)
        elif isinstance(step, Fill):
            block = _fill_block(step)
        else:
            block = _copy_block(step, itemsize)
        if block is not None:
            blocks.append(block)
            count = int(np.prod(step.extents))
            moved += count * itemsize * (1 if isinstance(step, (Fill, Data)) else 2)
    return Kernel(
        template=TEMPLATE,
        params={"blocks": blocks},
        flops=flops,
        bytes_accessed=moved,
        scratch_bytes=scratch_bytes,
    )
