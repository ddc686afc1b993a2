"""Failures the differential fuzzer (tests/test_fuzz.py, benchmarks/fuzz.py) found, each reduced to a
minimal model and kept as a named test: compiled by hetgen, run, and compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuzz_cases import FuzzCase, run_case
from fuzz_graphs import OPSET, REPO

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

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


# Found by fuzzing: a tensor named 'a*/b' ended the comment that lists the inputs in the generated
# header, and the rest of the line became C.
def test_comment_terminator_in_an_input_name_builds(tmp_path):
    model = model_of([helper.make_node("Relu", ["a*/b"], ["y"])], [f32("a*/b", (3,))], [f32("y", (3,))])
    check(tmp_path, model, {"a*/b": np.array([-1, 0, 2], np.float32)})


# Found by fuzzing: a node named 'a*/b' ended the comment at the top of its kernel's C file.
def test_comment_terminator_in_a_node_name_builds(tmp_path):
    model = model_of([helper.make_node("Abs", ["x"], ["y"], name="a*/b")], [f32("x", (3,))], [f32("y", (3,))])
    check(tmp_path, model, {"x": np.array([-1, 0, 2], np.float32)})


RESIZE_DISAGREEMENTS = {
    # 3 x 1.5: the spec's resized length is 4.5 (x = y * 2 / 3.5); onnxruntime takes 4 (x = y * 2 / 3)
    "align_corners_fractional_length": (
        (1, 1, 1, 3),
        {"coordinate_transformation_mode": "align_corners", "nearest_mode": "floor"},
        ("scales", [1, 1, 1, 1.5]),
        (1, 1, 1, 4),
    ),
    # cubic to length 1 (scale 1/3): the sample positions differ between the two
    "pytorch_half_pixel_to_length_one": (
        (1, 2, 8, 3),
        {"coordinate_transformation_mode": "pytorch_half_pixel"},
        ("sizes", [1, 2, 10, 1]),
        (1, 2, 10, 1),
    ),
}


@pytest.mark.parametrize("case", sorted(RESIZE_DISAGREEMENTS))
def test_resize_where_onnxruntime_and_the_spec_disagree_follows_the_onnx_reference(tmp_path, case):
    """Found by the fuzzer as mismatches with onnxruntime that are not hetgen bugs: onnxruntime
    computes these Resize coordinates from the output's integer length, the ONNX spec and reference
    (and the ONNX backend tests) from in * scale. hetgen follows the spec; the fuzzer avoids them."""
    from onnx.reference import ReferenceEvaluator

    import hetgen

    shape, attrs, (kind, values), out_shape = RESIZE_DISAGREEMENTS[case]
    dtype = np.float32 if kind == "scales" else np.int64
    initializer = numpy_helper.from_array(np.array(values, dtype), kind)
    inputs = ["x", "", "scales"] if kind == "scales" else ["x", "", "", "sizes"]
    node = helper.make_node("Resize", inputs, ["y"], mode="cubic" if kind == "sizes" else "nearest", **attrs)
    model = model_of([node], [f32("x", shape)], [f32("y", out_shape)], [initializer])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out = hetgen.compile(HOST, model, out=tmp_path / "out", opt=("-O1",), native_tuning=False, native_only=True)
    got = hetgen.load(out).run({"x": x})["y"]
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


DUAL = REPO / "platforms" / "dual.yaml"


@pytest.mark.parametrize("shape", [(), (1,), (1, 1, 1)])
def test_one_element_add_on_the_vector_unit_builds(tmp_path, shape):
    """Found by the fuzzer: an elementwise kernel of one element collapses to no loop at all, and the
    vecunit template (which strip-mines the innermost loop) failed with a Jinja UndefinedError."""
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    model = model_of(
        [helper.make_node("Add", ["x", "half"], ["y"], name="add")], [f32("x", shape)], [f32("y", shape)], [half]
    )
    check(tmp_path, model, {"x": np.full(shape, 1.25, np.float32)}, DUAL, pins={"add": "dual/vec0"})


SOC = REPO / "platforms" / "soc.yaml"


@pytest.mark.parametrize(
    ("platform", "after_conv"),
    [
        pytest.param(SOC, False, marks=pytest.mark.external),  # its board build: the cross compilers
        (DUAL, False),
        pytest.param(SOC, True, marks=pytest.mark.external),
    ],
    ids=["soc", "dual", "soc-fused"],
)
@pytest.mark.parametrize(
    "inputs", [["t", "", "hi"], ["t", "lo"], ["t", "lo", ""]], ids=["no-min", "no-max", "no-max-empty"]
)
def test_clip_with_an_omitted_bound_builds_on_the_npu_platforms(tmp_path, platform, after_conv, inputs):
    """Found by the fuzzer (issue 18): a Clip whose optional min is omitted ("" in node.input)
    crashed the NPU's elementwise tiling, which gave the omitted input a block and read its size:
    every such graph on soc and dual exited 3. After a Conv it is the Conv's fused epilogue."""
    rng = np.random.default_rng(0)
    shape = (1, 8, 16, 16)
    constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", -0.5), ("hi", 0.75))]
    if after_conv:
        constants.append(numpy_helper.from_array(rng.uniform(-1, 1, (8, 8, 3, 3)).astype(np.float32), "w"))
        first = helper.make_node("Conv", ["x", "w"], ["t"], name="conv", pads=[1, 1, 1, 1])
    else:
        first = helper.make_node("Sigmoid", ["x"], ["t"], name="sigmoid")
    nodes = [first, helper.make_node("Clip", inputs, ["y"], name="clip")]
    model = model_of(nodes, [f32("x", shape)], [f32("y", shape)], constants)
    pins = {"conv": "soc/vdevice0/npu0"} if after_conv else {}
    check(tmp_path, model, {"x": rng.standard_normal(shape).astype(np.float32)}, platform, pins)
