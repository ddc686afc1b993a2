"""A small ONNX graph builder that writes each operator in the form its opset requires.

The model builders use it so that the same network can be emitted at any opset from 7 to 21:
attribute-vs-input forms (Clip, Split, Slice, Squeeze/Unsqueeze, ReduceMean) follow the opset, and
models at IR version < 4 list their initializers among the graph inputs, as those versions required.
Weights are drawn from a seeded generator, so the bytes of a model depend on its arguments only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, name: str, opset: int, seed: int = 0):
        if not 7 <= opset <= 21:
            raise ValueError(f"opset {opset}: the model builders emit opsets 7 to 21")
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._counts: dict[str, int] = {}

    # -- names, tensors -------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        count = self._counts.get(base, 0)
        self._counts[base] = count + 1
        return f"{base}_{count}" if count else base

    def input(self, name: str, shape: Sequence[int], elem: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def output(self, tensor: str, shape: Sequence[int] | None, elem: int = TensorProto.FLOAT) -> None:
        self.outputs.append(helper.make_tensor_value_info(tensor, elem, None if shape is None else list(shape)))

    def const(self, value, base: str = "const", dtype=None) -> str:
        name = self.fresh(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def ints(self, values, base: str = "shape") -> str:
        return self.const(np.asarray(values, dtype=np.int64), base)

    def scalar(self, value: float, base: str = "scalar") -> str:
        return self.const(np.asarray(value, dtype=np.float32), base)

    def weight(self, shape: Sequence[int], base: str, fan_in: int | None = None) -> str:
        fan_in = fan_in or math.prod(shape[1:]) or 1
        value = self.rng.standard_normal(shape).astype(np.float32) * np.float32(math.sqrt(2.0 / fan_in))
        return self.const(value, base)

    def bias(self, size: int, base: str) -> str:
        return self.const((self.rng.standard_normal(size) * 0.05).astype(np.float32), base)

    # -- generic node ---------------------------------------------------------------------------

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1, name: str | None = None, **attrs):
        """Add a node; return its output name, or the tuple of names when `outputs` > 1."""
        node_name = self.fresh(name or op_type.lower())
        names = [f"{node_name}_out{i}" if outputs > 1 else node_name for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=node_name, **attrs))
        return tuple(names) if outputs > 1 else names[0]

    # -- operators whose form depends on the opset ------------------------------------------------

    def clip(self, x: str, low: float, high: float) -> str:
        if self.opset < 11:
            return self.op("Clip", [x], min=float(low), max=float(high))
        return self.op("Clip", [x, self.scalar(low, "clip_min"), self.scalar(high, "clip_max")])

    def split(self, x: str, sizes: Sequence[int], axis: int) -> tuple[str, ...]:
        if self.opset < 13:
            return self.op("Split", [x], outputs=len(sizes), axis=axis, split=list(sizes))
        return self.op("Split", [x, self.ints(sizes, "split")], outputs=len(sizes), axis=axis)

    def slice(self, x: str, starts, ends, axes) -> str:
        if self.opset < 10:
            return self.op("Slice", [x], starts=list(starts), ends=list(ends), axes=list(axes))
        return self.op("Slice", [x, self.ints(starts, "starts"), self.ints(ends, "ends"), self.ints(axes, "axes")])

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset < 13:
            return self.op("Unsqueeze", [x], axes=list(axes))
        return self.op("Unsqueeze", [x, self.ints(axes, "axes")])

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset < 13:
            return self.op("Squeeze", [x], axes=list(axes))
        return self.op("Squeeze", [x, self.ints(axes, "axes")])

    def reduce_mean(self, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        if self.opset < 18:
            return self.op("ReduceMean", [x], axes=list(axes), keepdims=keepdims)
        return self.op("ReduceMean", [x, self.ints(axes, "axes")], keepdims=keepdims)

    def softmax(self, x: str, rank: int) -> str:
        """Softmax over the last axis (the one form every opset agrees on)."""
        return self.op("Softmax", [x], axis=rank - 1 if self.opset < 13 else -1)

    # -- layers -----------------------------------------------------------------------------------

    def conv(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, pad: int | None = None, group: int = 1):
        pad = kernel // 2 if pad is None else pad
        w = self.weight((cout, cin // group, kernel, kernel), "conv_w")
        b = self.bias(cout, "conv_b")
        return self.op(
            "Conv",
            [x, w, b],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=group,
        )

    def conv_transpose(self, x: str, cin: int, cout: int, kernel: int, stride: int) -> str:
        """Learned upsampling (U-Net's up-convolution): weights [cin, cout, k, k], no padding."""
        w = self.weight((cin, cout, kernel, kernel), "deconv_w", fan_in=cin * kernel * kernel)
        b = self.bias(cout, "deconv_b")
        return self.op("ConvTranspose", [x, w, b], kernel_shape=[kernel, kernel], strides=[stride, stride])

    def batch_norm(self, x: str, channels: int) -> str:
        rng = self.rng
        scale = self.const(rng.uniform(0.5, 1.5, channels).astype(np.float32), "bn_scale")
        bias = self.const((rng.standard_normal(channels) * 0.1).astype(np.float32), "bn_bias")
        mean = self.const((rng.standard_normal(channels) * 0.1).astype(np.float32), "bn_mean")
        var = self.const(rng.uniform(0.5, 1.5, channels).astype(np.float32), "bn_var")
        return self.op("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)

    def conv_bn(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, group: int = 1, act: str = "relu"):
        y = self.batch_norm(self.conv(x, cin, cout, kernel, stride, group=group), cout)
        if act == "relu":
            return self.op("Relu", [y])
        if act == "relu6":
            return self.clip(y, 0.0, 6.0)
        if act == "hswish":
            return self.hard_swish(y)
        return y

    def hard_sigmoid(self, x: str) -> str:
        """relu6(x + 3) / 6, torch's hardsigmoid (ONNX's default alpha 0.2 is Keras')."""
        return self.op("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)

    def hard_swish(self, x: str) -> str:
        """x * hardsigmoid(x): HardSwish from opset 14, before it the Mul exporters wrote."""
        if self.opset >= 14:
            return self.op("HardSwish", [x])
        return self.op("Mul", [x, self.hard_sigmoid(x)])

    def max_pool(self, x: str, kernel: int, stride: int, pad: int = 0) -> str:
        return self.op("MaxPool", [x], kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4)

    def avg_pool(self, x: str, kernel: int, stride: int, pad: int = 0) -> str:
        return self.op("AveragePool", [x], kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4)

    def gemm(self, x: str, features_in: int, features_out: int) -> str:
        w = self.weight((features_out, features_in), "fc_w")
        return self.op("Gemm", [x, w, self.bias(features_out, "fc_b")], transB=1)

    def classifier(self, x: str, channels: int, classes: int) -> str:
        """GlobalAveragePool → Flatten → Gemm: the usual CNN head."""
        pooled = self.op("GlobalAveragePool", [x])
        return self.gemm(self.op("Flatten", [pooled], axis=1), channels, classes)

    # -- the model --------------------------------------------------------------------------------

    def model(self) -> onnx.ModelProto:
        opsets = [helper.make_opsetid("", self.opset)]
        ir_version = helper.find_min_ir_version_for(opsets)
        inputs = list(self.inputs)
        if ir_version < 4:  # initializers had to be graph inputs before IR version 4
            inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.initializers]
        graph = helper.make_graph(self.nodes, self.name, inputs, self.outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=opsets, producer_name="hetgen.models")
        model.ir_version = ir_version
        onnx.checker.check_model(model)
        return model
