"""The real-sized models hetgen's speed and memory are measured on (benchmarks/bench_models.py)
and held to (tests/test_memory_bound.py): one list, so the test checks what the benchmark reports.

Each entry is a builder and the arguments the benchmark uses, plus `small`: the arguments that make
the same network small enough for a fast test (tests/test_suite_models.py builds every entry that
way, checks it and runs it in onnxruntime). `BENCH_MODELS[name]()` builds the benchmark's model,
`BENCH_MODELS[name].small()` the test's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx

from hetgen.models import cnn, imagenet, lenet, mlperf_tiny, recurrent, transformer


@dataclass(frozen=True)
class SuiteModel:
    builder: Callable[..., onnx.ModelProto]
    arguments: dict = field(default_factory=dict)
    small_arguments: dict = field(default_factory=dict)

    def __call__(self) -> onnx.ModelProto:
        return self.builder(**self.arguments)

    def small(self) -> onnx.ModelProto:
        return self.builder(**{**self.arguments, **self.small_arguments})


def _entry(builder, small=None, **arguments) -> SuiteModel:
    return SuiteModel(builder, arguments, small or {})


FULL = {"width": 1.0}
SMALL_IMAGENET = {"size": 32, "width": 0.25}
RECURRENT = {"seq": 50, "inputs": 40, "hidden": 128, "layers": 2, "classes": 12}  # keyword spotting's shape

BENCH_MODELS = {
    # the first suite: reduced-width networks in the classics' shapes (hetgen/models/cnn.py)
    "resnet18": _entry(
        cnn.resnet, {"size": 32, "widths": (16, 32, 64, 128)}, widths=(64, 128, 256, 512), blocks=2, size=224
    ),
    "resnet18@64": _entry(
        cnn.resnet, {"size": 16, "widths": (16, 32, 64, 128)}, widths=(64, 128, 256, 512), blocks=2, size=64
    ),
    "mobilenetv2": _entry(cnn.mobilenet_v2, {"size": 32}, size=224),
    "vgg@64": _entry(cnn.vgg, {"size": 16}, widths=(64, 128, 256), size=64),
    "transformer": _entry(
        transformer.transformer_encoder,
        {"seq": 16, "dim": 32, "ffn": 64},
        seq=128,
        dim=256,
        heads=4,
        layers=4,
        ffn=1024,
    ),
    "alexnet@224": _entry(cnn.alexnet, {"size": 64}, size=224),
    "googlenet@224": _entry(cnn.googlenet, {"size": 32}, size=224),
    "squeezenet@224": _entry(cnn.squeezenet, {"size": 32}, size=224),
    # issue #22's suite: the real architectures (hetgen/models/imagenet.py), small and sequence nets
    "lenet5": _entry(lenet.lenet5),
    "ds_cnn": _entry(mlperf_tiny.ds_cnn, softmax=False),
    "shufflenet@224": _entry(cnn.shufflenet, {"size": 32}, size=224),
    "mobilenetv2-1.0@224": _entry(imagenet.mobilenet_v2, SMALL_IMAGENET, size=224, **FULL),
    "mobilenetv3s@224": _entry(imagenet.mobilenet_v3_small, SMALL_IMAGENET, size=224, **FULL),
    "efficientnet-lite0@224": _entry(imagenet.efficientnet_lite, SMALL_IMAGENET, size=224, **FULL),
    "resnet18-real@224": _entry(imagenet.resnet, SMALL_IMAGENET, depth=18, size=224, **FULL),
    "resnet50@224": _entry(imagenet.resnet, SMALL_IMAGENET, depth=50, size=224, **FULL),
    "densenet121@160": _entry(imagenet.densenet, {"size": 32, "growth": 4}, depth=121, size=160, growth=32),
    "unet@128": _entry(cnn.unet, {"size": 32, "widths": (8, 16, 32)}, widths=(16, 32, 64, 128), size=128),
    "gru": _entry(recurrent.gru_classifier, {"seq": 8, "hidden": 16}, **RECURRENT),
    "lstm": _entry(recurrent.lstm_classifier, {"seq": 8, "hidden": 16}, **RECURRENT),
    # keyword-spotting / sensor-window classifiers of one layer (benchmarks/bench_recurrent.py)
    "gru_classifier": _entry(recurrent.gru_classifier, {"seq": 8, "hidden": 16}, seq=100, inputs=40, hidden=128),
    "lstm_classifier": _entry(recurrent.lstm_classifier, {"seq": 8, "hidden": 16}, seq=50, inputs=64, hidden=256),
    "rnn_classifier": _entry(recurrent.rnn_classifier, {"seq": 8, "hidden": 16}, seq=100, inputs=40, hidden=256),
}

# MLPerf Tiny's four reference networks, float and int8 (benchmarks/bench_mlperf_tiny.py measures
# them on the Cortex-M4, M7 and M55 boards: platforms/mcu.yaml, mcu-m7.yaml, mcu-m55.yaml).
MLPERF_TINY_MODELS = {
    **{name: builder for name, builder in mlperf_tiny.MLPERF_TINY.items()},
    **{f"{name}_int8": (lambda name=name: mlperf_tiny.mlperf_tiny_int8(name)) for name in mlperf_tiny.MLPERF_TINY},
}
