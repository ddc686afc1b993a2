"""Failures the differential fuzzer (tests/test_fuzz.py, benchmarks/fuzz.py) found, each reduced to a
minimal model and kept as a named test: compiled by hetgen, run, and compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuzz_cases import FuzzCase, run_case
from fuzz_graphs import OPSET, REPO

HOST = REPO / "platforms" / "host.yaml"


def model_of(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "regression", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    return model


def check(tmp_path, model, feeds, platform=HOST, pins=None):
    case = FuzzCase(model, feeds, platform.read_text(), str(platform), dict(pins or {}))
    outcome = run_case(case, tmp_path / "out")
    assert outcome.status == "pass", f"{outcome.status}: {outcome.reason}\n{outcome.detail}"


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


@pytest.mark.xfail(
    strict=True,
    reason="name escaping (issue #6 item 1, being fixed on another branch): a tensor named 'a*/b' ends "
    "the comment that lists the inputs in the generated header, and the rest of the line becomes C",
)
def test_comment_terminator_in_an_input_name_builds(tmp_path):
    model = model_of([helper.make_node("Relu", ["a*/b"], ["y"])], [f32("a*/b", (3,))], [f32("y", (3,))])
    check(tmp_path, model, {"a*/b": np.array([-1, 0, 2], np.float32)})


@pytest.mark.xfail(
    strict=True,
    reason="name escaping (issue #6 item 1, being fixed on another branch): a node named 'a*/b' ends the "
    "comment at the top of its kernel's C file ('Computes Abs 'a*/b'.')",
)
def test_comment_terminator_in_a_node_name_builds(tmp_path):
    model = model_of([helper.make_node("Abs", ["x"], ["y"], name="a*/b")], [f32("x", (3,))], [f32("y", (3,))])
    check(tmp_path, model, {"x": np.array([-1, 0, 2], np.float32)})


def test_resize_align_corners_with_a_fractional_resized_length_follows_the_onnx_reference(tmp_path):
    """Found by the fuzzer as a mismatch with onnxruntime, which is not a hetgen bug: for 3 x 1.5 the
    ONNX spec and reference take the resized length as 4.5 (x = y * 2 / 3.5), onnxruntime as the
    output's 4 (x = y * 2 / 3), so the last output samples input 1 (spec) or 2 (onnxruntime).
    hetgen follows the spec, as the ONNX backend tests expect; the fuzzer avoids the case."""
    from onnx.reference import ReferenceEvaluator

    import hetgen

    scales = numpy_helper.from_array(np.array([1, 1, 1, 1.5], np.float32), "scales")
    node = helper.make_node(
        "Resize", ["x", "", "scales"], ["y"], mode="nearest", coordinate_transformation_mode="align_corners",
        nearest_mode="floor",
    )  # fmt: skip
    model = model_of([node], [f32("x", (1, 1, 1, 3))], [f32("y", (1, 1, 1, 4))], [scales])
    x = np.array([[[[10, 20, 30]]]], np.float32)
    out = hetgen.compile(HOST, model, out=tmp_path / "out", opt=("-O1",), native_tuning=False)
    got = hetgen.load(out).run({"x": x})["y"]
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
    np.testing.assert_array_equal(got.ravel(), [10, 10, 20, 20])
