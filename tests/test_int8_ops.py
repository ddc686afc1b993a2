"""The integer operators beyond what the ONNX node tests exercise, each against onnxruntime's own
kernel, bit for bit: grouped, depthwise, strided, dilated and 1-D/3-D QLinearConv with per-channel
weights and bias, mixed uint8/int8 operands, batched and broadcast QLinearMatMul, per-row and
per-column zero points of MatMulInteger, ConvInteger with per-channel zero points, and
QuantizeLinear's rounding ties (half to even, as MLAS rounds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import harness
import hetgen
from hetgen.frontend import import_model
from hetgen.runtime.reference import ort_session

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

RNG = np.random.default_rng(7)
TYPES = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.int32: TensorProto.INT32}


def q_random(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def one_node_model(node: onnx.NodeProto, inputs: dict[str, np.ndarray], constants: dict[str, np.ndarray]):
    graph = helper.make_graph(
        [node],
        "one",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in inputs.items()
        ],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in node.output],
        initializer=[numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def run_both(node: onnx.NodeProto, inputs: dict[str, np.ndarray], constants: dict[str, np.ndarray], exact_ints=False):
    """(hetgen's outputs, the reference's) for a one-node model; `constants` become initializers. The
    reference is onnxruntime, or onnx's reference evaluator for integer-only operators with zero
    points onnxruntime refuses (per row / per channel: exact integer arithmetic either way)."""
    model = one_node_model(node, inputs, constants)
    if exact_ints:
        try:
            expected = ReferenceEvaluator(model).run(None, inputs)
        except ValueError:  # the evaluator's own limits; the caller checks another way
            expected = [None] * len(node.output)
    else:
        expected = ort_session(model.SerializeToString()).run(None, inputs)
    got = harness.run_model(model, inputs)
    return [got[n] for n in node.output], expected


def _x86_without_vnni() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx2" in flags and "vnni" not in flags


def assert_matches_onnxruntime(got, expected, node, inputs, constants):
    """Bit for bit with onnxruntime, except where onnxruntime's u8 x s8 kernels saturate: on AVX2
    without VNNI (vpmaddubsw) a pair of products is clamped to int16, several steps off the exact
    result. There the ONNX reference evaluator decides: onnxruntime must be off from it by more than
    a step, and hetgen within one step of it (it rounds in float64 where hetgen and MLAS use a float32
    multiplier). Where the evaluator cannot judge the shape either (it refuses 3-D, and is off from
    both on 1-D), the case is skipped on such a CPU, saying why; elsewhere it stays bit for bit."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if np.array_equal(got, expected) or not (_x86_without_vnni() and expected.dtype == np.uint8):
        np.testing.assert_array_equal(got, expected)
        return
    try:
        (exact,) = ReferenceEvaluator(one_node_model(node, inputs, constants)).run(None, inputs)
    except ValueError:
        pytest.skip("onnxruntime's u8 x s8 kernel saturates on this CPU (AVX2, no VNNI); onnx's evaluator refuses it")
    theirs = np.abs(expected.astype(np.int64) - exact.astype(np.int64)).max()
    ours = np.abs(got.astype(np.int64) - exact.astype(np.int64)).max()
    if theirs > 1 and ours > 1:
        pytest.skip(
            f"onnxruntime saturates on this CPU (AVX2, no VNNI), and onnx's evaluator is off from both ({ours})"
        )
    assert theirs > 1, f"hetgen is {ours} steps off onnxruntime, which agrees with the exact result"
    assert ours <= 1, f"hetgen is {ours} steps off the exact result (onnxruntime saturates: {theirs} steps)"


CONV_CASES = {
    "grouped_strided": dict(x=(1, 8, 9, 11), w=(12, 2, 3, 3), group=4, strides=[2, 1], pads=[1, 0, 1, 2]),
    "depthwise": dict(x=(2, 6, 10, 10), w=(6, 1, 3, 3), group=6, pads=[1, 1, 1, 1]),
    "depthwise_multiplier_dilated": dict(
        x=(1, 4, 12, 12), w=(8, 1, 3, 3), group=4, dilations=[2, 2], pads=[2, 2, 2, 2]
    ),
    "conv1d": dict(x=(1, 5, 20), w=(7, 5, 4), strides=[3], pads=[2, 1]),
    "conv3d": dict(x=(1, 3, 5, 6, 6), w=(4, 3, 2, 3, 3), pads=[0, 1, 1, 1, 1, 0]),
    "pointwise_large": dict(x=(1, 64, 16, 16), w=(96, 64, 1, 1)),
    # fully connected (one pixel), an input longer than the 256-value chunks it was once widened in
    "fully_connected_chunks": dict(x=(2, 600, 1, 1), w=(7, 600, 1, 1)),
    "fully_connected_grouped": dict(x=(2, 12, 1, 1), w=(15, 4, 1, 1), group=3),
}


@pytest.mark.parametrize("case", CONV_CASES, ids=list(CONV_CASES))
@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8], ids=["u8", "s8"])
def test_qlinearconv_matches_onnxruntime(case, x_dtype):
    spec = dict(CONV_CASES[case])
    x_shape, w_shape = spec.pop("x"), spec.pop("w")
    channels = w_shape[0]
    zero_x = np.array(3 if x_dtype is np.int8 else 131, x_dtype)
    constants = {
        "xs": np.float32(0.05),
        "xz": zero_x,
        "w": q_random(w_shape, np.int8),
        "ws": (RNG.random(channels) * 0.01 + 0.002).astype(np.float32),
        "wz": np.zeros(channels, np.int8),
        "ys": np.float32(0.37),
        "yz": np.array(-7 if x_dtype is np.int8 else 120, x_dtype),
        "b": RNG.integers(-3000, 3000, channels).astype(np.int32),
    }
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **spec)
    inputs = {"x": q_random(x_shape, x_dtype)}
    (got,), (expected,) = run_both(node, inputs, constants)
    assert_matches_onnxruntime(got, expected, node, inputs, constants)
    assert len(np.unique(expected)) > 8  # not saturated: the comparison means something


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "b_params"),
    [((3, 5, 33), (4, 1, 33, 17), ()), ((6, 33), (33, 17), (1, 17))],
    ids=["batched_broadcast", "per_column"],
)
def test_qlinearmatmul_matches_onnxruntime(a_shape, b_shape, b_params):
    constants = {
        "as": np.float32(0.02),
        "az": np.array(128, np.uint8),
        "b": q_random(b_shape, np.int8),
        "bs": (RNG.random(b_params) * 0.02 + 0.001).astype(np.float32),
        "bz": np.zeros(b_params, np.int8),
        "ys": np.float32(0.11),
        "yz": np.array(100, np.uint8),
    }
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    inputs = {"a": q_random(a_shape, np.uint8)}
    (got,), (expected,) = run_both(node, inputs, constants)
    assert_matches_onnxruntime(got, expected, node, inputs, constants)
    assert len(np.unique(expected)) > 8


def test_matmulinteger_per_row_and_column_zero_points():
    inputs = {"a": q_random((2, 6, 9), np.uint8), "b": q_random((9, 5), np.int8)}
    constants = {"az": q_random((6,), np.uint8), "bz": q_random((5,), np.int8)}
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    (got,), _ = run_both(node, inputs, constants, exact_ints=True)
    # neither onnxruntime nor onnx's evaluator takes a per-row A zero point: the spec, in numpy
    a = inputs["a"].astype(np.int32) - constants["az"].astype(np.int32)[:, None]
    b = inputs["b"].astype(np.int32) - constants["bz"].astype(np.int32)[None, :]
    np.testing.assert_array_equal(got, a @ b)


def test_convinteger_per_channel_zero_points():
    inputs = {"x": q_random((1, 3, 8, 8), np.uint8)}
    constants = {"w": q_random((4, 3, 3, 3), np.uint8), "xz": np.array(100, np.uint8), "wz": q_random((4,), np.uint8)}
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])
    (got,), (expected,) = run_both(node, inputs, constants, exact_ints=True)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("k", [530, 130], ids=["chunks", "one_chunk"])
def test_convinteger_fully_connected_with_weight_zero_points_across_chunks(k):
    """The weight zero point taken out of the sums as zp * sum(x), the sum over every chunk; an
    input of one chunk has its odd last row's sum stored alone."""
    inputs = {"x": q_random((1, k, 1, 1), np.uint8)}
    constants = {"w": q_random((5, k, 1, 1), np.uint8), "xz": np.array(77, np.uint8), "wz": q_random((5,), np.uint8)}
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"])
    (got,), (expected,) = run_both(node, inputs, constants, exact_ints=True)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantize_rounds_ties_to_even_and_saturates(dtype):
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 1e9, -1e9, 300.0, -300.0], np.float32)
    x = np.concatenate([ties, RNG.standard_normal(52).astype(np.float32) * 50]).reshape(4, 16)
    constants = {"s": np.float32(1.0), "z": np.array(0 if dtype is np.int8 else 10, dtype)}
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    (got,), (expected,) = run_both(node, {"x": x}, constants)
    np.testing.assert_array_equal(got, expected)


def test_per_axis_dequantize_along_a_middle_axis():
    constants = {"s": (RNG.random(5) + 0.1).astype(np.float32), "z": q_random((5,), np.int8)}
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=-2)
    (got,), (expected,) = run_both(node, {"x": q_random((2, 3, 5, 4), np.int8)}, constants)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_qdq_add_and_mul_requantize_exactly_across_scales(op):
    """DequantizeLinear → Add/Mul (broadcast) → QuantizeLinear with three different scales becomes one
    int8 kernel (QLinearAdd/QLinearMul) that agrees bit for bit with the float path."""
    constants = {
        "sa": np.float32(0.031),
        "za": np.array(-3, np.int8),
        "sb": np.float32(0.17),
        "zb": np.array(9, np.int8),
        "sy": np.float32(0.045 if op == "Add" else 0.09),
        "zy": np.array(-20, np.int8),
    }
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["fa"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["fb"]),
        helper.make_node(op, ["fa", "fb"], ["f"]),
        helper.make_node("QuantizeLinear", ["f", "sy", "zy"], ["y"]),
    ]
    inputs = {"a": q_random((2, 4, 6, 6), np.int8), "b": q_random((4, 1, 6), np.int8)}
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info(n, TensorProto.INT8, v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
        initializer=[numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert [n.op for n in import_model(model).nodes] == [f"QLinear{op}"]
    expected = ort_session(model.SerializeToString()).run(None, inputs)[0]
    got = harness.run_model(model, inputs)["y"]
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(expected)) > 16


@pytest.mark.parametrize("k", [2, 16], ids=["2x2", "global"])
def test_qdq_average_pool_sums_exactly_and_rounds_ties_to_even(k, tmp_path):
    """DequantizeLinear → AveragePool → QuantizeLinear becomes QLinearAveragePool. A 2x2 average of
    one scale's values is k/4 steps, so half the outputs are ties; the float path decides them by
    the last bit of a float32 sum (onnxruntime's pooling kernel and a plain float formula disagree
    on a few), hetgen by the rule: exact integer sums, rounded half to even. A window of the whole
    plane (the application cores' global kernel, qavgpool_global.c.j2) likewise."""
    inits = {"s": np.float32(0.0421), "z": np.array(-5, np.int8)}
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
        helper.make_node("AveragePool", ["f"], ["p"], kernel_shape=[k, k], strides=[k, k]),
        helper.make_node("QuantizeLinear", ["p", "s", "z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "avg",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 16, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
        initializer=[numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.op for n in import_model(model).nodes] == ["QLinearAveragePool"]
    x = q_random((1, 16, 16, 16), np.int8)
    got = harness.run_model(model, {"x": x})["y"]
    sums = (x.astype(np.int64) + 5).reshape(1, 16, 16 // k, k, 16 // k, k).sum(axis=(3, 5))
    exact = np.clip(np.rint(sums / (k * k)) - 5, -128, 127).astype(np.int8)  # numpy's rint: half to even
    np.testing.assert_array_equal(got, exact)
    # the whole program on an application core: the global window takes its own kernel
    project = hetgen.compile("host", model, out=tmp_path / "p", native_only=True)
    kernels = "".join(p.read_text() for p in (project / "host" / "kernels").glob("*.c"))
    assert ("summed exactly in one run" in kernels) == (k == 16)
    np.testing.assert_array_equal(hetgen.load(project).run({"x": x})["y"], exact)
    onnxruntime = ort_session(model.SerializeToString()).run(None, {"x": x})[0]
    assert np.abs(onnxruntime.astype(int) - exact).max() <= 1


def test_qdq_concat_of_different_scales_requantizes_exactly():
    """DequantizeLinear x3 (three scales) → Concat → QuantizeLinear: one QLinearConcat that copies the
    input already at the output's scale and requantizes the others, bit-exact with the float path."""
    constants = {"s0": np.float32(0.02), "s1": np.float32(0.05), "s2": np.float32(0.013), "z": np.array(4, np.int8)}
    nodes = [helper.make_node("DequantizeLinear", [f"x{i}", f"s{i}", "z"], [f"f{i}"]) for i in range(3)]
    nodes += [
        helper.make_node("Concat", ["f0", "f1", "f2"], ["c"], axis=1),
        helper.make_node("QuantizeLinear", ["c", "s1", "z"], ["y"]),
    ]
    inputs = {f"x{i}": q_random((2, 3 + i, 5, 4), np.int8) for i in range(3)}
    graph = helper.make_graph(
        nodes,
        "qcat",
        [helper.make_tensor_value_info(n, TensorProto.INT8, v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
        initializer=[numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert [n.op for n in import_model(model).nodes] == ["QLinearConcat"]
    expected = ort_session(model.SerializeToString()).run(None, inputs)[0]
    np.testing.assert_array_equal(harness.run_model(model, inputs)["y"], expected)
    assert np.array_equal(expected[:, 3:7], inputs["x1"])  # the input at the output's scale, copied


@pytest.mark.parametrize("op", ["Sigmoid", "LeakyRelu"])
def test_qdq_activation_becomes_a_table(op):
    """DequantizeLinear → Sigmoid/LeakyRelu → QuantizeLinear: one 256-entry table (QLinearSigmoid,
    QLinearLeakyRelu); every input level against onnxruntime's float path, within one step and
    nearly all equal (the two exp implementations differ in the last bits)."""
    inits = {"s": np.float32(0.06), "z": np.array(-10, np.int8), "t": np.float32(1 / 250), "u": np.array(-128, np.int8)}
    if op == "LeakyRelu":
        inits.update(t=np.float32(0.05), u=np.array(0, np.int8))
    attrs = {"alpha": 0.2} if op == "LeakyRelu" else {}
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
        helper.make_node(op, ["f"], ["a"], **attrs),
        helper.make_node("QuantizeLinear", ["a", "t", "u"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "lut",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [2, 128])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
        initializer=[numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.op for n in import_model(model).nodes] == [f"QLinear{op}"]
    x = np.arange(-128, 128, dtype=np.int8).reshape(2, 128)  # every level
    got = harness.run_model(model, {"x": x})["y"].astype(int)
    expected = ort_session(model.SerializeToString()).run(None, {"x": x})[0].astype(int)
    assert np.abs(got - expected).max() <= 1 and (got == expected).mean() >= 0.98
    assert len(np.unique(got)) > 32


# Each int8 convolution kernel that finds its padding row by row, as a model builds it (-O3,
# -march=native): GCC 12.2's vectoriser once turned such a row test into wrong masks across rows
# (templates/kernels/conv_implicit_planes.c.j2, docs/kernels.md). 16 channels of 14 x 14 with a 3x3
# window and padding 1 were the failing shape. One model, a full and a depthwise convolution of the
# same input, per side: none, the generic kernel (qconv.c.j2); bare metal, its Cortex-M unfolding
# (rows of taps, the depthwise band of widened rows); hosted, hg_qgemm.h's packed panels and
# depthwise plane kernels (on AVX-512 VNNI, its padding masks).
@pytest.mark.parametrize("side", [None, "bare_metal", "hosted"], ids=["generic", "bare_metal", "hosted"])
def test_padding_row_kernels_at_o3_match_onnxruntime(side):
    constants = {"xs": np.float32(0.05), "xz": np.array(3, np.int8), "wz": np.array(0, np.int8)}
    nodes = []
    for name, group, y_scale in (("full", 1, 0.37), ("depthwise", 16, 0.1)):
        constants.update(
            {
                f"{name}_w": q_random((16, 16 // group, 3, 3), np.int8),
                f"{name}_ws": np.float32(0.004),
                f"{name}_ys": np.float32(y_scale),
                f"{name}_yz": np.array(-7, np.int8),
                f"{name}_b": RNG.integers(-3000, 3000, 16).astype(np.int32),
            }
        )
        operands = ["x", "xs", "xz", f"{name}_w", f"{name}_ws", "wz", f"{name}_ys", f"{name}_yz", f"{name}_b"]
        nodes.append(helper.make_node("QLinearConv", operands, [name], name=name, group=group, pads=[1, 1, 1, 1]))
    inputs = {"x": q_random((1, 16, 14, 14), np.int8)}
    graph = helper.make_graph(
        nodes,
        "padding_rows",
        [helper.make_tensor_value_info("x", TensorProto.INT8, (1, 16, 14, 14))],
        [helper.make_tensor_value_info(n.name, TensorProto.INT8, (1, 16, 14, 14)) for n in nodes],
        initializer=[numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    expected = ort_session(model.SerializeToString()).run(None, inputs)
    got = harness.run_model(model, inputs, side=side, opt=("-O3", "-march=native"))
    for node, want in zip(nodes, expected):
        np.testing.assert_array_equal(got[node.name], want, err_msg=node.name)
        assert len(np.unique(want)) > 8  # not saturated: the comparison means something
