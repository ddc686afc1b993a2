"""RoiAlign (opsets 10 and 16): average or max of bilinearly sampled points in each output bin of
each region, sampling grid fixed or adaptive, half_pixel or output_half_pixel coordinates. The
regions and batch indices are run-time data; the arithmetic follows onnxruntime's (and the ONNX
reference's) exactly, including max mode's maximum over each sample's four weighted corners."""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops._common import c_double
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    x, rois = op.input_types[:2]
    if x.dtype not in (DType.FLOAT32, DType.FLOAT64) or rois.dtype is not x.dtype:
        raise Unsupported(f"RoiAlign on {x.dtype.label}; accepted: float32, float64")
    mode = op.attr("mode", "avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    transform = op.attr("coordinate_transformation_mode", "half_pixel")
    transform = transform.decode() if isinstance(transform, bytes) else transform
    if mode not in ("avg", "max") or transform not in ("half_pixel", "output_half_pixel"):
        raise Unsupported(f"RoiAlign mode {mode!r}, coordinate_transformation_mode {transform!r}")
    out = op.output_types[0]
    return Kernel(
        template="kernels/roi_align.c.j2",
        params={
            "ctype": x.dtype.c_type,
            "regions": out.shape[0],
            "channels": x.shape[1],
            "height": x.shape[2],
            "width": x.shape[3],
            "out_h": out.shape[2],
            "out_w": out.shape[3],
            "region_size": x.shape[1] * out.shape[2] * out.shape[3],  # one region's output elements
            "plane_size": x.shape[2] * x.shape[3],
            "last_row": x.shape[2] - 1,
            "last_column": x.shape[3] - 1,
            "sampling_ratio": int(op.attr("sampling_ratio", 0)),
            "spatial_scale": c_double(float(op.attr("spatial_scale", 1.0))),
            "half_pixel": transform == "half_pixel",
            "max_mode": mode == "max",
            "batch": x.shape[0],
            "out_arg": len(op.node.inputs),
        },
        flops=out.size * 16,
        bytes_accessed=x.nbytes + out.nbytes,
    )


DEFS = (OpDef("RoiAlign", lower),)
