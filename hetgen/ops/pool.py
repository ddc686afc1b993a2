"""MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool (1-D to 3-D, NCHW).

The lowering tabulates, for every output index along each spatial dimension, where its window
starts, which kernel taps fall inside the input, and how many taps count towards an average
(count_include_pad, ceil_mode). The template's loops then need no bounds checks.

A float window pool without MaxPool's Indices runs in two passes per output row
(templates/kernels/pool_rows.c.j2), each a loop along a row that the compiler vectorises: the
window's input rows combined column by column into a band padded with the pool's identity, then
every output's taps along the band. The one-pass loop (templates/kernels/pool.c.j2) read each input
row once per horizontal tap, at the stride: SqueezeNet's 3x3/2 MaxPool took 4x onnxruntime's time.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from hetgen.ir import DType
from hetgen.ops import _parallel
from hetgen.ops._common import input_arg_count, present_outputs, require_float32, total_bytes
from hetgen.ops._spatial import Window, window
from hetgen.ops.base import Kernel, OpDef, OpInstance, Tiling, Unsupported, WorkRule

# MaxPool also runs on bytes; the value a window starts from is the type's minimum.
MAX_TYPES = {DType.FLOAT32: "-INFINITY", DType.INT8: "INT8_MIN", DType.UINT8: "0"}
# The two-pass kernel's band lives on the stack: wider rows (long 1-D windows) keep the one-pass loop.
BAND_LIMIT_FLOATS = 4096


def axis_tables(win: Window, i: int, include_pad: bool) -> dict:
    """Per-output-index window tables along spatial axis i (0: depth, 1: height, 2: width)."""
    size, stride, dil, kernel = win.in_shape[i], win.strides[i], win.dilations[i], win.kernel[i]
    low, high = (-win.pads_begin[i], size + win.pads_end[i]) if include_pad else (0, size)
    starts, firsts, ends, counts = [], [], [], []
    for o in range(win.out_shape[i]):
        start = o * stride - win.pads_begin[i]
        taps = [t for t in range(kernel) if 0 <= start + t * dil < size]
        starts.append(start)
        firsts.append(taps[0] if taps else 0)
        ends.append(taps[-1] + 1 if taps else 0)
        counts.append(sum(1 for t in range(kernel) if low <= start + t * dil < high))
    return {
        "name": "dhw"[i],
        "is_width": i == 2,
        "start": tuple(starts),
        "first": tuple(firsts),
        "end": tuple(ends),
        "count": tuple(counts),
    }


def lower_window_pool(op: OpInstance) -> Kernel:
    x_type, y_type = op.input_types[0], op.output_types[0]
    is_max = op.node.op == "MaxPool"
    if is_max and x_type.dtype not in MAX_TYPES:
        raise Unsupported(f"MaxPool on {x_type.dtype.label}; accepted: float32, int8, uint8")
    if not is_max:
        require_float32(op)
    if x_type.rank < 3:
        raise Unsupported(f"{op.node.op} on a rank-{x_type.rank} input; accepted: N x C x spatial")
    kernel = op.attr("kernel_shape")
    if kernel is None:
        raise Unsupported(f"{op.node.op} without kernel_shape")
    win = window(op, x_type.shape[2:], y_type.shape[2:], tuple(kernel))
    include_pad = bool(op.attr("count_include_pad", 0))
    outputs = present_outputs(op)
    with_indices = is_max and len(outputs) > 1 and outputs[1]
    if whole_plane(win) and x_type.dtype is DType.FLOAT32 and not with_indices:
        # one window over each whole plane (DS-CNN's AveragePool before its classifier): the
        # global kernel's vectorised row sum or maximum instead of the window loop's taps
        return lower_global_pool(op)
    band = band_layout(win)
    if x_type.dtype is DType.FLOAT32 and not with_indices and band is not None:
        return lower_row_pool(op, win, include_pad, band)
    storage_order = int(op.attr("storage_order", 0))
    planes = x_type.shape[0] * x_type.shape[1]
    split = _parallel.split(planes, y_type.size // max(planes, 1) * win.kernel_size)
    params = {
        **win.view(),
        "axes": tuple(axis_tables(win, i, include_pad) for i in range(3)),
        "is_max": is_max,
        "title": "MaxPool" if is_max else "AveragePool",
        "table_note": "" if is_max else ", taps counted by the average",
        "acc_ctype": x_type.dtype.c_type if is_max else "float",
        "planes": planes,
        "ctype": x_type.dtype.c_type,
        "init": MAX_TYPES[x_type.dtype] if is_max else "0.0f",
        "with_indices": bool(with_indices),
        "column_major": storage_order == 1,
        "out_index": input_arg_count(op),
        "indices_index": input_arg_count(op) + 1,
        "split": split,
        # int8/uint8 MaxPool rows: hg_qg_max_row (templates/runtime/hg_qgemm.h), vectorised
        "byte_rows": is_max and not with_indices and x_type.dtype in (DType.INT8, DType.UINT8),
        "x_signed": int(x_type.dtype is DType.INT8),
        "window_rows": win.kernel[0] * win.kernel[1],
    }
    return Kernel(
        template="kernels/pool.c.j2",
        params=params,
        flops=y_type.size * win.kernel_size,
        bytes_accessed=total_bytes(x_type, *op.output_types),
        helpers=(_parallel.HELPER,) if split else (),
        parallel=_parallel.tasks_of(split),
    )


@dataclass(frozen=True)
class Band:
    """The two-pass kernel's row of combined input rows: `pad` identity cells, `cols` input columns,
    identity cells up to `floats`, which reach every output's last tap (ceil_mode's included)."""

    pad: int
    cols: int
    floats: int


def band_layout(win: Window) -> Band | None:
    """The band of a window pool, or None where it would not fit BAND_LIMIT_FLOATS (or the pads
    leave no input column under a window: the one-pass loop's tables handle that)."""
    floats = (win.out_shape[2] - 1) * win.strides[2] + (win.kernel[2] - 1) * win.dilations[2] + 1
    cols = min(win.in_shape[2], floats - win.pads_begin[2])
    if floats > BAND_LIMIT_FLOATS or cols < 1:
        return None
    return Band(win.pads_begin[2], cols, floats)


def lower_row_pool(op: OpInstance, win: Window, include_pad: bool, band: Band) -> Kernel:
    """A float MaxPool or AveragePool without Indices as the two-pass kernel (the module's docstring)."""
    x_type = op.input_types[0]
    is_max = op.node.op == "MaxPool"
    depth, height = (axis_tables(win, i, include_pad) for i in (0, 1))
    planes = x_type.shape[0] * x_type.shape[1]
    rows = sum(map(operator.sub, depth["end"], depth["first"])) * sum(map(operator.sub, height["end"], height["first"]))
    work_per_plane = rows * band.cols + win.out_size * win.kernel[2]  # both passes' taps
    split = _parallel.split(planes, work_per_plane)
    params = {
        **win.view(),
        "axes": (depth, height),
        "count_w": axis_tables(win, 2, include_pad)["count"],
        "is_max": is_max,
        "title": "MaxPool" if is_max else "AveragePool",
        "table_note": "" if is_max else ", taps counted by the average",
        "init": "-INFINITY" if is_max else "0.0f",
        "planes": planes,
        "cols": band.cols,
        "band_floats": band.floats,
        "tail_start": band.pad + band.cols,
        "tail_pad": band.floats - band.pad - band.cols,
        "out_index": input_arg_count(op),
        "split": split,
    }
    return Kernel(
        template="kernels/pool_rows.c.j2",
        params=params,
        flops=planes * work_per_plane,
        bytes_accessed=total_bytes(x_type, *op.output_types),
        helpers=(_parallel.HELPER,) if split else (),
        parallel=_parallel.tasks_of(split),
    )


def whole_plane(win: Window) -> bool:
    """Whether the window is the whole input plane, unpadded: one output per plane, every input in it."""
    return (
        win.kernel == win.in_shape
        and win.out_size == 1
        and set(win.dilations) == {1}
        and not any(win.pads_begin + win.pads_end)
    )


def lower_global_pool(op: OpInstance) -> Kernel:
    """GlobalAveragePool and GlobalMaxPool; also an AveragePool or MaxPool whose one window is the
    whole plane."""
    require_float32(op)
    x_type = op.input_types[0]
    if x_type.rank < 2:
        raise Unsupported(f"{op.node.op} on a rank-{x_type.rank} input; accepted: N x C x spatial")
    planes = x_type.shape[0] * x_type.shape[1]
    size = x_type.size // planes if planes else 0
    split = _parallel.split(planes, size)
    params = {
        "is_max": op.node.op in ("GlobalMaxPool", "MaxPool"),
        "title": op.node.op,
        "planes": planes,
        "plane_size": size,
        "out_index": input_arg_count(op),
        "split": split,
    }
    return Kernel(
        template="kernels/pool_global.c.j2",
        params=params,
        flops=x_type.size,
        bytes_accessed=total_bytes(x_type, *op.output_types),
        helpers=(_parallel.HELPER,) if split else (),
        parallel=_parallel.tasks_of(split),
    )


DEFS = (
    OpDef("AveragePool", lower_window_pool, work=WorkRule.WINDOW, tiling=Tiling.WINDOW),
    OpDef("GlobalAveragePool", lower_global_pool, work=WorkRule.GLOBAL, tiling=Tiling.CHANNELS),
    OpDef("GlobalMaxPool", lower_global_pool, work=WorkRule.GLOBAL, tiling=Tiling.CHANNELS, quantized_passthrough=True),
    OpDef(
        "MaxPool",
        lower_window_pool,
        work=WorkRule.WINDOW,
        tiling=Tiling.WINDOW,
        optional_outputs_from=1,
        quantized_passthrough=True,
    ),
)
