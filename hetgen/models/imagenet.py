"""The ImageNet classics at their real widths and depths, with seeded random weights.

Layer lists as torchvision (and, for EfficientNet-lite, the TensorFlow reference) define them: the
same operators, channel counts, kernel sizes, strides and residual connections, at any input size
(the benchmark suite, hetgen/models/suite.py, runs them at 224 or below) and any width multiplier
(the tests build them narrow and small). Batch normalisation stays a separate node, as exporters
write it in inference mode before folding.

- `mobilenet_v2`: inverted residuals (1x1 expand, 3x3 depthwise, 1x1 project), Relu6
- `mobilenet_v3_small`: the same with 5x5 depthwise layers, squeeze-and-excitation and hard-swish
- `efficientnet_lite`: EfficientNet-B0's blocks (3x3 and 5x5 depthwise) without squeeze-and-excitation
  and with Relu6 for swish, as the -lite variants run on phones and microcontrollers
- `resnet`: ResNet-18/34 (basic blocks) and ResNet-50/101 (bottlenecks, stride on the 3x3: v1.5)
- `densenet`: DenseNet-121/169 (dense blocks of 1x1 + 3x3 layers, Concat, AveragePool transitions)
"""

from __future__ import annotations

import onnx

from hetgen.models._builder import Builder


def divisible(value: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of `divisor`, never below 90 % of `value`."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _squeeze_excite(b: Builder, x: str, channels: int) -> str:
    """GlobalAveragePool, 1x1 reduce + Relu, 1x1 expand + HardSigmoid, scale the input (Mul)."""
    squeezed = divisible(channels / 4)
    s = b.op("Relu", [b.conv(b.op("GlobalAveragePool", [x]), channels, squeezed, 1)])
    return b.op("Mul", [x, b.hard_sigmoid(b.conv(s, squeezed, channels, 1))])


def _inverted_residual(
    b: Builder, x: str, cin: int, hidden: int, cout: int, kernel: int, stride: int, act: str, se: bool = False
) -> str:
    y = x if hidden == cin else b.conv_bn(x, cin, hidden, 1, act=act)
    y = b.conv_bn(y, hidden, hidden, kernel, stride, group=hidden, act=act)
    if se:
        y = _squeeze_excite(b, y, hidden)
    y = b.conv_bn(y, hidden, cout, 1, act="none")
    return b.op("Add", [x, y]) if stride == 1 and cin == cout else y


# MobileNetV2: (expansion, output channels, repeats, first stride)
MOBILENET_V2 = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(
    opset: int = 17, seed: int = 0, size: int = 32, width: float = 0.25, classes: int = 10
) -> onnx.ModelProto:
    """MobileNetV2 (Sandler et al. 2018): 17 inverted residual blocks, 1280-wide head at width 1."""
    b = Builder("mobilenet_v2_full", opset, seed)
    x = b.input("input", (1, 3, size, size))
    channels = divisible(32 * width)
    h = b.conv_bn(x, 3, channels, 3, stride=2, act="relu6")
    for expansion, out, repeats, first_stride in MOBILENET_V2:
        out = divisible(out * width)
        for index in range(repeats):
            stride = first_stride if index == 0 else 1
            h = _inverted_residual(b, h, channels, channels * expansion, out, 3, stride, "relu6")
            channels = out
    head = divisible(1280 * max(width, 1.0))
    h = b.conv_bn(h, channels, head, 1, act="relu6")
    b.output(b.classifier(b.op("Dropout", [h]), head, classes), (1, classes))
    return b.model()


# MobileNetV3-small: (kernel, expanded channels, output channels, squeeze-excite, activation, stride)
MOBILENET_V3_SMALL = (
    (3, 16, 16, True, "relu", 2),
    (3, 72, 24, False, "relu", 2),
    (3, 88, 24, False, "relu", 1),
    (5, 96, 40, True, "hswish", 2),
    (5, 240, 40, True, "hswish", 1),
    (5, 240, 40, True, "hswish", 1),
    (5, 120, 48, True, "hswish", 1),
    (5, 144, 48, True, "hswish", 1),
    (5, 288, 96, True, "hswish", 2),
    (5, 576, 96, True, "hswish", 1),
    (5, 576, 96, True, "hswish", 1),
)


def mobilenet_v3_small(
    opset: int = 17, seed: int = 0, size: int = 32, width: float = 0.25, classes: int = 10
) -> onnx.ModelProto:
    """MobileNetV3-small (Howard et al. 2019): hard-swish stem, 11 bottlenecks (squeeze-and-excite
    with a hard-sigmoid gate), 1x1 576 conv, GAP, a 1024-wide hard-swish Gemm, Dropout, Gemm."""
    b = Builder("mobilenet_v3_small", opset, seed)
    x = b.input("input", (1, 3, size, size))
    channels = divisible(16 * width)
    h = b.conv_bn(x, 3, channels, 3, stride=2, act="hswish")
    for kernel, expanded, out, se, act, stride in MOBILENET_V3_SMALL:
        hidden, out = divisible(expanded * width), divisible(out * width)
        h = _inverted_residual(b, h, channels, hidden, out, kernel, stride, act, se)
        channels = out
    last = 6 * channels
    h = b.conv_bn(h, channels, last, 1, act="hswish")
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1)
    h = b.op("Dropout", [b.hard_swish(b.gemm(h, last, 1024))])
    b.output(b.gemm(h, 1024, classes), (1, classes))
    return b.model()


# EfficientNet-B0's stages (lite0 keeps them): (expansion, kernel, output channels, repeats, stride)
EFFICIENTNET_B0 = (
    (1, 3, 16, 1, 1),
    (6, 3, 24, 2, 2),
    (6, 5, 40, 2, 2),
    (6, 3, 80, 3, 2),
    (6, 5, 112, 3, 1),
    (6, 5, 192, 4, 2),
    (6, 3, 320, 1, 1),
)


def efficientnet_lite(
    opset: int = 17, seed: int = 0, size: int = 32, width: float = 0.25, classes: int = 10
) -> onnx.ModelProto:
    """EfficientNet-lite0: B0's 16 MBConv blocks (3x3 and 5x5 depthwise), Relu6, no squeeze-and-excite,
    stem (32) and head (1280) kept at full width as lite does."""
    b = Builder("efficientnet_lite", opset, seed)
    x = b.input("input", (1, 3, size, size))
    channels = 32
    h = b.conv_bn(x, 3, channels, 3, stride=2, act="relu6")
    for expansion, kernel, out, repeats, first_stride in EFFICIENTNET_B0:
        out = divisible(out * width)
        for index in range(repeats):
            stride = first_stride if index == 0 else 1
            h = _inverted_residual(b, h, channels, channels * expansion, out, kernel, stride, "relu6")
            channels = out
    h = b.conv_bn(h, channels, 1280, 1, act="relu6")
    b.output(b.classifier(b.op("Dropout", [h]), 1280, classes), (1, classes))
    return b.model()


RESNET_BLOCKS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}


def resnet(
    opset: int = 17, seed: int = 0, depth: int = 50, size: int = 32, width: float = 0.25, classes: int = 10
) -> onnx.ModelProto:
    """ResNet (He et al. 2016): 7x7 stride-2 stem, MaxPool, four stages; basic blocks for 18/34,
    bottlenecks (1x1, 3x3 with the stride, 1x1 x4) for 50/101; projection shortcuts; GAP + Gemm."""
    if depth not in RESNET_BLOCKS:
        raise ValueError(f"depth {depth}; accepted: {', '.join(map(str, RESNET_BLOCKS))}")
    b = Builder(f"resnet{depth}", opset, seed)
    x = b.input("input", (1, 3, size, size))
    channels = divisible(64 * width)
    h = b.max_pool(b.conv_bn(x, 3, channels, 7, stride=2), 3, 2, pad=1)
    expansion = 4 if depth >= 50 else 1
    for stage, repeats in enumerate(RESNET_BLOCKS[depth]):
        planes = divisible(64 * 2**stage * width)
        for index in range(repeats):
            stride = 2 if stage > 0 and index == 0 else 1
            if expansion == 1:
                y = b.conv_bn(b.conv_bn(h, channels, planes, 3, stride), planes, planes, 3, act="none")
            else:
                y = b.conv_bn(b.conv_bn(h, channels, planes, 1), planes, planes, 3, stride)
                y = b.conv_bn(y, planes, planes * expansion, 1, act="none")
            out = planes * expansion
            shortcut = h if stride == 1 and channels == out else b.conv_bn(h, channels, out, 1, stride, act="none")
            h = b.op("Relu", [b.op("Add", [y, shortcut])])
            channels = out
    b.output(b.classifier(h, channels, classes), (1, classes))
    return b.model()


DENSENET_BLOCKS = {121: (6, 12, 24, 16), 169: (6, 12, 32, 32)}


def densenet(
    opset: int = 17, seed: int = 0, depth: int = 121, size: int = 32, growth: int = 8, classes: int = 10
) -> onnx.ModelProto:
    """DenseNet-121/169 (Huang et al. 2017): 7x7 stride-2 stem, MaxPool; dense layers BN-Relu-1x1
    (4 x growth)-BN-Relu-3x3 (growth) concatenated onto all earlier maps; transitions BN-Relu-1x1
    (half)-AveragePool 2; final BN-Relu, GAP + Gemm. Growth 32 is the real one."""
    if depth not in DENSENET_BLOCKS:
        raise ValueError(f"depth {depth}; accepted: {', '.join(map(str, DENSENET_BLOCKS))}")
    b = Builder(f"densenet{depth}", opset, seed)
    x = b.input("input", (1, 3, size, size))
    channels = 2 * growth
    h = b.max_pool(b.conv_bn(x, 3, channels, 7, stride=2), 3, 2, pad=1)

    def bn_relu_conv(t: str, cin: int, cout: int, kernel: int) -> str:
        return b.conv(b.op("Relu", [b.batch_norm(t, cin)]), cin, cout, kernel)

    blocks = DENSENET_BLOCKS[depth]
    for index, layers in enumerate(blocks):
        for _ in range(layers):
            y = bn_relu_conv(bn_relu_conv(h, channels, 4 * growth, 1), 4 * growth, growth, 3)
            h = b.op("Concat", [h, y], axis=1)
            channels += growth
        if index + 1 < len(blocks):
            h = b.avg_pool(bn_relu_conv(h, channels, channels // 2, 1), 2, 2)
            channels //= 2
    h = b.op("Relu", [b.batch_norm(h, channels)])
    b.output(b.classifier(h, channels, classes), (1, classes))
    return b.model()
