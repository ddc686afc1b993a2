"""Pad: constant (fill, then copy the input into its window), and reflect / edge / wrap (every
output position reads the input through per-axis index tables that numpy.pad itself computes).
Negative pads crop. pads and axes must be compile-time constants; constant_value may be computed.
"""

from __future__ import annotations

import numpy as np

from hetgen.ops._common import (
    BITS_TYPE,
    contiguous_strides,
    element_view,
    index_expr,
    loops_for,
    normalize_axis,
    scalar_value,
    view_strides,
)
from hetgen.ops._copy import Copy, Fill, copy_kernel
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def _pads(op: OpInstance, rank: int) -> list[tuple[int, int]]:
    """(before, after) per axis."""
    if op.has_input(1):
        value = op.constant(1)
        if value is None:
            raise Unsupported("Pad pads must be a compile-time constant")
        raw = [int(v) for v in value.reshape(-1)]
    else:
        raw = [int(v) for v in op.attr("pads", op.attr("paddings", ()))]
    axes = list(range(rank))
    if op.has_input(3):
        value = op.constant(3)
        if value is None:
            raise Unsupported("Pad axes must be a compile-time constant")
        axes = [normalize_axis(int(a), rank, "Pad axis") for a in value.reshape(-1)]
    if len(raw) != 2 * len(axes):
        raise Unsupported(f"Pad has {len(raw)} pads for {len(axes)} axes")
    pads = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        pads[axis] = (raw[i], raw[len(axes) + i])
    return pads


def _fill(op: OpInstance, out_arg: int) -> Fill:
    """The padding value: an attribute (opset < 11), a constant input, or read at run time."""
    out_type = op.output_types[0]
    value, value_arg = op.attr("value", 0), None
    if op.has_input(2):
        constant = op.constant(2)
        if constant is None:
            value_arg = 2
        else:
            value = scalar_value(constant, "Pad constant_value")
    return Fill(out_arg, (out_type.size,), (1,), value, out_type.dtype, value_arg=value_arg)


def _constant_pad(op: OpInstance, pads) -> Kernel:
    x_type, out_type = op.input_types[0], op.output_types[0]
    src_root, dst_root = element_view(x_type.shape), element_view(out_type.shape)
    src = src_root[tuple(slice(max(0, -b), n - max(0, -e)) for (b, e), n in zip(pads, x_type.shape))]
    dst = dst_root[tuple(slice(max(0, b), max(0, b) + m) for (b, _), m in zip(pads, src.shape))]
    src_strides, src_offset = view_strides(src, src_root)
    dst_strides, dst_offset = view_strides(dst, dst_root)
    out_arg = len(op.node.inputs)
    steps = [
        _fill(op, out_arg),
        Copy(0, out_arg, src.shape, src_strides, dst_strides, src_offset, dst_offset),
    ]
    return copy_kernel(steps, x_type.dtype.itemsize)


def _index_tables(pads, shape, mode: str) -> list[np.ndarray]:
    """For each axis, the input index each output position reads."""
    tables = []
    for (before, after), n in zip(pads, shape):
        start, stop = max(0, -before), n - max(0, -after)
        if stop <= start and (before > 0 or after > 0):
            raise Unsupported(f"Pad mode {mode!r} of an empty axis")
        kept = np.arange(start, stop)
        tables.append(np.pad(kept, (max(0, before), max(0, after)), mode=mode))
    return tables


def _table_pad(op: OpInstance, pads, mode: str) -> Kernel:
    x_type, out_type = op.input_types[0], op.output_types[0]
    padded = [d for d, p in enumerate(pads) if p != (0, 0)]
    last = padded[-1] if padded else -1
    row = int(np.prod(x_type.shape[last + 1 :]))  # untouched trailing axes move as rows
    tables = _index_tables(pads[: last + 1], x_type.shape[: last + 1], mode)
    strides = contiguous_strides(x_type.shape)
    loops = loops_for(out_type.shape[: last + 1])
    terms = []
    table_views = []
    for d, (loop, table) in enumerate(zip(loops, tables)):
        if d in padded:
            table_views.append({"name": f"src{d}", "values": [int(v) * strides[d] for v in table]})
            terms.append(f"src{d}[{loop.var}]")
        elif strides[d] != 0:
            terms.append(index_expr([loop], [strides[d]]))
    return Kernel(
        template="kernels/pad_table.c.j2",
        params={
            "empty": out_type.size == 0,
            "ctype": BITS_TYPE[x_type.dtype.itemsize],
            "out_arg": len(op.node.inputs),
            "loops": loops,
            "tables": table_views,
            "src_index": " + ".join(terms) or "0",
            "dst_index": index_expr(loops, [s * row for s in contiguous_strides(out_type.shape[: last + 1])]),
            "row": row,
            "row_bytes": row * x_type.dtype.itemsize,
        },
        bytes_accessed=2 * out_type.nbytes,
    )


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    pads = _pads(op, x_type.rank)
    shape = tuple(n + b + e for n, (b, e) in zip(x_type.shape, pads))
    if shape != op.output_types[0].shape:
        raise Unsupported(f"Pad gives shape {shape}, the model says {op.output_types[0].shape}")
    mode = op.attr("mode", "constant")
    if mode == "constant":
        return _constant_pad(op, pads)
    if mode not in ("reflect", "edge", "wrap"):
        raise Unsupported(f"Pad mode {mode!r}; accepted: constant, reflect, edge, wrap")
    return _table_pad(op, pads, mode)


DEFS = (OpDef("Pad", lower, const_inputs=(1, 3)),)
