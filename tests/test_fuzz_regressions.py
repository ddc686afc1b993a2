"""Failures the differential fuzzer (tests/test_fuzz.py, benchmarks/fuzz.py) found, each reduced to a
minimal model and kept as a named test: compiled by hetgen, run, and compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuzz_graphs import OPSET, REPO, FuzzCase, run_case

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
