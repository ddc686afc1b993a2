"""DeformConv (2-d): a convolution whose every kernel tap reads the input at its own learned
offset, bilinearly sampled (corners outside the image read zero), times an optional mask, with
groups and offset groups, as the ONNX reference computes it."""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    x, w, offset = op.input_types[:3]
    if x.dtype not in (DType.FLOAT32, DType.FLOAT64):
        raise Unsupported(f"DeformConv on {x.dtype.label}; accepted: float32, float64")
    if x.rank != 4:
        raise Unsupported(f"DeformConv with {x.rank - 2} spatial dimensions; accepted: 2")
    kh, kw = (int(k) for k in (op.attr("kernel_shape", None) or w.shape[2:]))
    sh, sw = (int(s) for s in (op.attr("strides", None) or (1, 1)))
    dh, dw = (int(d) for d in (op.attr("dilations", None) or (1, 1)))
    pads = [int(p) for p in (op.attr("pads", None) or (0, 0, 0, 0))]
    group, offset_group = int(op.attr("group", 1)), int(op.attr("offset_group", 1))
    y = op.output_types[0]
    return Kernel(
        template="kernels/deform_conv.c.j2",
        params={
            "ctype": x.dtype.c_type,
            "batch": x.shape[0],
            "in_channels": x.shape[1],
            "height": x.shape[2],
            "width": x.shape[3],
            "out_channels": w.shape[0],
            "group_in": w.shape[1],
            "group_out": w.shape[0] // group,
            "channels_per_offset_group": x.shape[1] // offset_group,
            "kh": kh,
            "kw": kw,
            "sh": sh,
            "sw": sw,
            "dh": dh,
            "dw": dw,
            "pad_h": pads[0],
            "pad_w": pads[1],
            "out_h": y.shape[2],
            "out_w": y.shape[3],
            "plane_size": x.shape[2] * x.shape[3],
            "out_plane_size": y.shape[2] * y.shape[3],
            "taps": kh * kw,
            "has_bias": op.has_input(3),
            "has_mask": op.has_input(4),
            "out_arg": len(op.node.inputs),
        },
        flops=2 * y.size * w.shape[1] * kh * kw * 4,
        bytes_accessed=x.nbytes + w.nbytes + offset.nbytes + y.nbytes,
    )


DEFS = (OpDef("DeformConv", lower),)
