"""int8 versions of the float models, made the way users make them: onnxruntime's `quantize_static`.

`quantized(model, fmt)` pre-processes the float model (`quant_pre_process`: shape inference and
onnxruntime's basic optimisations, which fold BatchNormalization into Conv) and quantizes it with a
calibration reader of seeded random inputs, in the QDQ or QOperator format. Needs
onnxruntime (the reference hetgen verifies against).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

FORMATS = ("QDQ", "QOperator")


class RandomCalibration:
    """onnxruntime's CalibrationDataReader protocol over `count` seeded standard-normal inputs."""

    def __init__(self, model: onnx.ModelProto, count: int = 8, seed: int = 0):
        rng = np.random.default_rng(seed)
        inits = {i.name for i in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in inits]
        shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in inputs}
        self._batches = iter(
            [
                {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
                for _ in range(count)
            ]
        )

    def get_next(self):
        return next(self._batches, None)


def quantized(
    model: onnx.ModelProto,
    fmt: str = "QDQ",
    *,
    per_channel: bool = False,
    activations: str = "int8",
    seed: int = 0,
) -> onnx.ModelProto:
    """`model` quantized by onnxruntime: weights int8, activations int8 or uint8."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}; accepted: {', '.join(FORMATS)}")
    CalibrationDataReader.register(RandomCalibration)
    with tempfile.TemporaryDirectory(prefix="hg_quantize_") as tmp:
        source, prepared, target = Path(tmp, "float.onnx"), Path(tmp, "prepared.onnx"), Path(tmp, "int8.onnx")
        onnx.save(model, source)
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(target),
            RandomCalibration(model, seed=seed),
            quant_format=getattr(QuantFormat, fmt),
            activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
        )
        return onnx.load(str(target))
