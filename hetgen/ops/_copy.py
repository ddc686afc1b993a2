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
from hetgen.ops._common import BITS_TYPE, collapse, contiguous_strides, index_expr, literal, loops_for, view_strides
from hetgen.ops.base import Kernel

TEMPLATE = "kernels/copy.c.j2"


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
    """A kernel that runs `steps` (copies and fills, in order) over elements of `itemsize` bytes."""
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
