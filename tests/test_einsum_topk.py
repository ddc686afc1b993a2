"""Einsum and TopK beyond the ONNX node cases, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import harness
from hetgen.runtime.reference import ort_session

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

EQUATIONS = [
    ("ii->i", [(4, 4)]),
    ("ii", [(3, 3)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),
    ("bij,bjk->bk", [(2, 3, 4), (2, 4, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("iij->ji", [(3, 3, 2)]),
    ("ab...,b->a...", [(2, 3, 4, 1), (3,)]),
]


@pytest.mark.parametrize("equation, shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_matches_onnxruntime(equation, shapes):
    names = [f"x{k}" for k in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    expected_shape = np.einsum(equation, *[np.zeros(s) for s in shapes]).shape
    graph = helper.make_graph(
        [node],
        "einsum",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, expected_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    got = harness.run_model(model, feeds)["y"]
    (wanted,) = ort_session(model.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(got, wanted, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_topk_ties_and_axes_match_onnxruntime(largest, axis):
    x = np.random.default_rng(1).integers(0, 4, (5, 6, 7)).astype(np.float32)  # many ties
    k = 3
    out_shape = list(x.shape)
    out_shape[axis] = k
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    graph = helper.make_graph(
        [node],
        "topk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [
            helper.make_tensor_value_info("v", TensorProto.FLOAT, out_shape),
            helper.make_tensor_value_info("i", TensorProto.INT64, out_shape),
        ],
        initializer=[helper.make_tensor("k", TensorProto.INT64, [1], [k])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = harness.run_model(model, {"x": x})
    values, indices = ort_session(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(got["v"], values)
    np.testing.assert_array_equal(got["i"], indices)
