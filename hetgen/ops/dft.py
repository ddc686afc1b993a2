"""DFT (opsets 17 and 20) and STFT: a direct transform per signal line, in double, with exact
twiddles (the angle reduced to k t mod n before the cosine): O(n^2), fine for the short frames of
audio front ends. Real or complex input, forward or inverse, one-sided output or one-sided input
(irfft: the spectrum completed by Hermitian symmetry), dft_length padding or truncating.
`dft_length`, `axis` (opset 20) and STFT's `frame_step`/`frame_length` are compile-time constants.
"""

from __future__ import annotations

import math

from hetgen.ir import DType
from hetgen.ops._common import normalize_axis, scalar_value
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported

TEMPLATE = "kernels/dft.c.j2"


def _float(op: OpInstance, x) -> None:
    if x.dtype not in (DType.FLOAT32, DType.FLOAT64):
        raise Unsupported(f"{op.node.op} on {x.dtype.label}; accepted: float32, float64")


AXIS_INPUT_OPSET = 20  # DFT's axis: an attribute (default 1) before, input 2 (default -2) since


def lower_dft_17(op: OpInstance) -> Kernel:
    _float(op, op.input_types[0])
    return _lower_dft(op, int(op.attr("axis", 1)))


def lower_dft(op: OpInstance) -> Kernel:
    _float(op, op.input_types[0])
    axis_value = op.constant(2)
    if op.has_input(2) and axis_value is None:
        raise Unsupported("DFT axis must be a compile-time constant")
    return _lower_dft(op, int(scalar_value(axis_value, "DFT axis")) if axis_value is not None else -2)


def _lower_dft(op: OpInstance, axis: int) -> Kernel:
    x = op.input_types[0]
    axis = normalize_axis(axis, x.rank)
    if axis == x.rank - 1:
        raise Unsupported("DFT along the last axis (the real/imaginary one); accepted: a signal axis")
    inverse, onesided = bool(op.attr("inverse", 0)), bool(op.attr("onesided", 0))
    length_in = x.shape[axis]
    if op.has_input(1):
        n_value = op.constant(1)
        if n_value is None:
            raise Unsupported("DFT dft_length must be a compile-time constant")
        n = int(scalar_value(n_value, "DFT dft_length"))
    else:
        n = 2 * (length_in - 1) if inverse and onesided else length_in
    y = op.output_types[0]
    return Kernel(
        template=TEMPLATE,
        params={
            "ctype": x.dtype.c_type,
            "stft": False,
            "outer": math.prod(x.shape[:axis]),
            "inner": math.prod(x.shape[axis + 1 : -1]),
            "length_in": length_in,
            "length_out": y.shape[axis],
            "n": n,
            "complex_out": y.shape[-1] == 2,
            "in_step": 2 if x.shape[-1] == 2 else 1,  # values per element: 2 when complex
            "out_step": 2 if y.shape[-1] == 2 else 1,
            "imag_in": "(double)x[at * 2u + 1]" if x.shape[-1] == 2 else "0.0",
            "half": n // 2,
            "sign": 1 if inverse else -1,
            "scale": f"{1.0 / n!r}" if inverse and n else "1.0",
            "hermitian": inverse and onesided,
            "out_arg": len(op.node.inputs),
        },
        flops=8 * y.size * n,
        bytes_accessed=x.nbytes + y.nbytes,
    )


def lower_stft(op: OpInstance) -> Kernel:
    signal = op.input_types[0]
    _float(op, signal)
    step = op.constant(1)
    if step is None:
        raise Unsupported("STFT frame_step must be a compile-time constant")
    window = op.input_types[2] if op.has_input(2) else None
    length_value = op.constant(3) if op.has_input(3) else None
    if op.has_input(3) and length_value is None:
        raise Unsupported("STFT frame_length must be a compile-time constant")
    frame = int(scalar_value(length_value, "STFT frame_length")) if length_value is not None else window.shape[0]
    y = op.output_types[0]
    return Kernel(
        template=TEMPLATE,
        params={
            "ctype": signal.dtype.c_type,
            "stft": True,
            "batch": signal.shape[0],
            "signal_length": signal.shape[1],
            "frames": y.shape[1],
            "frame_step": int(scalar_value(step, "STFT frame_step")),
            "n": frame,
            "length_out": y.shape[2],
            "in_step": 2 if signal.shape[-1] == 2 else 1,
            "imag_in": "w * (double)x[at * 2u + 1]" if signal.shape[-1] == 2 else "0.0",
            "has_window": window is not None,
            "window_value": "(double)window[t]" if window is not None else "1.0",
            "out_arg": len(op.node.inputs),
        },
        flops=8 * y.size * frame,
        bytes_accessed=signal.nbytes + y.nbytes,
    )


DEFS = (
    OpDef("DFT", lower_dft_17, const_inputs=(1, 2), since=17),
    OpDef("DFT", lower_dft, const_inputs=(1, 2), since=AXIS_INPUT_OPSET),
    OpDef("STFT", lower_stft, const_inputs=(1, 3)),
)
