"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear: float32 to and from int8/uint8.

Opset 10 to 25 forms: per-tensor (scalar or one-element scale) and per-axis (a 1-D scale along
`axis`, opset 13 and later). Block quantisation (`block_size`, opset 21) and the float8/int4/int16
element types are refused with the reason. Arithmetic follows onnxruntime's MLAS
(`templates/runtime/hg_quant.h`): x / scale, clamp, round half to even, add the zero point;
dequantisation is (float)(x - zero_point) * scale. Scales and zero points are read at run time, so
the nodes work whether or not they are constants.
"""

from __future__ import annotations

from hetgen.ir import DType, TensorType
from hetgen.ops._common import input_arg_count, normalize_axis, total_bytes
from hetgen.ops.base import Kernel, OpDef, OpInstance, Tiling, Unsupported

TEMPLATE = "kernels/quantize.c.j2"
DYNAMIC_TEMPLATE = "kernels/quantize_dynamic.c.j2"
QUANTIZED = (DType.INT8, DType.UINT8)
# Integer range of each quantized type.
Q_RANGE = {DType.INT8: (-128, 127), DType.UINT8: (0, 255)}


def channel_split(op: OpInstance, x_type: TensorType, scale_type: TensorType) -> tuple[int, int, int]:
    """(outer, channels, inner): x as outer x channels x inner, one scale per channel."""
    block_size = int(op.attr("block_size", 0) or 0)
    if block_size:
        raise Unsupported(
            f"{op.node.op} with block quantisation (block_size={block_size}); accepted: per-tensor or per-axis scales"
        )
    if scale_type.size == 1 and scale_type.rank <= 1:
        return 1, 1, x_type.size
    axis = normalize_axis(int(op.attr("axis", 1)), x_type.rank, op=op)
    if scale_type.rank != 1 or scale_type.shape[0] != x_type.shape[axis]:
        raise Unsupported(
            f"{op.node.op} scale of shape {scale_type.shape} for input {x_type} along axis {axis}; "
            f"accepted: a scalar or a 1-D scale of {x_type.shape[axis]} (per axis)"
        )
    outer = 1
    for size in x_type.shape[:axis]:
        outer *= size
    return outer, x_type.shape[axis], x_type.size // max(1, outer * x_type.shape[axis])


def _require_float_scale(op: OpInstance, index: int) -> None:
    scale_type = op.input_types[index]
    if scale_type.dtype is not DType.FLOAT32:
        raise Unsupported(f"{op.node.op} with a {scale_type.dtype.label} scale; accepted: float32")


def _params(op: OpInstance, outer: int, channels: int, inner: int) -> dict:
    return {
        "outer": outer,
        "channels": channels,
        "inner": inner,
        "in_ctype": op.input_types[0].dtype.c_type,
        "out_ctype": op.output_types[0].dtype.c_type,
        "has_zero_point": op.has_input(2),
        "zero_point_note": " and zero point" if op.has_input(2) else "",
        "zero": "(int32_t)zero_point[c]" if op.has_input(2) else "0",
        "zp_ctype": op.input_types[2].dtype.c_type if op.has_input(2) else "",
        "out_index": input_arg_count(op),
    }


def lower_quantize(op: OpInstance) -> Kernel:
    x_type, out_type = op.input_types[0], op.output_types[0]
    if out_type.dtype not in QUANTIZED:
        raise Unsupported(f"QuantizeLinear to {out_type.dtype.label}; accepted: int8, uint8")
    if x_type.dtype not in (DType.FLOAT32, DType.INT32):
        raise Unsupported(f"QuantizeLinear of {x_type.dtype.label}; accepted: float32, int32")
    if int(op.attr("precision", 0) or 0) not in (0, DType.FLOAT32.onnx_code):
        raise Unsupported("QuantizeLinear with a precision other than float32")
    _require_float_scale(op, 1)
    outer, channels, inner = channel_split(op, x_type, op.input_types[1])
    qmin, qmax = Q_RANGE[out_type.dtype]
    store = f"y[base + i] = ({out_type.dtype.c_type})hg_quantize_scaled((float)x[base + i] / s, z, {qmin}, {qmax});"
    params = {
        **_params(op, outer, channels, inner),
        "variant": "quantize",
        "title": "QuantizeLinear",
        "qmin": qmin,
        "qmax": qmax,
        "store": store,
    }
    return Kernel(TEMPLATE, params, flops=3 * x_type.size, bytes_accessed=total_bytes(x_type, out_type))


def lower_dequantize(op: OpInstance) -> Kernel:
    x_type, out_type = op.input_types[0], op.output_types[0]
    if x_type.dtype not in (*QUANTIZED, DType.INT32):
        raise Unsupported(f"DequantizeLinear of {x_type.dtype.label}; accepted: int8, uint8, int32")
    if out_type.dtype is not DType.FLOAT32:
        raise Unsupported(f"DequantizeLinear to {out_type.dtype.label}; accepted: float32")
    _require_float_scale(op, 1)
    outer, channels, inner = channel_split(op, x_type, op.input_types[1])
    params = {
        **_params(op, outer, channels, inner),
        "variant": "dequantize",
        "title": "DequantizeLinear",
        "store": "y[base + i] = (float)((int32_t)x[base + i] - z) * s;",
    }
    return Kernel(TEMPLATE, params, flops=2 * x_type.size, bytes_accessed=total_bytes(x_type, out_type))


def lower_dynamic(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    if x_type.dtype is not DType.FLOAT32:
        raise Unsupported(f"DynamicQuantizeLinear of {x_type.dtype.label}; accepted: float32")
    params = {
        "variant": "dynamic",
        "size": x_type.size,
        "out_index": input_arg_count(op),
        "scale_index": input_arg_count(op) + 1,
        "zero_point_index": input_arg_count(op) + 2,
        "in_ctype": "float",
        "out_ctype": "uint8_t",
    }
    return Kernel(DYNAMIC_TEMPLATE, params, flops=5 * x_type.size, bytes_accessed=total_bytes(x_type, *op.output_types))


DEFS = (
    # per-tensor: contiguous chunks on an accelerator's SRAM (per-axis scales: one tile)
    OpDef("QuantizeLinear", lower_quantize, tiling=Tiling.CHUNKS, float16_boundary=False, rowwise=True),
    OpDef("DequantizeLinear", lower_dequantize, tiling=Tiling.CHUNKS, float16_boundary=False),
    OpDef("DynamicQuantizeLinear", lower_dynamic, float16_boundary=False),
)
