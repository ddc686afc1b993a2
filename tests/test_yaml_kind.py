"""A new accelerator kind declared only in YAML (platforms/dual.yaml: `vecunit`, with its pattern
table, figures and its own kernel templates under templates/vecunit/) is placed, generated with its
templates, built and run, and computes what onnxruntime computes."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import hetgen
from hetgen.runtime.reference import ort_session, random_inputs

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)


def elementwise_model() -> onnx.ModelProto:
    shape = [2, 32, 130]  # an innermost extent that is not a multiple of the lanes
    nodes = [
        helper.make_node("Mul", ["x", "y"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "x"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["z"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "vec",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "y")],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_yaml_declared_accelerator_runs_its_own_templates(tmp_path):
    proto = elementwise_model()
    # Pinned: on a controller this chain is one fused kernel now priced as such, which beats the
    # copies to vec0 (hetgen explain says so); the pins make the YAML-declared kind take it anyway.
    pins = {name: "dual/vec0" for name in ("mul", "add", "relu", "sigmoid")}
    out = hetgen.compile("dual", proto, out=tmp_path / "dual", opt=("-O1",), pins=pins)
    targets = {t["path"]: t for t in json.loads((out / "hetgen.json").read_text())["targets"]}
    assert targets["dual/vec0"]["kernels"] >= 2, targets
    kernel_files = list((out / "dual/vec0/kernels").glob("*.c"))
    assert kernel_files and all("vecunit kernel: 32 float lanes" in f.read_text() for f in kernel_files)
    model = hetgen.load(out)
    feeds = random_inputs(model.inputs, seed=3)
    expected = ort_session(proto.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(model.run(feeds)["z"], expected, rtol=1e-5, atol=1e-6)
