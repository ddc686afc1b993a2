"""Small convolutional networks in the shape of the classic ones, with seeded random weights.

Each keeps its namesake's structure (the operators and the way they connect) at a size that
compiles and runs in seconds: 1x3x32x32 inputs (AlexNet: 1x3x64x64, for its 11x11 stride-4 stem),
a few thousand to a few hundred thousand weights, 10 classes.
"""

from __future__ import annotations

import onnx

from hetgen.models._builder import Builder


def resnet(opset: int = 17, seed: int = 0, widths=(16, 32, 64), blocks: int = 1, size: int = 32) -> onnx.ModelProto:
    """ResNet with basic blocks: Conv-BN-Relu, residual Add, MaxPool stem, GAP + Gemm head."""
    b = Builder("resnet", opset, seed)
    x = b.input("input", (1, 3, size, size))
    h = b.max_pool(b.conv_bn(x, 3, widths[0], 3), 3, 2, pad=1)
    channels = widths[0]
    for stage, width in enumerate(widths):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.conv_bn(h, channels, width, 3, stride)
            y = b.conv_bn(y, width, width, 3, act="none")
            shortcut = h if stride == 1 and channels == width else b.conv_bn(h, channels, width, 1, stride, act="none")
            h = b.op("Relu", [b.op("Add", [y, shortcut])])
            channels = width
    b.output(b.classifier(h, channels, 10), (1, 10))
    return b.model()


def mobilenet_v2(opset: int = 17, seed: int = 0, size: int = 32) -> onnx.ModelProto:
    """MobileNetV2: inverted residuals with depthwise convolutions and Relu6 (Clip)."""
    b = Builder("mobilenet_v2", opset, seed)
    x = b.input("input", (1, 3, size, size))
    h = b.conv_bn(x, 3, 16, 3, stride=2, act="relu6")
    channels = 16
    # (expansion, output channels, stride) per inverted residual block
    for expansion, width, stride in ((1, 16, 1), (4, 24, 2), (4, 24, 1), (4, 32, 2), (4, 32, 1)):
        hidden = channels * expansion
        y = h if expansion == 1 else b.conv_bn(h, channels, hidden, 1, act="relu6")
        y = b.conv_bn(y, hidden, hidden, 3, stride, group=hidden, act="relu6")
        y = b.conv_bn(y, hidden, width, 1, act="none")
        h = b.op("Add", [h, y]) if stride == 1 and channels == width else y
        channels = width
    h = b.conv_bn(h, channels, 64, 1, act="relu6")
    b.output(b.classifier(h, 64, 10), (1, 10))
    return b.model()


def squeezenet(opset: int = 17, seed: int = 0, size: int = 32) -> onnx.ModelProto:
    """SqueezeNet: fire modules (squeeze 1x1, expand 1x1 and 3x3, Concat), Dropout, conv head."""
    b = Builder("squeezenet", opset, seed)
    x = b.input("input", (1, 3, size, size))
    h = b.max_pool(b.op("Relu", [b.conv(x, 3, 32, 3, stride=2, pad=1)]), 3, 2)
    channels = 32
    for squeeze, expand in ((8, 16), (8, 16), (16, 32)):
        s = b.op("Relu", [b.conv(h, channels, squeeze, 1)])
        e1 = b.op("Relu", [b.conv(s, squeeze, expand, 1)])
        e3 = b.op("Relu", [b.conv(s, squeeze, expand, 3)])
        h = b.op("Concat", [e1, e3], axis=1)
        channels = 2 * expand
    h = b.op("Dropout", [h])
    h = b.op("Relu", [b.conv(h, channels, 10, 1)])
    b.output(b.op("Flatten", [b.op("GlobalAveragePool", [h])]), (1, 10))
    return b.model()


def googlenet(opset: int = 17, seed: int = 0, size: int = 32) -> onnx.ModelProto:
    """GoogLeNet/Inception: four parallel branches joined by Concat, padded MaxPool, AveragePool."""
    b = Builder("googlenet", opset, seed)
    x = b.input("input", (1, 3, size, size))
    h = b.max_pool(b.op("Relu", [b.conv(x, 3, 32, 3)]), 3, 2, pad=1)
    channels = 32

    def inception(h: str, cin: int, c1: int, c3: tuple[int, int], c5: tuple[int, int], cp: int) -> tuple[str, int]:
        relu = lambda t: b.op("Relu", [t])  # noqa: E731
        b1 = relu(b.conv(h, cin, c1, 1))
        b3 = relu(b.conv(relu(b.conv(h, cin, c3[0], 1)), c3[0], c3[1], 3))
        b5 = relu(b.conv(relu(b.conv(h, cin, c5[0], 1)), c5[0], c5[1], 5))
        bp = relu(b.conv(b.max_pool(h, 3, 1, pad=1), cin, cp, 1))
        return b.op("Concat", [b1, b3, b5, bp], axis=1), c1 + c3[1] + c5[1] + cp

    h, channels = inception(h, channels, 16, (16, 24), (4, 8), 8)
    h, channels = inception(h, channels, 24, (16, 32), (8, 16), 8)
    h = b.max_pool(h, 3, 2, pad=1)
    h, channels = inception(h, channels, 32, (24, 32), (8, 16), 16)
    spatial = size // 4
    h = b.avg_pool(h, spatial, spatial)
    h = b.op("Dropout", [b.op("Flatten", [h])])
    b.output(b.gemm(h, channels, 10), (1, 10))
    return b.model()


inception = googlenet


def densenet(opset: int = 17, seed: int = 0, growth: int = 8, size: int = 32) -> onnx.ModelProto:
    """DenseNet: dense blocks (BN-Relu-Conv, Concat with all earlier maps), AveragePool transitions."""
    b = Builder("densenet", opset, seed)
    x = b.input("input", (1, 3, size, size))
    h = b.conv(x, 3, 2 * growth, 3)
    channels = 2 * growth

    def bn_relu_conv(t: str, cin: int, cout: int, kernel: int) -> str:
        return b.conv(b.op("Relu", [b.batch_norm(t, cin)]), cin, cout, kernel)

    for block in range(2):
        for _ in range(3):
            y = bn_relu_conv(bn_relu_conv(h, channels, 2 * growth, 1), 2 * growth, growth, 3)
            h = b.op("Concat", [h, y], axis=1)
            channels += growth
        if block == 0:
            h = b.avg_pool(bn_relu_conv(h, channels, channels // 2, 1), 2, 2)
            channels //= 2
    h = b.op("Relu", [b.batch_norm(h, channels)])
    b.output(b.classifier(h, channels, 10), (1, 10))
    return b.model()


def vgg(opset: int = 17, seed: int = 0, widths=(16, 32, 64), size: int = 32) -> onnx.ModelProto:
    """VGG: stacks of 3x3 Conv+Relu, MaxPool between stages, Gemm-Relu-Dropout-Gemm head."""
    b = Builder("vgg", opset, seed)
    h = b.input("input", (1, 3, size, size))
    channels = 3
    for width in widths:
        for _ in range(2):
            h = b.op("Relu", [b.conv(h, channels, width, 3)])
            channels = width
        h = b.max_pool(h, 2, 2)
    features = channels * (size >> len(widths)) ** 2
    h = b.op("Flatten", [h])
    h = b.op("Dropout", [b.op("Relu", [b.gemm(h, features, 128)])])
    b.output(b.gemm(h, 128, 10), (1, 10))
    return b.model()


def alexnet(opset: int = 17, seed: int = 0, size: int = 64) -> onnx.ModelProto:
    """AlexNet: 11x11 stride-4 stem, LRN, overlapping MaxPool, Dropout between Gemm layers."""
    b = Builder("alexnet", opset, seed)
    x = b.input("input", (1, 3, size, size))

    def lrn(t: str) -> str:
        return b.op("LRN", [t], size=5, alpha=1e-4, beta=0.75, bias=2.0)

    h = b.max_pool(lrn(b.op("Relu", [b.conv(x, 3, 16, 11, stride=4, pad=2)])), 3, 2)
    h = b.max_pool(lrn(b.op("Relu", [b.conv(h, 16, 32, 5)])), 3, 2)
    h = b.op("Relu", [b.conv(h, 32, 48, 3)])
    h = b.op("Relu", [b.conv(h, 48, 32, 3)])
    h = b.max_pool(h, 3, 2)
    spatial = ((((size + 4 - 11) // 4 + 1 - 3) // 2 + 1 - 3) // 2 + 1 - 3) // 2 + 1
    h = b.op("Dropout", [b.op("Flatten", [h])])
    h = b.op("Dropout", [b.op("Relu", [b.gemm(h, 32 * spatial * spatial, 64)])])
    b.output(b.gemm(h, 64, 10), (1, 10))
    return b.model()


def shufflenet(opset: int = 17, seed: int = 0, size: int = 32) -> onnx.ModelProto:
    """ShuffleNetV2: channel split (Split, and Slice), branches, Concat, channel shuffle."""
    b = Builder("shufflenet", opset, seed)
    x = b.input("input", (1, 3, size, size))
    h = b.max_pool(b.conv_bn(x, 3, 24, 3, stride=2), 3, 2, pad=1)
    channels, spatial = 24, size // 4

    def shuffle(t: str, c: int, s: int) -> str:
        t = b.op("Reshape", [t, b.ints([1, 2, c // 2, s, s])])
        t = b.op("Transpose", [t], perm=[0, 2, 1, 3, 4])
        return b.op("Reshape", [t, b.ints([1, c, s, s])])

    def branch(t: str, cin: int, cout: int, stride: int) -> str:
        t = b.conv_bn(t, cin, cout, 1)
        t = b.conv_bn(t, cout, cout, 3, stride, group=cout, act="none")
        return b.conv_bn(t, cout, cout, 1)

    # stride-2 unit: both branches see the whole input
    left = b.conv_bn(b.conv_bn(h, channels, channels, 3, 2, group=channels, act="none"), channels, channels, 1)
    h = b.op("Concat", [left, branch(h, channels, channels, 2)], axis=1)
    channels, spatial = 2 * channels, spatial // 2
    h = shuffle(h, channels, spatial)
    half = channels // 2
    for use_split in (True, False):  # stride-1 units: half the channels pass through
        if use_split:
            keep, work = b.split(h, [half, half], axis=1)
        else:
            keep = b.slice(h, [0], [half], [1])
            work = b.slice(h, [half], [channels], [1])
        h = shuffle(b.op("Concat", [keep, branch(work, half, half, 1)], axis=1), channels, spatial)
    h = b.conv_bn(h, channels, 64, 1)
    b.output(b.classifier(h, 64, 10), (1, 10))
    return b.model()


def unet(opset: int = 17, seed: int = 0, widths=(8, 16, 32), size: int = 32, classes: int = 2) -> onnx.ModelProto:
    """U-Net (Ronneberger et al. 2015): per level two 3x3 Conv-BN-Relu then MaxPool; a bottleneck at
    twice the last width; back up by 2x2 stride-2 ConvTranspose, Concat with the level's skip, two
    3x3 convs; a 1x1 conv to per-pixel class logits [1, classes, size, size]."""
    b = Builder("unet", opset, seed)
    h = b.input("input", (1, 3, size, size))

    def double_conv(t: str, cin: int, cout: int) -> str:
        return b.conv_bn(b.conv_bn(t, cin, cout, 3), cout, cout, 3)

    channels, skips = 3, []
    for width in widths:
        h = double_conv(h, channels, width)
        skips.append((h, width))
        h = b.max_pool(h, 2, 2)
        channels = width
    h = double_conv(h, channels, 2 * channels)
    channels *= 2
    for skip, width in reversed(skips):
        up = b.conv_transpose(h, channels, width, 2, 2)
        h = double_conv(b.op("Concat", [skip, up], axis=1), 2 * width, width)
        channels = width
    b.output(b.conv(h, channels, classes, 1), (1, classes, size, size))
    return b.model()
