"""The real-sized models hetgen's speed and memory are measured on (benchmarks/bench_models.py)
and held to (tests/test_memory_bound.py): one list, so the test checks what the benchmark reports."""

from __future__ import annotations

from hetgen.models import cnn, mlperf_tiny, recurrent, transformer

BENCH_MODELS = {
    "resnet18": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=224),
    "resnet18@64": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=64),
    "mobilenetv2": lambda: cnn.mobilenet_v2(size=224),
    "vgg@64": lambda: cnn.vgg(widths=(64, 128, 256), size=64),
    "transformer": lambda: transformer.transformer_encoder(seq=128, dim=256, heads=4, layers=4, ffn=1024),
    "alexnet@224": lambda: cnn.alexnet(size=224),
    "googlenet@224": lambda: cnn.googlenet(size=224),
    "squeezenet@224": lambda: cnn.squeezenet(size=224),
    # keyword-spotting / sensor-window sequence classifiers (benchmarks/bench_recurrent.py)
    "gru_classifier": lambda: recurrent.gru_classifier(seq=100, inputs=40, hidden=128),
    "lstm_classifier": lambda: recurrent.lstm_classifier(seq=50, inputs=64, hidden=256),
    "rnn_classifier": lambda: recurrent.rnn_classifier(seq=100, inputs=40, hidden=256),
}

# MLPerf Tiny's four reference networks, float and int8 (benchmarks/bench_mlperf_tiny.py measures
# them on the Cortex-M4, M7 and M55 boards: platforms/mcu.yaml, mcu-m7.yaml, mcu-m55.yaml).
MLPERF_TINY_MODELS = {
    **{name: builder for name, builder in mlperf_tiny.MLPERF_TINY.items()},
    **{f"{name}_int8": (lambda name=name: mlperf_tiny.mlperf_tiny_int8(name)) for name in mlperf_tiny.MLPERF_TINY},
}
