"""Resize (opsets 10-19) and Upsample: nearest, linear and cubic, any rank, with every coordinate
transformation mode, exclude_outside, antialias, axes and keep_aspect_ratio_policy.

Interpolation is separable, so each resized axis gets a table, computed here exactly as ONNX's
reference (`onnx/reference/ops/op_resize.py`) computes it: for every output position, the source
offsets and the weights of its taps (1 for nearest, 2 for linear, 4 for cubic, more with
antialias). The kernel sums weight products over the taps of all resized axes. Axes left alone
before the first resized one become an outer loop; those after the last one, contiguous rows.
"""

from __future__ import annotations

import math

import numpy as np

from hetgen.ops._common import FLOAT_DTYPES, contiguous_strides, literal, normalize_axis
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def _source_coordinates(mode: str, y, scale, in_w, out_w_int, roi):
    """Where each output position samples the input (ONNX coordinate_transformation_mode)."""
    out_w = scale * in_w
    extrapolated = None
    if mode == "align_corners":
        x = np.zeros(out_w_int) if out_w == 1 else y * (in_w - 1) / (out_w - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        if out_w == 1:
            x = np.full(out_w_int, (roi[1] - roi[0]) * (in_w - 1) / 2)
        else:
            x = y * (roi[1] - roi[0]) * (in_w - 1) / (out_w - 1)
        x = x + roi[0] * (in_w - 1)
        extrapolated = (x < 0) | (x > in_w - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_w_int, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_w / 2 * (1 - out_w_int / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise Unsupported(f"Resize coordinate_transformation_mode {mode!r}")
    return x, extrapolated


def _coefficients(kind: str, ratio: float, scale: float, nearest_mode: str, a: float, antialias: bool):
    if kind == "nearest":
        if ratio == int(ratio):
            return np.array([0.0, 1.0])
        prefer = {
            "round_prefer_floor": ratio <= 0.5,
            "round_prefer_ceil": ratio < 0.5,
            "floor": True,
            "ceil": False,
        }
        if nearest_mode not in prefer:
            raise Unsupported(f"Resize nearest_mode {nearest_mode!r}")
        return np.array([1.0, 0.0]) if prefer[nearest_mode] else np.array([0.0, 1.0])
    if kind == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        coeffs = np.clip(1 - np.abs(args), 0, 1)
        return coeffs / coeffs.sum()
    if kind == "cubic":
        if not antialias:
            r = ratio
            return np.array(
                [
                    ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                    ((a + 2) * r - (a + 3)) * r * r + 1,
                    ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
                    ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a,
                ]
            )
        s = min(scale, 1.0)
        i_start = int(np.floor(-2 / s) + 1)
        x = np.abs(np.array([s * (i - ratio) for i in range(i_start, 2 - i_start)]))
        coeffs = np.where(
            x <= 1,
            (a + 2) * x**3 - (a + 3) * x**2 + 1,
            np.where(x < 2, a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a, 0.0),
        )
        return coeffs / coeffs.sum()
    raise Unsupported(f"Resize mode {kind!r}; accepted: nearest, linear, cubic")


def axis_taps(in_w: int, out_w: int, scale: float, settings: dict, roi=None):
    """(source indices [out_w, taps], weights [out_w, taps], extrapolated [out_w] or None)."""
    y = np.arange(out_w, dtype=np.float64)
    x, extrapolated = _source_coordinates(settings["ctm"], y, scale, in_w, out_w, roi)
    x_int = np.floor(x).astype(np.int64)
    ratios = np.where(x == x_int, 1.0, x - x_int)
    coeffs = np.array(
        [
            _coefficients(
                settings["mode"], float(r), scale, settings["nearest_mode"], settings["a"], settings["antialias"]
            )
            for r in ratios
        ]
    ).reshape(out_w, -1)
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    x_padded = x + pad
    p_padded = np.floor(x_padded).astype(np.int64)
    frac = x_padded - p_padded
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    indices = (p_padded + offset)[:, None] + np.arange(n)[None, :] - pad
    if settings["exclude_outside"]:
        coeffs = np.where((indices < 0) | (indices >= in_w), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    indices = np.clip(indices, 0, in_w - 1)
    if settings["mode"] == "nearest":  # keep the one tap of weight 1
        pick = np.argmax(coeffs, axis=1)
        indices = indices[np.arange(out_w), pick][:, None]
        coeffs = np.ones((out_w, 1))
    if extrapolated is not None and not extrapolated.any():
        extrapolated = None
    return indices, coeffs, extrapolated


def _settings(op: OpInstance) -> dict:
    # Upsample and Resize-10 (whose only inputs are X and scales) sample at y / scale and round
    # nearest down, as numpy.repeat does.
    legacy = op.node.op == "Upsample" or len(op.node.inputs) == 2
    mode = op.attr("mode", "nearest")
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    return {
        "mode": mode,
        "ctm": "asymmetric" if legacy else op.attr("coordinate_transformation_mode", "half_pixel"),
        "nearest_mode": "floor" if legacy else op.attr("nearest_mode", "round_prefer_floor"),
        "a": float(op.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(op.attr("exclude_outside", 0)),
        "antialias": bool(op.attr("antialias", 0)),
        "legacy": legacy,
    }


def _constant(op: OpInstance, index: int, what: str):
    if not op.has_input(index):
        return None
    value = op.constant(index)
    if value is None:
        raise Unsupported(f"{op.node.op} {what} must be a compile-time constant")
    value = np.asarray(value).reshape(-1)
    return value if value.size else None


def _scales_and_roi(op: OpInstance, settings: dict) -> tuple[list[float], list[float] | None]:
    x_type = op.input_types[0]
    rank = x_type.rank
    if settings["legacy"]:
        scales = _constant(op, 1, "scales")
        if scales is None:
            scales = np.asarray(op.attr("scales", ()), dtype=np.float64)
        return [float(s) for s in scales], None
    axes = [normalize_axis(int(a), rank) for a in op.attr("axes", range(rank))]
    roi = _constant(op, 1, "roi")
    scales = _constant(op, 2, "scales")
    sizes = _constant(op, 3, "sizes")
    full_roi = None
    if roi is not None:
        full_roi = [0.0] * rank + [1.0] * rank
        for i, axis in enumerate(axes):
            full_roi[axis], full_roi[rank + axis] = float(roi[i]), float(roi[len(axes) + i])
    result = [1.0] * rank
    if scales is not None:
        for axis, s in zip(axes, scales):
            result[axis] = float(s)
    elif sizes is not None:
        for axis, size in zip(axes, sizes):
            result[axis] = int(size) / max(x_type.shape[axis], 1)
        policy = op.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            chosen = pick(result[a] for a in axes)
            result = [chosen if d in axes else 1.0 for d in range(rank)]
    else:
        raise Unsupported("Resize without scales or sizes")
    return result, full_roi


def lower(op: OpInstance) -> Kernel:
    settings = _settings(op)
    x_type, out_type = op.input_types[0], op.output_types[0]
    rank = x_type.rank
    if settings["mode"] != "nearest" and x_type.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"Resize {settings['mode']} on {x_type.dtype.label}; accepted: float32, float64")
    scales, roi = _scales_and_roi(op, settings)
    strides = contiguous_strides(x_type.shape)
    resized = []
    for d in range(rank):
        n, m = x_type.shape[d], out_type.shape[d]
        trivial_roi = roi is None or (math.isclose(roi[d], 0.0) and math.isclose(roi[rank + d], 1.0))
        if not (math.isclose(scales[d], 1.0) and m == n and trivial_roi):
            resized.append(d)
    if out_type.size == 0 or x_type.size == 0:
        return Kernel(template="kernels/resize.c.j2", params={"empty": True})
    first = resized[0] if resized else rank
    last = resized[-1] if resized else rank - 1
    axes = []
    extrapolate = False
    for d in range(first, last + 1):
        n, m = x_type.shape[d], out_type.shape[d]
        if d in resized:
            axis_roi = None if roi is None else (roi[d], roi[rank + d])
            indices, weights, extrapolated = axis_taps(n, m, scales[d], settings, axis_roi)
        else:
            indices, weights, extrapolated = np.arange(n)[:, None], np.ones((n, 1)), None
        extrapolate |= extrapolated is not None
        axes.append(
            {
                "var": f"p{d}",
                "extent": m,
                "taps": indices.shape[1],
                "offsets": [[int(i) * strides[d] for i in row] for row in indices],
                "weights": [[literal(w, x_type.dtype) for w in row] for row in weights],
                "outside": None if extrapolated is None else [int(e) for e in extrapolated],
            }
        )
    nearest = all(a["taps"] == 1 for a in axes) and settings["mode"] == "nearest"
    inner = math.prod(x_type.shape[last + 1 :])
    out_strides = contiguous_strides(out_type.shape)
    value = float(op.attr("extrapolation_value", 0.0))
    return Kernel(
        template="kernels/resize.c.j2",
        params={
            "empty": False,
            "ctype": x_type.dtype.c_type,
            "offset_ctype": "int32_t" if x_type.size < 2**31 else "int64_t",
            "nearest": nearest,
            "outer": math.prod(x_type.shape[:first]),
            "in_outer_stride": strides[first - 1] if first > 0 else 0,
            "out_outer_stride": out_strides[first - 1] if first > 0 else 0,
            "axes": axes,
            "channel_loops": [{"var": "c", "extent": inner}],
            "tap_loops": [{"var": f"t{k}", "extent": a["taps"]} for k, a in enumerate(axes)],
            "out_axis_strides": [out_strides[d] for d in range(first, last + 1)],
            "inner": inner,
            "extrapolate": extrapolate,
            "extrapolation_value": literal(value, x_type.dtype),
            "zero": literal(0, x_type.dtype),
            "row_bytes": inner * x_type.dtype.itemsize,
            "out_arg": len(op.node.inputs),
        },
        flops=out_type.size * 2 * math.prod(a["taps"] for a in axes),
        bytes_accessed=x_type.nbytes + out_type.nbytes,
    )


_CONST = (1, 2, 3)
DEFS = (OpDef("Resize", lower, const_inputs=_CONST), OpDef("Upsample", lower, const_inputs=(1,)))
