"""ConvTranspose (1-D to 3-D, grouped, optional bias): GEMM then col2im.

Per image and group, the weights' transpose [cout_g * kernel x cin_g] times the input
[cin_g x in_size] gives every output tap's contribution; col2im adds them into the
bias-initialised output. Input rows are processed in chunks, so the contributions buffer in
scratch stays bounded (and in cache) whatever the image size.
"""

from __future__ import annotations

from hetgen.ops import _gemm_plan, _parallel
from hetgen.ops._common import input_arg_count, require_float32, total_bytes
from hetgen.ops._spatial import window
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported

# Floats of per-tap contributions computed at a time (input rows are processed in chunks).
COL_CHUNK_FLOATS = 256 * 1024


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    x_type, w_type, y_type = op.input_types[0], op.input_types[1], op.output_types[0]
    if x_type.rank < 3:
        raise Unsupported(f"ConvTranspose on a rank-{x_type.rank} input; accepted: N x C x spatial")
    batch, channels = x_type.shape[:2]
    groups = int(op.attr("group", 1))
    out_channels = y_type.shape[1]
    if channels % groups or w_type.shape[0] != channels or w_type.shape[1] * groups != out_channels:
        raise Unsupported(f"ConvTranspose weights {w_type.shape} do not match {channels} channels in {groups} groups")
    kernel = tuple(op.attr("kernel_shape") or w_type.shape[2:])
    if kernel != tuple(w_type.shape[2:]):
        raise Unsupported(f"ConvTranspose kernel_shape {kernel} differs from the weights' {w_type.shape[2:]}")
    if op.has_input(2) and tuple(op.input_types[2].shape) != (out_channels,):
        raise Unsupported(
            f"ConvTranspose bias of shape {tuple(op.input_types[2].shape)}; the spec requires ({out_channels},)"
        )
    # The window maps input positions to output positions: out = in * stride + tap * dilation - pad.
    win = window(op, x_type.shape[2:], y_type.shape[2:], kernel, transposed=True)
    cin_group, cout_group = channels // groups, out_channels // groups
    rows = cout_group * win.kernel_size
    in_rows = win.in_shape[0] * win.in_shape[1]
    chunk_rows = max(1, min(in_rows, COL_CHUNK_FLOATS // max(1, rows * win.in_shape[2])))
    col_bytes = _gemm_plan.align(4 * rows * chunk_rows * win.in_shape[2])
    pack = _gemm_plan.pack_bytes(rows, chunk_rows * win.in_shape[2], cin_group, op.gemm_blocks)
    params = {
        **win.view(),
        "batch": batch,
        "groups": groups,
        "in_channels": channels,
        "out_channels": out_channels,
        "cin_group": cin_group,
        "cout_group": cout_group,
        "rows": rows,
        "in_rows": in_rows,
        "chunk_rows": chunk_rows,
        "chunk_cols": chunk_rows * win.in_shape[2],
        "group_weights": cin_group * rows,
        "has_bias": op.has_input(2),
        "bias_value": f"bias[g * {cout_group}u + co]" if op.has_input(2) else "0.0f",
        "col_offset": 0,
        "pack_offset": col_bytes,
        "pack_bytes": pack,
        "out_index": input_arg_count(op),
        "scratch_index": input_arg_count(op) + 1,
    }
    return Kernel(
        template="kernels/conv_transpose.c.j2",
        params=params,
        scratch_bytes=col_bytes + pack,
        flops=2 * batch * channels * win.in_size * cout_group * win.kernel_size,
        bytes_accessed=total_bytes(*op.input_types, y_type),
        helpers=(_gemm_plan.HELPER,),
        # one GEMM per chunk of input rows, the last chunk shorter
        parallel=_parallel.gemm(
            _parallel.GemmCall(rows, chunk_rows * win.in_shape[2], cin_group, batch * groups * (in_rows // chunk_rows)),
            _parallel.GemmCall(
                rows, in_rows % chunk_rows * win.in_shape[2], cin_group, batch * groups if in_rows % chunk_rows else 0
            ),
        ),
    )


DEFS = (OpDef("ConvTranspose", lower, weight_input=1),)
