"""GridSample (opset 16 and the N-d form of 20): nearest, linear and cubic modes, zeros, border and
reflection padding, align_corners, 1 to 3 spatial dimensions, as the ONNX reference computes it.

For each output point the kernel works out, once for all channels, the input points it reads and
their weights (1, 2^r or 4^r of them: interpolation is separable, so the weights are products of
the 1-d ones and each point's padding is decided dimension by dimension), then sums per channel.
"""

from __future__ import annotations

import math

from hetgen.ir import DType
from hetgen.ops._common import contiguous_strides
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported

MODES = {"nearest": 1, "linear": 2, "cubic": 4}  # points read per dimension
PADDINGS = ("zeros", "border", "reflection")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def lower(op: OpInstance) -> Kernel:
    x_type, grid_type = op.input_types[:2]
    if x_type.dtype not in (DType.FLOAT32, DType.FLOAT64) or grid_type.dtype is not x_type.dtype:
        raise Unsupported(
            f"GridSample on {x_type.dtype.label} with a {grid_type.dtype.label} grid; accepted: float32, float64"
        )
    mode = _text(op.attr("mode", "linear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = _text(op.attr("padding_mode", "zeros"))
    if mode not in MODES or padding not in PADDINGS:
        raise Unsupported(f"GridSample mode {mode!r}, padding_mode {padding!r}; accepted: {sorted(MODES)}, {PADDINGS}")
    dims = x_type.shape[2:]
    rank = len(dims)
    if not 1 <= rank <= 3 or grid_type.shape[-1] != rank:
        raise Unsupported(f"GridSample with {rank} spatial dimensions; accepted: 1 to 3")
    align = bool(op.attr("align_corners", 0))
    batch, channels = x_type.shape[:2]
    points = math.prod(grid_type.shape[1:-1])
    per_dim = MODES[mode]
    return Kernel(
        template="kernels/grid_sample.c.j2",
        params={
            "ctype": x_type.dtype.c_type,
            "batch": batch,
            "channels": channels,
            "points": points,
            "dims": dims,
            "strides": contiguous_strides(dims),
            "spatial": math.prod(dims),
            "rank": rank,
            "last_dim": rank - 1,
            "nearest": mode == "nearest",
            "linear": mode == "linear",
            "cubic": mode == "cubic",
            "first_back": 1 if mode == "cubic" else 0,  # taps before the point's floor
            "zero_padding": padding == "zeros",
            "border_padding": padding == "border",
            "reflection_padding": padding == "reflection",
            "float_suffix": "f" if x_type.dtype is DType.FLOAT32 else "",
            "align": align,
            "taps": per_dim**rank,
            "per_dim": per_dim,
            # reflection borders per dimension: the sampled range's ends
            "low": [0.0 if align else -0.5 for _ in dims],
            "high": [d - 1.0 if align else d - 0.5 for d in dims],
            "out_arg": len(op.node.inputs),
            "empty": op.output_types[0].size == 0,
        },
        flops=op.output_types[0].size * 2 * per_dim**rank,
        bytes_accessed=x_type.nbytes + grid_type.nbytes + op.output_types[0].nbytes,
    )


DEFS = (OpDef("GridSample", lower),)
