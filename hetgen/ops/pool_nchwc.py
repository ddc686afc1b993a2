"""MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool on blocked channels (NCHW[V]c).

hetgen/lower/blocked_layout.py runs a pooling layer blocked when its input is already blocked (a
run of blocked Convs continues through it instead of ending there):

- a window pool reads and writes NCHW[V]c: per output position, its V channels are one vector
  taken over the window's taps row by row, with the NCHW kernels' window tables
  (hetgen/ops/pool.py); a maximum is the NCHW kernel's, an average may differ from it in the last
  bit (templates/kernels/pool_rows.c.j2 sums each column of the window's rows first);
- a global pool reads NCHW[V]c and writes the NCHW [N, C, 1, 1] its readers expect (a classifier
  head), dropping the padded channels: no reorder at the end of the run.

Only 2-D float32 pools without MaxPool's Indices output are taken; others keep NCHW.
"""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops import _parallel
from hetgen.ops._common import float_literal, present_outputs
from hetgen.ops._spatial import window
from hetgen.ops.base import Kernel, OpInstance
from hetgen.ops.conv_nchwc import POOL_HELPER, REORDER_TASK_BYTES, blocks, task_count
from hetgen.ops.pool import axis_tables

WINDOW_POOLS = ("MaxPool", "AveragePool")
GLOBAL_POOLS = ("GlobalAveragePool", "GlobalMaxPool")


def blockable(op: OpInstance) -> bool:
    """A pool the blocked kernels compute: 2-D, float32, one output, no fused activation."""
    x_type, y_type = op.input_types[0], op.output_types[0]
    if op.node.op not in WINDOW_POOLS + GLOBAL_POOLS or op.epilogue:
        return False
    if x_type is None or y_type is None or x_type.rank != 4 or x_type.dtype is not DType.FLOAT32:
        return False
    if sum(present_outputs(op)) != 1:
        return False
    return op.node.op in GLOBAL_POOLS or op.attr("kernel_shape") is not None


def lower(op: OpInstance, v: int) -> Kernel:
    """The blocked pool of `op` (admitted by `blockable`), reading NCHW[v]c."""
    x_type, y_type = op.input_types[0], op.output_types[0]
    batch, channels = x_type.shape[:2]
    ib = blocks(channels, v)
    if op.node.op in GLOBAL_POOLS:
        size = x_type.shape[2] * x_type.shape[3]
        is_max = op.node.op == "GlobalMaxPool"
        element = f"xb[i * {v}u + c]"
        units = batch * ib
        params = {
            "V": v,
            "variant": "global_max" if is_max else "global_avg",
            "title": op.node.op,
            "init": "-INFINITY" if is_max else "0.0f",
            "accumulate": f"acc[c] = {element} > acc[c] ? {element} : acc[c];" if is_max else f"acc[c] += {element};",
            "finish": "" if is_max else f" / {float_literal(float(size))}",
            "batch": batch,
            "channels": channels,
            "blocks": ib,
            "size": size,
            "block_floats": size * v,  # one channel block of one image
            "pieces": units,
            "tasks": task_count(units, 4 * units * size * v // REORDER_TASK_BYTES),
        }
        return _kernel(
            "kernels/pool_nchwc_global.c.j2", params, flops=x_type.size, nbytes=4 * units * size * v + y_type.nbytes
        )
    win = window(op, x_type.shape[2:], y_type.shape[2:], tuple(op.attr("kernel_shape")))
    include_pad = bool(op.attr("count_include_pad", 0))
    is_max = op.node.op == "MaxPool"
    rows = batch * ib * win.out_shape[1]
    nbytes = 4 * batch * ib * v * (win.in_size + win.out_size)
    params = {
        **win.view(),
        "V": v,
        "variant": "max" if is_max else "avg",
        "is_avg": not is_max,
        "title": "MaxPool" if is_max else "AveragePool",
        "table_note": "" if is_max else ", taps counted by the average",
        "init": "-INFINITY" if is_max else "0.0f",
        "accumulate": "acc[c] = src[c] > acc[c] ? src[c] : acc[c];" if is_max else "acc[c] += src[c];",
        "axes": tuple(axis_tables(win, i, include_pad) for i in (1, 2)),
        "in_plane_floats": win.in_shape[1] * win.in_shape[2] * v,
        "out_row_floats": win.out_shape[2] * v,
        "pieces": rows,
        "tasks": task_count(rows, nbytes // REORDER_TASK_BYTES),
    }
    return _kernel(
        "kernels/pool_nchwc.c.j2", params, flops=batch * ib * v * win.out_size * win.kernel_size, nbytes=nbytes
    )


def _kernel(template: str, params: dict, flops: int, nbytes: int) -> Kernel:
    return Kernel(
        template=template,
        params=params,
        flops=flops,
        bytes_accessed=nbytes,
        helpers=(POOL_HELPER,) if params["tasks"] > 1 else (),
        parallel=_parallel.tasks_of(params["tasks"]),
    )
