"""MLPerf Tiny's four reference networks, built from their published Keras descriptions with seeded
weights (no training: the structure, sizes and operator mix are the benchmark's, the numbers are not).

Layer lists followed (github.com/mlcommons/tiny, the v0.1 reference models' Keras files):

- ``ds_cnn`` (keyword spotting, ``v0.1/training/keyword_spotting/keras_model.py``, model
  ``ds_cnn``): a 49x10x1 MFCC input (spectrogram_length x dct_coefficient_count at the defaults);
  Conv2D 64 filters 10x4 stride 2 'same' + BN + ReLU (Dropout: identity at inference); four
  depthwise-separable blocks (DepthwiseConv2D 3x3 'same' + BN + ReLU, Conv2D 64 1x1 + BN + ReLU);
  AveragePooling2D (25, 5) (the whole 25x5 map); Flatten; Dense 12 + softmax.
- ``mobilenet_v1_vww`` (visual wake words, ``v0.1/benchmarks/visual_wake_words/vww_model.py``,
  EEMBC's MobileNetV1 at alpha 0.25): a 96x96x3 image; Conv2D 8 3x3 stride 2 + BN + ReLU; 13
  depthwise-separable blocks (DW 3x3 + BN + ReLU, PW 1x1 + BN + ReLU) with widths 16, 32, 32, 64,
  64, 128 x6, 256, 256 and stride 2 at blocks 2, 4, 6 and 12; AveragePooling2D over the 3x3 map;
  Flatten; Dense 2 + softmax. ReLU, not ReLU6, as the reference writes it.
- ``resnet8`` (image classification, ``v0.1/benchmarks/image_classification/keras_model.py``,
  ``resnet_v1_eembc`` with 16 filters; later revisions make the width a parameter): a 32x32x3
  image; Conv2D 16 3x3 + BN + ReLU; three stacks of 16, 32, 64 filters, each two Conv2D 3x3 (+ BN,
  ReLU between) added to the identity (stack 1) or to a Conv2D 1x1 stride 2 projection (stacks 2,
  3; no BN on it, as published) and ReLU; AveragePooling2D 8; Flatten; Dense 10 + softmax.
- ``fc_autoencoder`` (anomaly detection, ``v0.1/benchmarks/anomaly_detection/keras_model.py``): a
  640-wide input (5 frames x 128 log-mel bins); Dense 128 x4, Dense 8, Dense 128 x4, each + BN +
  ReLU; Dense 640 (linear).

Keras' 'same' padding is asymmetric where the kernel and stride leave an odd total (the extra row or
column at the end: the 10x4 stride-2 stem pads 4 above and 5 below, a 3x3 stride-2 layer on an even
map pads only below and right); the ONNX Conv carries those pads exactly. The convolutions keep their
BatchNormalization nodes (onnxruntime's pre-processing and hetgen's frontend fold them into the
Conv). The autoencoder's BatchNormalization after each Dense is folded into the Dense's weights and
bias here (a BN after a Gemm is folded by neither), from seeded BN statistics.

Weights are He-normal (sqrt(2 / fan_in)) as the references initialise them, so activations keep their
scale through the layers and int8 quantization (hetgen.models.quantized) meets realistic ranges.
`PUBLISHED` holds the parameter and multiply-accumulate counts the graphs are checked against
(tests/test_mlperf_tiny.py), `PUBLISHED_M4_MS` the published Cortex-M4 latencies
benchmarks/bench_mlperf_tiny.py prints; `mlperf_tiny_int8` the int8 versions (onnxruntime's
`quantize_static`, QDQ, per-channel weights).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from hetgen.models._builder import Builder
from hetgen.models.quantized import quantized

# The sizes the graphs are held to (tests/test_mlperf_tiny.py, within 3 %): parameters and
# multiply-accumulates per inference as the reference models are usually quoted (ResNet-8 78 K
# parameters and 12.5 M MACs, MobileNetV1-0.25 208 K and 7.5 M, the autoencoder about 270 K and
# 0.26 M, DS-CNN 2.7 M MACs); DS-CNN's parameter count is its layer list's own (22.6 K with biases).
PUBLISHED = {
    "ds_cnn": {"params": 23_000, "macs": 2_700_000},
    "mobilenet_v1_vww": {"params": 208_000, "macs": 7_500_000},
    "resnet8": {"params": 78_000, "macs": 12_500_000},
    "fc_autoencoder": {"params": 270_000, "macs": 264_000},
}

# The best published Cortex-M4 latencies at 120 MHz in MLPerf Tiny's results (closed division), set
# beside hetgen's figures by benchmarks/bench_mlperf_tiny.py: published, not measured here.
PUBLISHED_M4_MS = {
    "ds_cnn": {"X-CUBE-AI": 43.2, "TFLM+CMSIS-NN": 181.9},
    "mobilenet_v1_vww": {"X-CUBE-AI": 88.9, "TFLM+CMSIS-NN": 600.6},
}


def mlperf_tiny_int8(name: str, seed: int = 0) -> onnx.ModelProto:
    """The model quantized by onnxruntime: QDQ, int8 weights per output channel, int8 activations,
    calibrated on seeded standard-normal inputs (hetgen.models.quantized)."""
    return quantized(MLPERF_TINY[name](seed=seed), "QDQ", per_channel=True, seed=seed)


def same_pads(size: tuple[int, int], kernel: tuple[int, int], stride: int) -> list[int]:
    """Keras/TensorFlow 'same' padding as ONNX pads [top, left, bottom, right]: the extra at the end."""
    begin, end = [], []
    for extent, k in zip(size, kernel):
        out = -(-extent // stride)
        total = max((out - 1) * stride + k - extent, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end


class KerasNet:
    """A Builder plus the current NCHW map size, for Keras-style 'same' layers (what TFLite's SAME
    means, so benchmarks/bench_vela.py's TFLite twin of a network computes the same function)."""

    def __init__(self, b: Builder, channels: int, size: tuple[int, int]):
        self.b, self.channels, self.size = b, channels, size

    def conv(self, x: str, cout: int, kernel=(3, 3), stride: int = 1, group: int = 1, bn: bool = True, act="relu"):
        """Conv2D (+ BatchNormalization) + activation: "relu", "relu6" or None."""
        b = self.b
        kernel = tuple(kernel)
        w = b.weight((cout, self.channels // group, *kernel), "conv_w")
        y = b.op(
            "Conv",
            [x, w, b.bias(cout, "conv_b")],
            kernel_shape=list(kernel),
            strides=[stride, stride],
            pads=same_pads(self.size, kernel, stride),
            group=group,
        )
        self.channels = cout
        self.size = tuple(-(-s // stride) for s in self.size)
        if bn:
            y = b.batch_norm(y, cout)
        if act == "relu":
            return b.op("Relu", [y])
        if act == "relu6":
            return b.op("Clip", [y, b.const(np.float32(0), "lo"), b.const(np.float32(6), "hi")])
        if act is None:
            return y
        raise ValueError(f"unknown activation {act!r}")

    def separable(self, x: str, cout: int, stride: int = 1) -> str:
        """DepthwiseConv2D 3x3 + BN + ReLU, then Conv2D 1x1 + BN + ReLU."""
        x = self.conv(x, self.channels, (3, 3), stride, group=self.channels)
        return self.conv(x, cout, (1, 1))

    def head(self, x: str, classes: int, softmax: bool = True) -> str:
        """AveragePooling2D over the whole map, Flatten, Dense (+ softmax)."""
        b = self.b
        pooled = b.op("AveragePool", [x], kernel_shape=list(self.size), strides=list(self.size))
        logits = b.gemm(b.op("Flatten", [pooled], axis=1), self.channels, classes)
        return b.softmax(logits, 2) if softmax else logits


def ds_cnn(opset: int = 17, seed: int = 0, softmax: bool = True) -> onnx.ModelProto:
    """DS-CNN keyword spotting: 1x1x49x10 MFCC features → 12 class probabilities (logits without
    the softmax)."""
    b = Builder("ds_cnn", opset, seed)
    net = KerasNet(b, 1, (49, 10))
    x = net.conv(b.input("input", (1, 1, 49, 10)), 64, (10, 4), stride=2)
    for _ in range(4):
        x = net.separable(x, 64)
    b.output(net.head(x, 12, softmax), (1, 12))
    return b.model()


def mobilenet_v1_vww(opset: int = 17, seed: int = 0, alpha: float = 0.25, size: int = 96) -> onnx.ModelProto:
    """MobileNetV1 (alpha 0.25) visual wake words: 1x3x96x96 image → person / no person."""
    b = Builder("mobilenet_v1_vww", opset, seed)
    net = KerasNet(b, 3, (size, size))
    width = lambda channels: max(int(channels * alpha), 1)  # noqa: E731
    x = net.conv(b.input("input", (1, 3, size, size)), width(32), (3, 3), stride=2)
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for channels, stride in blocks:
        x = net.separable(x, width(channels), stride)
    b.output(net.head(x, 2), (1, 2))
    return b.model()


def resnet8(opset: int = 17, seed: int = 0, softmax: bool = True) -> onnx.ModelProto:
    """ResNet-8 (EEMBC's ResNetV1 for CIFAR-10): 1x3x32x32 image → 10 class probabilities (logits
    without the softmax)."""
    b = Builder("resnet8", opset, seed)
    net = KerasNet(b, 3, (32, 32))
    x = net.conv(b.input("input", (1, 3, 32, 32)), 16)
    for stack, filters in enumerate((16, 32, 64)):
        stride = 1 if stack == 0 else 2
        channels, size = net.channels, net.size
        y = net.conv(x, filters, stride=stride)
        y = net.conv(y, filters, act=None)
        if stack:
            after = net.channels, net.size
            net.channels, net.size = channels, size
            x = net.conv(x, filters, (1, 1), stride=stride, bn=False, act=None)
            assert (net.channels, net.size) == after
        x = b.op("Relu", [b.op("Add", [x, y])])
    b.output(net.head(x, 10, softmax), (1, 10))
    return b.model()


def fc_autoencoder(opset: int = 17, seed: int = 0, features: int = 640) -> onnx.ModelProto:
    """The anomaly-detection autoencoder: [1, 640] → 128 x4 → 8 → 128 x4 → [1, 640]."""
    b = Builder("fc_autoencoder", opset, seed)
    h = b.input("input", (1, features))
    width = features
    for size in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        h = b.op("Relu", [_dense_bn(b, h, width, size)])
        width = size
    b.output(b.gemm(h, width, features), (1, features))
    return b.model()


def _dense_bn(b: Builder, x: str, features_in: int, features_out: int) -> str:
    """Dense + BatchNormalization, the BN folded into the Gemm's weight and bias."""
    rng = b.rng
    w = rng.standard_normal((features_out, features_in)).astype(np.float32) * np.float32(math.sqrt(2 / features_in))
    bias = (rng.standard_normal(features_out) * 0.05).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, features_out).astype(np.float32)
    beta = (rng.standard_normal(features_out) * 0.1).astype(np.float32)
    mean = (rng.standard_normal(features_out) * 0.1).astype(np.float32)
    var = rng.uniform(0.5, 1.5, features_out).astype(np.float32)
    k = gamma / np.sqrt(var + np.float32(1e-3))  # Keras' BatchNormalization epsilon
    weight = b.const((w * k[:, None]).astype(np.float32), "fc_w")
    folded = b.const(((bias - mean) * k + beta).astype(np.float32), "fc_b")
    return b.op("Gemm", [x, weight, folded], transB=1)


MLPERF_TINY = {
    "ds_cnn": ds_cnn,
    "mobilenet_v1_vww": mobilenet_v1_vww,
    "resnet8": resnet8,
    "fc_autoencoder": fc_autoencoder,
}


def graph_counts(model: onnx.ModelProto) -> tuple[int, int]:
    """(parameters, multiply-accumulates per inference) of the Conv and Gemm layers, from the graph.

    Parameters are the Conv/Gemm weights and biases (BatchNormalization counted as folded into them);
    MACs are one per weight per output position (Conv: output H x W x weights; Gemm: the weight count).
    """
    model = onnx.shape_inference.infer_shapes(model)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*model.graph.input, *model.graph.value_info, *model.graph.output)
    }
    sizes = {t.name: math.prod(t.dims) for t in model.graph.initializer}
    params = macs = 0
    for node in model.graph.node:
        if node.op_type not in ("Conv", "Gemm"):
            continue
        weights = sizes[node.input[1]]
        params += weights + (sizes[node.input[2]] if len(node.input) > 2 and node.input[2] else 0)
        spatial = math.prod(shapes[node.output[0]][2:]) if node.op_type == "Conv" else 1
        macs += weights * spatial
    return params, macs
