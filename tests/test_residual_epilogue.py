"""A residual Add fused into the Conv that feeds it: Conv (+ folded BN) + Add(other) (+ Relu), one kernel.

Compiled for real and compared with onnxruntime; each kernel file's first line names the operators
it computes, which shows whether the Add was fused.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.models import resnet
from tests.test_fused_transformer import compile_and_compare

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)


def conv_add_model(
    channels=16,
    out_channels=16,
    size=12,
    kernel=3,
    stride=1,
    group=1,
    bias=True,
    relu=True,
    add_first=False,
    other="input",
) -> onnx.ModelProto:
    """y = Relu(Conv(x) + other); `other` is a graph input, a tensor computed before the Conv
    ("before"), one computed after it ("after"), or a per-channel constant ("broadcast")."""
    rng = np.random.default_rng(channels + out_channels + kernel + stride)
    pad = kernel // 2
    out_size = (size + 2 * pad - kernel) // stride + 1
    out_shape = [1, out_channels, out_size, out_size]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])]
    w = rng.standard_normal((out_channels, channels // group, kernel, kernel)).astype(np.float32) * 0.2
    inits = [numpy_helper.from_array(w, "w")]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b"))
        conv_inputs.append("b")
    conv = helper.make_node(
        "Conv", conv_inputs, ["c"], kernel_shape=[kernel, kernel], pads=[pad] * 4, strides=[stride] * 2, group=group
    )
    nodes = [conv]
    if other == "input":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, out_shape))
    elif other == "before":
        inputs.append(helper.make_tensor_value_info("r0", TensorProto.FLOAT, out_shape))
        nodes.insert(0, helper.make_node("Sigmoid", ["r0"], ["r"]))
    elif other == "after":
        inputs.append(helper.make_tensor_value_info("r0", TensorProto.FLOAT, out_shape))
        nodes.append(helper.make_node("Sigmoid", ["r0"], ["r"]))
    else:
        inits.append(numpy_helper.from_array(rng.standard_normal((out_channels, 1, 1)).astype(np.float32), "r"))
    nodes.append(helper.make_node("Add", ["r", "c"] if add_first else ["c", "r"], ["s"]))
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    outputs = [helper.make_tensor_value_info("y" if relu else "s", TensorProto.FLOAT, out_shape)]
    graph = helper.make_graph(nodes, "conv_add", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def fused(labels: list[str]) -> list[str]:
    return [label for label in labels if label.startswith("Conv") and "Add" in label]


@pytest.mark.parametrize(
    "params",
    [
        {},  # 3x3, 16 channels: Winograd
        {"channels": 64, "out_channels": 64, "size": 14, "add_first": True},  # Winograd, wider
        {"kernel": 1, "bias": False, "relu": False},  # pointwise, no bias, no activation
        {"group": 16, "add_first": True},  # depthwise, 16 channels a vector (conv_depthwise_cv.c.j2)
        # implicit GEMM (enough work that the small-plane kernel leaves it to the GEMM); other from a node
        {"channels": 64, "out_channels": 64, "stride": 2, "size": 13, "other": "before"},
    ],
)
def test_conv_add_relu_is_one_kernel(tmp_path, params):
    labels = compile_and_compare(tmp_path, conv_add_model(**params))
    assert len(fused(labels)) == 1, labels
    assert not any(label.startswith(("Add", "Relu")) for label in labels), labels


def test_add_fused_when_other_is_computed_after_the_conv(tmp_path):
    """The fused unit is one placement group, run once both of its inputs exist: the order of the
    operators in the model does not matter."""
    labels = compile_and_compare(tmp_path, conv_add_model(other="after"))
    assert len(fused(labels)) == 1, labels


def test_add_not_fused_when_other_broadcasts(tmp_path):
    labels = compile_and_compare(tmp_path, conv_add_model(other="broadcast"))
    assert not fused(labels), labels
    assert any(label.startswith("Add") for label in labels), labels


def test_resnet_blocks_write_their_sum_once(tmp_path):
    labels = compile_and_compare(tmp_path, resnet())
    assert len(fused(labels)) == 3, labels  # one residual Add per basic block
    assert not any(label.startswith("Add") for label in labels), labels
