"""Elementwise, reduction and data-movement kernels: semantics against onnx's reference evaluator
(and numpy), the integer and float edge cases C leaves undefined, and the shape of the generated
loops (collapsed dimensions, memcpy rows) that makes them fast.

The ONNX backend node tests of these operators run in test_conformance.py; these tests cover what
those do not: broadcasting patterns, edge values, fused epilogues, and the generated C itself.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import harness
from hetgen.codegen.kernels import kernel_source
from hetgen.ir import DType, Node, TensorType
from hetgen.ops.base import Epilogue, OpInstance, Unsupported
from hetgen.ops.registry import op_def
from hetgen.templates_dir import templates_dir

RNG = np.random.default_rng(7)


# -- helpers -----------------------------------------------------------------------------------


def _model(
    op: str, inputs: dict[str, np.ndarray], outputs: int = 1, opset: int = 21, out_types=None, **attrs
) -> onnx.ModelProto:
    """A one-node model; its outputs are typed from what onnx's reference evaluator computes,
    unless `out_types` gives their (onnx dtype, shape)."""
    out_names = [f"y{i}" for i in range(outputs)]
    values = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()
    ]

    def build(out_types) -> onnx.ModelProto:
        node = helper.make_node(op, list(inputs), out_names, **attrs)
        outs = [
            helper.make_tensor_value_info(n, *t) if t else onnx.ValueInfoProto(name=n)
            for n, t in zip(out_names, out_types)
        ]
        graph = helper.make_graph([node], "g", values, outs)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    if out_types is not None:
        return build(out_types)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = ReferenceEvaluator(build([None] * outputs)).run(None, inputs)
    return build([(helper.np_dtype_to_tensor_dtype(r.dtype), r.shape) for r in results])


def check_against_reference(op: str, inputs: dict, frozen=(), outputs: int = 1, opset: int = 21, **attrs):
    """Run one node through the harness and onnx's reference evaluator; compare them."""
    model = _model(op, inputs, outputs, opset, **attrs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ReferenceEvaluator(model).run(None, inputs)
    got = harness.run_model(model, inputs, frozen=frozen)
    for i, want in enumerate(expected):
        actual = got[f"y{i}"]
        assert actual.shape == want.shape, (actual.shape, want.shape)
        assert actual.dtype == want.dtype, (actual.dtype, want.dtype)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(actual, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            np.testing.assert_array_equal(actual, want)
    return got


def _instance(op: str, in_types, out_types, attrs=(), constants=(), epilogue=()) -> OpInstance:
    node = Node(
        "n0",
        op,
        tuple(f"x{i}" for i in range(len(in_types))),
        tuple(f"y{i}" for i in range(len(out_types))),
        tuple(sorted(attrs)),
    )
    constants = tuple(constants) + (None,) * (len(in_types) - len(constants))
    return OpInstance(node, tuple(in_types), tuple(out_types), constants, tuple(epilogue))


def _source(instance: OpInstance) -> str:
    kernel = op_def(instance.node.op, instance.node.opset).lower(instance)
    return kernel_source(kernel, "hg_test", instance.node.label)


def run_instance(instance: OpInstance, arrays: list[np.ndarray], tmp_path) -> list[np.ndarray]:
    """Compile one lowered instance alone and run it on `arrays` (inputs)."""
    kernel = op_def(instance.node.op, instance.node.opset).lower(instance)
    path = tmp_path / "k.c"
    path.write_text(kernel_source(kernel, "hg_test", instance.node.label))
    lib = tmp_path / "k.so"
    runtime = templates_dir() / "runtime"
    subprocess.run(
        ["cc", *harness.CFLAGS, "-I", str(runtime), "-o", str(lib), str(path), "-lm"], check=True, capture_output=True
    )
    outs = [np.zeros(t.shape, t.dtype.numpy) for t in instance.output_types]
    buffers = [np.ascontiguousarray(a) for a in arrays] + outs
    args = (ctypes.c_void_p * len(buffers))(*[b.ctypes.data for b in buffers])
    ctypes.CDLL(str(lib)).hg_test(args)
    return outs


def _loops(source: str) -> int:
    return source.count("for (")


F32 = np.float32


# -- broadcasting and elementwise -------------------------------------------------------------

BROADCASTS = [
    ((2, 3, 4, 5), (2, 3, 4, 5)),
    ((2, 3, 4, 5), ()),
    ((2, 3, 4, 5), (1, 3, 1, 1)),
    ((2, 3, 4, 5), (5,)),
    ((3, 1), (1, 4)),
    ((1, 3, 1), (2, 1, 4)),
    ((4, 1, 6), (4, 5, 1)),
    ((2, 1, 3), (1,)),
]


@pytest.mark.cc
@pytest.mark.parametrize(("a_shape", "b_shape"), BROADCASTS)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Less"])
def test_binary_broadcasting(op, a_shape, b_shape):
    a = RNG.standard_normal(a_shape).astype(F32)
    b = (RNG.standard_normal(b_shape).astype(F32) + 3).astype(F32)
    check_against_reference(op, {"a": a, "b": b})


@pytest.mark.cc
def test_variadic_broadcasting():
    # the first input has the full shape: onnx's reference Mean accumulates into it
    inputs = {
        "a": RNG.random((2, 3, 4)).astype(F32),
        "b": RNG.random((3, 1)).astype(F32),
        "c": RNG.random(4).astype(F32),
    }
    for op in ("Sum", "Mean", "Max", "Min"):
        check_against_reference(op, inputs)


def test_same_shapes_are_one_flat_loop():
    t = TensorType(DType.FLOAT32, (8, 3, 32, 32))
    source = _source(_instance("Add", [t, t], [t]))
    assert _loops(source) == 1 and "i0 < 24576" in source


def test_channel_bias_is_a_unit_stride_inner_loop():
    x = TensorType(DType.FLOAT32, (8, 3, 32, 32))
    bias = TensorType(DType.FLOAT32, (1, 3, 1, 1))
    source = _source(_instance("Add", [x, bias], [x]))
    assert _loops(source) == 3  # images, channels, pixels (H and W merged)
    assert "p_a[i0 * 3072 + i1 * 1024 + i2]" in source and "p_b[i1]" in source
    assert "%" not in source and "/" not in source.split("{", 1)[1]  # no index arithmetic per element


@pytest.mark.cc
def test_add_applies_fused_relu(tmp_path):
    t = TensorType(DType.FLOAT32, (4, 5))
    instance = _instance("Add", [t, t], [t], epilogue=[Epilogue("Relu")])
    a, b = RNG.standard_normal((4, 5)).astype(F32), RNG.standard_normal((4, 5)).astype(F32)
    (y,) = run_instance(instance, [a, b], tmp_path)
    np.testing.assert_allclose(y, np.maximum(a + b, 0), rtol=1e-6)
    assert op_def("Add").fusable_epilogue


@pytest.mark.cc
def test_unary_math_matches_reference():
    x = np.linspace(-6, 6, 97, dtype=F32).reshape(97)
    for op, attrs in [
        ("Sigmoid", {}),
        ("Softplus", {}),
        ("Mish", {}),
        ("Elu", {"alpha": 0.7}),
        ("Selu", {}),
        ("Celu", {"alpha": 1.3}),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
        ("HardSwish", {}),
        ("LeakyRelu", {"alpha": 0.1}),
        ("ThresholdedRelu", {"alpha": 0.5}),
        ("Gelu", {"approximate": "tanh"}),
        ("Gelu", {}),
        ("Softsign", {}),
        ("Round", {}),
        ("Sign", {}),
    ]:
        check_against_reference(op, {"x": x}, **attrs)


@pytest.mark.cc
def test_softplus_does_not_overflow():
    x = np.array([-1000, -50, 0, 50, 100, 1000], dtype=F32)
    got = harness.run_model(_model("Softplus", {"x": x}), {"x": x})["y0"]
    np.testing.assert_allclose(got, [0, np.exp(-50), np.log(2), 50, 100, 1000], rtol=1e-6, atol=1e-30)


@pytest.mark.cc
def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6], dtype=F32)
    got = harness.run_model(_model("Round", {"x": x}), {"x": x})["y0"]
    np.testing.assert_array_equal(got, np.round(x))


# -- integer semantics (wrap-around, division by zero, shifts) --------------------------------

I32_EDGES = np.array([0, 1, -1, 7, -7, 2**31 - 1, -(2**31), 100, -100], dtype=np.int32)


@pytest.mark.cc
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
def test_integer_arithmetic_wraps_like_numpy(op, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max, 3, 0], dtype=dtype)
    b = np.array([1, 1, info.max, info.min, info.min], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op](a, b)
    got = harness.run_model(_model(op, {"a": a, "b": b}), {"a": a, "b": b})["y0"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.cc
def test_integer_div_and_mod_edges():
    a = np.repeat(I32_EDGES, len(I32_EDGES))
    b = np.tile(I32_EDGES, len(I32_EDGES))
    feeds = {"a": a, "b": b}
    div = harness.run_model(_model("Div", feeds), feeds)["y0"]
    mod = harness.run_model(_model("Mod", feeds), feeds)["y0"]
    fmod = harness.run_model(_model("Mod", feeds, fmod=1), feeds)["y0"]
    nonzero = b != 0
    safe = nonzero & ~((a == -(2**31)) & (b == -1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trunc = (np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64)).clip(1)) * np.sign(a) * np.sign(b)
        np.testing.assert_array_equal(div[safe], trunc[safe].astype(np.int32))
        np.testing.assert_array_equal(mod[safe], np.mod(a, b)[safe])
        np.testing.assert_array_equal(fmod[safe], np.fmod(a, b)[safe])
    assert (div[~nonzero] == 0).all() and (mod[~nonzero] == 0).all()  # numpy's x // 0 == 0
    assert div[(a == -(2**31)) & (b == -1)][0] == -(2**31)  # wraps, as numpy


@pytest.mark.cc
def test_float_mod_takes_the_divisors_sign():
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, 3.0], dtype=F32)
    b = np.array([2.0, 2.0, -2.0, -2.0, -1.0, np.inf], dtype=F32)
    feeds = {"a": a, "b": b}
    got = harness.run_model(_model("Mod", feeds), feeds)["y0"]
    np.testing.assert_array_equal(got, np.mod(a, b))
    assert np.signbit(got[4])


@pytest.mark.cc
def test_integer_pow():
    a = np.array([2, -3, 0, 1, -1, 7], dtype=np.int64)
    b = np.array([10, 3, 0, 100, 5, 2], dtype=np.int64)
    check_against_reference("Pow", {"a": a, "b": b})


def test_pow_by_two_is_a_multiplication():
    x = TensorType(DType.FLOAT32, (16,))
    two = TensorType(DType.FLOAT32, ())
    source = _source(_instance("Pow", [x, two], [x], constants=[None, np.array(2.0, np.float32)]))
    assert "powf" not in source and "a * a" in source


@pytest.mark.cc
@pytest.mark.parametrize(
    "to", [TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.INT8, TensorProto.BOOL]
)
def test_cast_float_to_integer_edges(to):
    x = np.array([0.0, -0.9, 2.9, -2.9, 127.5, 300.0, -1.0, 1e10, -1e10, np.nan, np.inf], dtype=F32)
    got = harness.run_model(_model("Cast", {"x": x}, to=to), {"x": x})["y0"]
    target = helper.tensor_dtype_to_np_dtype(to)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = x.astype(target)
    if target == np.bool_:
        np.testing.assert_array_equal(got, want)
    else:  # in range: truncation; out of range: what x86 (and so numpy here) gives
        np.testing.assert_array_equal(got[:7], want[:7])


@pytest.mark.cc
def test_bitshift_by_too_much_is_zero():
    a = np.array([1, 255, 16, 3], dtype=np.uint8)
    b = np.array([7, 8, 200, 0], dtype=np.uint8)
    got = harness.run_model(_model("BitShift", {"a": a, "b": b}, direction="LEFT"), {"a": a, "b": b})["y0"]
    np.testing.assert_array_equal(got, [128, 0, 0, 3])


@pytest.mark.cc
def test_clip_with_runtime_and_constant_bounds():
    x = np.array([-3, -1, 0, 1, 3, np.nan], dtype=F32)
    lo, hi = np.array(-1.5, F32), np.array(2.0, F32)
    check_against_reference("Clip", {"x": x, "lo": lo, "hi": hi})
    check_against_reference("Clip", {"x": x, "lo": lo, "hi": hi}, frozen=("lo", "hi"))


@pytest.mark.cc
def test_where_broadcasts_all_three():
    c = RNG.random((3, 1)) > 0.5
    check_against_reference("Where", {"c": c, "x": RNG.random((1, 4)).astype(F32), "y": np.array(9.0, F32)})


# -- reductions --------------------------------------------------------------------------------

REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2"]
REDUCTIONS += ["ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.cc
@pytest.mark.parametrize("axes", [(0,), (1,), (3,), (1, 2), (0, 3), (0, 2), (0, 1, 2, 3)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions(axes, keepdims):
    x = (RNG.random((2, 3, 4, 5)) + 0.5).astype(F32)
    for op in REDUCTIONS:
        check_against_reference(op, {"x": x, "axes": np.array(axes, np.int64)}, frozen=("axes",), keepdims=keepdims)


@pytest.mark.cc
def test_integer_and_bool_reductions():
    x = RNG.integers(-100, 100, (3, 4, 5)).astype(np.int32)
    axes = np.array([1], np.int64)
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"):
        check_against_reference(op, {"x": x, "axes": axes}, frozen=("axes",))
    flags = RNG.random((3, 4)) > 0.5
    check_against_reference("ReduceMax", {"x": flags, "axes": axes}, frozen=("axes",))


@pytest.mark.cc
def test_reduce_log_sum_exp_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0]], dtype=F32)
    model = _model("ReduceLogSumExp", {"x": x, "axes": np.array([1], np.int64)}, keepdims=0)
    got = harness.run_model(model, {"x": x, "axes": np.array([1], np.int64)}, frozen=("axes",))["y0"]
    np.testing.assert_allclose(got, [1000 + np.log(2), -1000 + np.log(2)], rtol=1e-6)


def test_reduce_keeps_the_accumulator_in_a_register_for_an_inner_reduced_run():
    x = TensorType(DType.FLOAT32, (64, 256))
    y = TensorType(DType.FLOAT32, (64, 1))
    source = _source(_instance("ReduceSum", [x, TensorType(DType.INT64, (1,))], [y], constants=[None, np.array([1])]))
    assert "acc = acc + v" in source


@pytest.mark.cc
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax_with_ties_and_nan(op, last):
    x = np.array([[1, 3, 3, 0], [2, np.nan, 5, np.nan], [4, 4, 4, 4]], dtype=F32)
    for axis in (0, 1):
        check_against_reference(op, {"x": x}, axis=axis, keepdims=0, select_last_index=last)


# -- data movement -----------------------------------------------------------------------------


@pytest.mark.cc
@pytest.mark.parametrize("perm", [(0, 2, 3, 1), (0, 3, 1, 2), (3, 2, 1, 0), (1, 0, 2, 3), (0, 1, 3, 2)])
def test_transpose(perm):
    x = RNG.random((2, 3, 4, 5)).astype(F32)
    check_against_reference("Transpose", {"x": x}, perm=list(perm))


def test_transpose_collapses_dimensions_that_stay_together():
    x = TensorType(DType.FLOAT32, (8, 3, 32, 32))
    y = TensorType(DType.FLOAT32, (8, 32, 32, 3))
    source = _source(_instance("Transpose", [x], [y], attrs=[("perm", (0, 2, 3, 1))]))
    assert _loops(source) == 3  # N, H*W, C
    keep_last = _source(
        _instance("Transpose", [x], [TensorType(DType.FLOAT32, (3, 8, 32, 32))], attrs=[("perm", (1, 0, 2, 3))])
    )
    assert "memcpy" in keep_last and _loops(keep_last) == 2  # rows of H*W floats


def test_reshape_is_one_memcpy():
    x = TensorType(DType.INT64, (4, 6))
    source = _source(_instance("Reshape", [x, TensorType(DType.INT64, (2,))], [TensorType(DType.INT64, (3, 8))]))
    assert source.count("memcpy") == 1 and _loops(source) == 0


@pytest.mark.cc
def test_concat_and_split_round_trip():
    a, b = RNG.random((2, 3, 4)).astype(F32), RNG.random((2, 5, 4)).astype(F32)
    check_against_reference("Concat", {"a": a, "b": b}, axis=1)
    check_against_reference("Concat", {"a": a.astype(np.int8), "b": b.astype(np.int8)}, axis=-2)
    x = RNG.random((2, 8, 3)).astype(F32)
    split = np.array([3, 5], np.int64)
    check_against_reference("Split", {"x": x, "split": split}, frozen=("split",), outputs=2, axis=1)
    check_against_reference("Split", {"x": x}, outputs=3, axis=1, num_outputs=3)


@pytest.mark.cc
@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        ([1, 0], [3, -1], [0, 2], [1, 2]),
        ([-1], [-1000], [1], [-1]),
        ([4, 2], [0, 100], [2, 0], [-2, 1]),
        ([0], [2**62], [1], [3]),
    ],
)
def test_slice(starts, ends, axes, steps):
    x = RNG.random((4, 5, 6)).astype(F32)
    feeds = {"x": x, **{k: np.array(v, np.int64) for k, v in zip(("s", "e", "a", "t"), (starts, ends, axes, steps))}}
    check_against_reference("Slice", feeds, frozen=("s", "e", "a", "t"))


@pytest.mark.cc
def test_gather_negative_and_out_of_range_indices():
    data = RNG.random((4, 5, 3)).astype(F32)
    indices = np.array([[0, -1], [2, -5]], np.int64)
    check_against_reference("Gather", {"data": data, "indices": indices}, axis=1)
    check_against_reference("Gather", {"data": data, "indices": indices[:, :1].astype(np.int32)}, axis=2)
    wild = np.array([0, 7, -9], np.int64)
    model = _model("Gather", {"d": data, "i": wild}, out_types=[(TensorProto.FLOAT, (4, 3, 3))], axis=1)
    got = harness.run_model(model, {"d": data, "i": wild})["y0"]
    np.testing.assert_array_equal(got[:, 0], data[:, 0])
    assert (got[:, 1:] == 0).all()  # out of range: zeros, never a read outside the input


@pytest.mark.cc
def test_gather_elements():
    data = RNG.random((3, 4)).astype(F32)
    indices = np.array([[0, -1, 2], [1, 0, -3], [3, 3, 0]], np.int64)
    check_against_reference("GatherElements", {"data": data, "indices": indices}, axis=1)
    check_against_reference(
        "GatherElements", {"data": data, "indices": np.array([[2, 0, 1, -1], [0, -3, 2, 1]])}, axis=0
    )


@pytest.mark.cc
def test_expand_and_tile():
    x = RNG.random((3, 1)).astype(F32)
    check_against_reference("Expand", {"x": x, "shape": np.array([2, 1, 4], np.int64)}, frozen=("shape",))
    check_against_reference("Tile", {"x": x, "r": np.array([2, 3], np.int64)}, frozen=("r",))


@pytest.mark.cc
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode):
    x = RNG.integers(0, 100, (2, 3, 4)).astype(np.int32)
    pads = np.array([0, 1, 2, 1, 2, -1], np.int64)  # the last one crops
    feeds = {"x": x, "pads": pads}
    if mode == "constant":
        feeds["value"] = np.array(-7, np.int32)
    extra = {"constant_values": -7} if mode == "constant" else {}
    want = np.pad(x[:, :, :-1], [(0, 1), (1, 2), (2, 0)], mode=mode, **extra)  # numpy cannot crop
    model = _model("Pad", feeds, out_types=[(TensorProto.INT32, want.shape)], mode=mode)
    np.testing.assert_array_equal(harness.run_model(model, feeds, frozen=("pads",))["y0"], want)


@pytest.mark.cc
def test_pad_with_runtime_constant_value():
    x = RNG.random((2, 3)).astype(F32)
    check_against_reference("Pad", {"x": x, "pads": np.array([1, 0, 0, 2]), "v": np.array(5.0, F32)}, frozen=("pads",))


@pytest.mark.cc
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_round_trip(mode):
    x = RNG.random((1, 8, 2, 3)).astype(F32)
    check_against_reference("DepthToSpace", {"x": x}, blocksize=2, mode=mode)
    check_against_reference("SpaceToDepth", {"x": RNG.random((1, 2, 4, 6)).astype(F32)}, blocksize=2)


@pytest.mark.cc
def test_cumsum_reverse_exclusive_wraps_integers():
    x = np.array([[2**31 - 1, 1, 5], [-3, 4, -(2**31)]], np.int32)
    for reverse in (0, 1):
        for exclusive in (0, 1):
            feeds = {"x": x, "axis": np.array(1, np.int64)}
            check_against_reference("CumSum", feeds, frozen=("axis",), reverse=reverse, exclusive=exclusive)


@pytest.mark.cc
def test_scatter_skips_out_of_range_indices():
    data = np.zeros((3, 4), F32)
    indices = np.array([[1, 9], [-1, 0]], np.int64)
    updates = np.array([[5, 6], [7, 8]], F32)
    feeds = {"d": data, "i": indices, "u": updates}
    model = _model("ScatterElements", feeds, out_types=[(TensorProto.FLOAT, (3, 4))], axis=1, reduction="add")
    got = harness.run_model(model, feeds)["y0"]
    want = np.zeros((3, 4), F32)
    want[0, 1], want[1, 3], want[1, 0] = 5, 7, 8
    np.testing.assert_array_equal(got, want)


@pytest.mark.cc
def test_gather_nd_with_batch_dims():
    data = RNG.random((2, 3, 4)).astype(F32)
    indices = np.array([[[1, -1]], [[2, 0]]], np.int64)
    check_against_reference("GatherND", {"data": data, "indices": indices}, batch_dims=1)


# -- resize ------------------------------------------------------------------------------------

RESIZES = [
    {"mode": "nearest"},
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"mode": "linear"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "cubic"},
    {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5},
    {"mode": "linear", "antialias": 1},
]


@pytest.mark.cc
@pytest.mark.parametrize("attrs", RESIZES, ids=lambda a: "-".join(str(v) for v in a.values()))
@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 0.5, 0.75), (1, 1, 1.7, 1)])
def test_resize_nchw(attrs, scales):
    x = RNG.random((1, 2, 4, 8)).astype(F32)
    feeds = {"x": x, "roi": np.array([], F32), "scales": np.array(scales, F32)}
    check_against_reference("Resize", feeds, frozen=("roi", "scales"), opset=19, **attrs)


@pytest.mark.cc
def test_resize_channels_last_moves_rows():
    x = RNG.random((1, 5, 6, 3)).astype(F32)
    feeds = {"x": x, "roi": np.array([], F32), "scales": np.array([1, 2, 2, 1], F32)}
    check_against_reference("Resize", feeds, frozen=("roi", "scales"), opset=19, mode="nearest")
    check_against_reference("Resize", feeds, frozen=("roi", "scales"), opset=19, mode="linear")


# -- contract ----------------------------------------------------------------------------------


def test_unsupported_dtype_is_reported_not_miscompiled():
    t = TensorType(DType.INT32, (4,))
    with pytest.raises(Unsupported, match="Sigmoid on int32"):
        op_def("Sigmoid").lower(_instance("Sigmoid", [t], [t]))
    with pytest.raises(Unsupported, match="compile-time constant"):
        op_def("Slice").lower(
            _instance("Slice", [t, TensorType(DType.INT64, (1,)), TensorType(DType.INT64, (1,))], [t])
        )


def test_every_kernel_reports_its_cost():
    x = TensorType(DType.FLOAT32, (2, 3, 4))
    for op in ("Relu", "Add", "Transpose"):
        ins = [x, x] if op == "Add" else [x]
        out = TensorType(DType.FLOAT32, (4, 3, 2)) if op == "Transpose" else x
        kernel = op_def(op).lower(_instance(op, ins, [out]))
        assert kernel.bytes_accessed >= 2 * x.nbytes
    assert op_def("Add").lower(_instance("Add", [x, x], [x])).flops == x.size


def test_empty_tensors_compile_to_a_no_op(tmp_path):
    empty = TensorType(DType.FLOAT32, (0, 3))
    for op in ("Relu", "Transpose"):
        source = _source(_instance(op, [empty], [TensorType(DType.FLOAT32, (3, 0) if op == "Transpose" else (0, 3))]))
        assert "HG_UNUSED(args)" in source


# -- sanitizers --------------------------------------------------------------------------------

# Backend test cases whose kernels meet the edge cases C leaves undefined (division by zero,
# overflow, shifts, float to int) or index far from their output (gathers, slices, pads, resize).
SANITIZED = ("mod", "div", "bitshift", "cast", "gather", "pad", "slice", "resize", "empty", "argm", "pow", "clip")
SANITIZED += ("scatter", "tril", "triu", "cumsum", "onehot", "hardmax")

_SANITIZER_RUN = """
import sys
import conformance, harness
from hetgen.ops import registry
harness.CFLAGS = [*harness.CFLAGS, "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
ops = frozenset(d.op for m in registry.TENSOR for d in m.DEFS)
cases = [c for c in conformance.cases(ops) if any(p in c.name for p in sys.argv[1:])]
outcomes = conformance.run_cases(cases)
print(len(cases), "cases")
for name, (status, detail) in sorted(outcomes.items()):
    if status == "fail" and name not in conformance.EXPECTED_FAILURES:
        print("FAIL", name, detail)
"""


@pytest.mark.cc
def test_kernels_are_clean_under_asan_and_ubsan():
    """A sanitizer report aborts the run (-fno-sanitize-recover), so a clean exit is the check."""
    libasan = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(libasan):
        pytest.skip("the C compiler has no AddressSanitizer runtime")
    tests = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "LD_PRELOAD": libasan,
        "ASAN_OPTIONS": "detect_leaks=0",
        "PYTHONPATH": f"{tests}{os.pathsep}{tests.parent}",
    }
    result = subprocess.run(
        [sys.executable, "-c", _SANITIZER_RUN, *SANITIZED], env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "FAIL" not in result.stdout, result.stdout
    assert int(result.stdout.split()[0]) > 100  # the selection did not come up empty
