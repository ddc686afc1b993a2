"""Tiny models for quick tests: a multilayer perceptron and a one-block CNN."""

from __future__ import annotations

import onnx

from hetgen.models._builder import Builder


def mlp(opset: int = 17, seed: int = 0, features: int = 32, hidden=(64, 32), classes: int = 10) -> onnx.ModelProto:
    """Gemm-Relu layers, a MatMul+Add layer, Softmax: [1, features] → [1, classes]."""
    b = Builder("mlp", opset, seed)
    h = b.input("input", (1, features))
    width = features
    for size in hidden:
        h = b.op("Relu", [b.gemm(h, width, size)])
        width = size
    w = b.weight((width, classes), "out_w", fan_in=width)
    logits = b.op("Add", [b.op("MatMul", [h, w]), b.bias(classes, "out_b")])
    b.output(b.softmax(logits, 2), (1, classes))
    return b.model()


def tiny_cnn(opset: int = 17, seed: int = 0, size: int = 16) -> onnx.ModelProto:
    """Conv-Relu-MaxPool-Flatten-Gemm on a 1x3xSIZExSIZE image."""
    b = Builder("tiny_cnn", opset, seed)
    x = b.input("input", (1, 3, size, size))
    h = b.max_pool(b.op("Relu", [b.conv(x, 3, 8, 3)]), 2, 2)
    h = b.op("Flatten", [h])
    b.output(b.gemm(h, 8 * (size // 2) ** 2, 10), (1, 10))
    return b.model()
