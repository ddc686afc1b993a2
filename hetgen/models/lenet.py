"""LeNet-5 (LeCun et al. 1998) as the microcontroller benchmarks use it: a 32x32 grey image,
conv 5x5 (6) - Relu - MaxPool 2, conv 5x5 (16) - Relu - MaxPool 2, fully connected 120 - 84 - 10."""

from __future__ import annotations

import onnx

from hetgen.models._builder import Builder


def lenet5(opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """[1, 1, 32, 32] → [1, 10] logits (no Softmax: what an int8 deployment compares)."""
    b = Builder("lenet5", opset, seed)
    x = b.input("input", (1, 1, 32, 32))
    h = b.max_pool(b.op("Relu", [b.conv(x, 1, 6, 5, pad=0)]), 2, 2)  # 6 x 14 x 14
    h = b.max_pool(b.op("Relu", [b.conv(h, 6, 16, 5, pad=0)]), 2, 2)  # 16 x 5 x 5
    h = b.op("Flatten", [h])
    h = b.op("Relu", [b.gemm(h, 16 * 5 * 5, 120)])
    h = b.op("Relu", [b.gemm(h, 120, 84)])
    b.output(b.gemm(h, 84, 10), (1, 10))
    return b.model()
