"""Recurrent sequence classifiers, written the way PyTorch exports `nn.GRU` / `nn.LSTM` / `nn.RNN`.

A `batch_first` input [batch, seq, inputs] is transposed to ONNX's [seq, batch, inputs] (Transpose
perm 1,0,2), one recurrent node (W, R, B as initializers, gates in ONNX's order) gives the final
hidden state Y_h [directions, batch, hidden], Squeeze drops the direction axis (one direction) and a
Gemm head gives the class scores: the keyword-spotting / sensor-window shapes of issue #22. With
`layers` > 1 the layers are stacked, each reading the one before's Y with its direction axis
squeezed (torch's `num_layers`).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from hetgen.models._builder import Builder


def sequence_classifier(
    kind: str = "GRU",
    gates: int = 3,
    opset: int = 14,
    seed: int = 0,
    seq: int = 100,
    inputs: int = 40,
    hidden: int = 128,
    batch: int = 1,
    classes: int = 12,
    layers: int = 1,
) -> onnx.ModelProto:
    if (kind, gates) not in (("RNN", 1), ("GRU", 3), ("LSTM", 4)):
        raise ValueError(f"kind={kind!r} with {gates} gates; accepted: RNN 1, GRU 3, LSTM 4")
    b = Builder(f"{kind.lower()}_classifier", opset, seed)
    x = b.input("features", (batch, seq, inputs))
    steps = b.op("Transpose", [x], perm=[1, 0, 2])  # batch_first -> [seq, batch, inputs]
    rows = gates * hidden
    scale = np.float32(1.0 / math.sqrt(hidden))  # PyTorch's U(-1/sqrt(H), 1/sqrt(H)) initialisation
    attrs = {"hidden_size": hidden}
    if kind == "GRU":
        attrs["linear_before_reset"] = 1  # PyTorch's GRU
    outputs = 3 if kind == "LSTM" else 2
    width = inputs
    for layer in range(layers):
        w = b.const((b.rng.uniform(-1, 1, (1, rows, width)) * scale).astype(np.float32), f"{kind.lower()}_w")
        r = b.const((b.rng.uniform(-1, 1, (1, rows, hidden)) * scale).astype(np.float32), f"{kind.lower()}_r")
        bias = b.const((b.rng.uniform(-1, 1, (1, 2 * rows)) * scale).astype(np.float32), f"{kind.lower()}_b")
        results = b.op(kind, [steps, w, r, bias], outputs=outputs, **attrs)
        if layer + 1 < layers:  # Y [seq, 1 direction, batch, hidden] -> the next layer's [seq, batch, hidden]
            steps = b.squeeze(results[0], [1])
        width = hidden
    last = b.squeeze(results[1], [0])  # Y_h [1, batch, hidden] -> [batch, hidden]
    b.output(b.gemm(last, hidden, classes), (batch, classes))
    return b.model()


def gru_classifier(opset: int = 14, seed: int = 0, **shape) -> onnx.ModelProto:
    return sequence_classifier("GRU", 3, opset, seed, **shape)


def lstm_classifier(opset: int = 14, seed: int = 0, **shape) -> onnx.ModelProto:
    return sequence_classifier("LSTM", 4, opset, seed, **shape)


def rnn_classifier(opset: int = 14, seed: int = 0, **shape) -> onnx.ModelProto:
    return sequence_classifier("RNN", 1, opset, seed, **shape)
