"""float16: exact Cast in both directions, and models with float16 weights and tensors end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import harness
import hetgen
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

FAST = {"opt": ("-O1",), "native_tuning": False, "native_only": True}
HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"
SOC = Path(__file__).resolve().parents[1] / "platforms" / "soc.yaml"


def cast_model(src: int, dst: int, n: int) -> onnx.ModelProto:
    node = helper.make_node("Cast", ["x"], ["y"], to=dst)
    graph = helper.make_graph(
        [node], "cast", [helper.make_tensor_value_info("x", src, [n])], [helper.make_tensor_value_info("y", dst, [n])]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def tricky_values(dtype) -> np.ndarray:
    """Ties, subnormals, the overflow edge, infinities, NaN, signed zeros, and random values."""
    half_bits = np.arange(0, 1 << 16, 97, dtype=np.uint16)
    halves = half_bits.view(np.float16).astype(np.float64)
    halves = halves[np.isfinite(halves)]
    ulp = np.abs(np.spacing(halves.astype(np.float16)).astype(np.float64))
    ties = np.concatenate([halves + ulp / 2, halves - ulp / 2, halves + ulp / 3])  # exact halfway points
    edges = [65504.0, 65519.99, 65520.0, 1e6, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-26, 2.0**-14, 0.0, -0.0]
    specials = [np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(0)
    values = np.concatenate([ties, edges, np.negative(edges), specials, rng.standard_normal(500) * 100])
    return values.astype(dtype)


def test_cast_to_float16_rounds_to_nearest_even_like_numpy():
    for dtype, code in ((np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)):
        x = tricky_values(dtype)
        got = harness.run_model(cast_model(code, TensorProto.FLOAT16, x.size), {"x": x})["y"]
        with np.errstate(over="ignore"):
            wanted = x.astype(np.float16)
        finite = ~np.isnan(wanted)
        assert np.array_equal(got.view(np.uint16)[finite], wanted.view(np.uint16)[finite]), dtype
        assert np.isnan(got[~finite]).all()


def test_cast_from_float16_is_exact_for_every_bit_pattern():
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    for dtype, code in ((np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)):
        got = harness.run_model(cast_model(TensorProto.FLOAT16, code, x.size), {"x": x})["y"]
        wanted = x.astype(dtype)
        finite = ~np.isnan(wanted)
        assert np.array_equal(got[finite], wanted[finite]) and np.isnan(got[~finite]).all()
        assert np.array_equal(np.signbit(got[finite]), np.signbit(wanted[finite]))


def float16_mlp() -> onnx.ModelProto:
    """float16 weights and activations throughout: MatMul, Add, Relu, Softmax, a float32 output cast."""
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array((rng.standard_normal((16, 32)) * 0.3).astype(np.float16), "w1")
    b1 = numpy_helper.from_array((rng.standard_normal(32) * 0.1).astype(np.float16), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((32, 8)) * 0.3).astype(np.float16), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["p"], axis=-1),
        helper.make_node("Cast", ["p"], ["p32"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 16])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT16, [4, 8]),
            helper.make_tensor_value_info("p32", TensorProto.FLOAT, [4, 8]),
        ],
        initializer=[w1, b1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_float16_model_builds_and_matches_onnxruntime(tmp_path):
    proto = float16_mlp()
    out = hetgen.compile(load_platform_text(HOST), proto, out=tmp_path / "mlp16", **FAST)
    feeds = {"x": np.random.default_rng(2).standard_normal((4, 16)).astype(np.float16)}
    got = hetgen.load(out).run(feeds)
    logits, p32 = ort_session(proto.SerializeToString()).run(None, feeds)
    assert got["logits"].dtype == np.float16
    # float16 storage: within a few float16 ulps of onnxruntime (which also rounds per node)
    np.testing.assert_allclose(got["logits"].astype(np.float32), logits.astype(np.float32), rtol=4e-3, atol=4e-3)
    np.testing.assert_allclose(got["p32"], p32, rtol=4e-3, atol=1e-3)
