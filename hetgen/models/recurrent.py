"""Sequence classifiers on recurrent layers, as torch exports them (nn.GRU / nn.LSTM, batch 1).

[seq, 1, features] in (ONNX's layout 0), `layers` stacked GRU or LSTM layers (GRU with
linear_before_reset=1, torch's form), the last layer's final hidden state Y_h → Flatten → Gemm logits:
a keyword-spotting or sensor classifier's shape (40 MFCC features per frame, ~50 frames).
"""

from __future__ import annotations

import onnx

from hetgen.models._builder import Builder


def _classifier(
    kind: str, gates: int, opset: int, seed: int, seq: int, features: int, hidden: int, layers: int, classes: int
) -> onnx.ModelProto:
    """`kind` (GRU: 3 gates, LSTM: 4) layers stacked; weights W [1, gates * hidden, in], R, B."""
    b = Builder(f"{kind.lower()}_classifier", opset, seed)
    x = b.input("input", (seq, 1, features))
    extra = {"linear_before_reset": 1} if kind == "GRU" else {}
    width = features
    for layer in range(layers):
        w = b.weight((1, gates * hidden, width), f"{kind.lower()}_w", fan_in=width)
        r = b.weight((1, gates * hidden, hidden), f"{kind.lower()}_r", fan_in=hidden)
        bias = b.const(b.rng.standard_normal((1, 2 * gates * hidden)).astype("float32") * 0.05, f"{kind.lower()}_b")
        y, y_h = b.op(kind, [x, w, r, bias], outputs=3 if kind == "LSTM" else 2, hidden_size=hidden, **extra)[:2]
        if layer + 1 < layers:  # [seq, 1 direction, 1, hidden] -> [seq, 1, hidden]: the next layer's input
            x = b.squeeze(y, [1])
        width = hidden
    b.output(b.gemm(b.op("Flatten", [y_h], axis=1), hidden, classes), (1, classes))
    return b.model()


def gru_classifier(
    opset: int = 17,
    seed: int = 0,
    seq: int = 8,
    features: int = 16,
    hidden: int = 32,
    layers: int = 2,
    classes: int = 10,
) -> onnx.ModelProto:
    """Stacked GRU layers, the last one's final hidden state into a Gemm."""
    return _classifier("GRU", 3, opset, seed, seq, features, hidden, layers, classes)


def lstm_classifier(
    opset: int = 17,
    seed: int = 0,
    seq: int = 8,
    features: int = 16,
    hidden: int = 32,
    layers: int = 2,
    classes: int = 10,
) -> onnx.ModelProto:
    """Stacked LSTM layers, the last one's final hidden state into a Gemm."""
    return _classifier("LSTM", 4, opset, seed, seq, features, hidden, layers, classes)
