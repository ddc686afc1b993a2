"""NonZero and NonMaxSuppression on run-time values: outputs of run-time length up to a static bound
(hetgen/bounded.py), built for real and compared with onnxruntime."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.bounded import shape_output
from hetgen.errors import ModelError
from hetgen.frontend import import_model
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session
from hetgen.runtime.verify import verify

FAST = {"opt": ("-O1",), "native_tuning": False, "native_only": True}
HOST = "name: host\ntarget: {kind: native, runtime: %s}\n"
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def nonzero_model() -> onnx.ModelProto:
    """NonZero of a run-time tensor as a graph output, beside an ordinary output."""
    nodes = [helper.make_node("NonZero", ["x"], ["idx"], name="nz"), helper.make_node("Relu", ["x"], ["r"])]
    graph = helper.make_graph(
        nodes,
        "nonzero",
        [helper.make_tensor_value_info("x", F, [3, 4, 5])],
        [helper.make_tensor_value_info("idx", I64, [3, None]), helper.make_tensor_value_info("r", F, [3, 4, 5])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def nms_model(max_per_class: int, center_point_box: int = 0) -> onnx.ModelProto:
    """NonMaxSuppression with run-time boxes, scores and thresholds; a constant per-class limit."""
    node = helper.make_node(
        "NonMaxSuppression",
        ["boxes", "scores", "max_out", "iou", "score_min"],
        ["selected"],
        name="nms",
        center_point_box=center_point_box,
    )
    graph = helper.make_graph(
        [node],
        "nms",
        [
            helper.make_tensor_value_info("boxes", F, [2, 12, 4]),
            helper.make_tensor_value_info("scores", F, [2, 3, 12]),
            helper.make_tensor_value_info("iou", F, [1]),
            helper.make_tensor_value_info("score_min", F, [1]),
        ],
        [helper.make_tensor_value_info("selected", I64, [None, 3])],
        initializer=[numpy_helper.from_array(np.array([max_per_class], np.int64), "max_out")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def nonzero_feeds(seed: int, zeros: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x[rng.random(x.shape) < zeros] = 0.0
    return {"x": x}


def nms_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    corner = rng.random((2, 12, 2)).astype(np.float32) * 5  # crowded: boxes overlap
    size = rng.random((2, 12, 2)).astype(np.float32) * 4 + 0.5
    boxes = np.concatenate([corner, corner + size], axis=-1)[..., [1, 0, 3, 2]]  # [y1, x1, y2, x2]
    flip = rng.random((2, 12)) < 0.3  # corners in either order
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    scores = rng.random((2, 3, 12)).astype(np.float32)
    scores[:, :, 5] = scores[:, :, 7]  # a tie: the lower box index goes first
    return {
        "boxes": boxes.astype(np.float32),
        "scores": scores,
        "iou": np.array([rng.uniform(0.1, 0.6)], np.float32),
        "score_min": np.array([rng.uniform(0.1, 0.6)], np.float32),
    }


@pytest.mark.cc
@pytest.mark.parametrize("runtime", ["aot", "vm"])
def test_nonzero_of_run_time_values_matches_onnxruntime(tmp_path, runtime):
    proto = nonzero_model()
    out = hetgen.compile(load_platform_text(HOST % runtime), proto, out=tmp_path / "nz", **FAST)
    model = hetgen.load(out)
    session = ort_session(proto.SerializeToString())
    counts = set()
    for seed, zeros in ((0, 0.5), (1, 0.9), (2, 0.0), (3, 1.0)):  # some, few, all (the bound), none
        feeds = nonzero_feeds(seed, zeros)
        idx, relu = session.run(None, feeds)
        got = model.run(feeds)
        assert set(got) == {"idx", "r"}  # the run-time shape output is consumed by the loader
        assert got["idx"].dtype == np.int64 and np.array_equal(got["idx"], idx), seed
        np.testing.assert_array_equal(got["r"], relu)
        counts.add(idx.shape[1])
    assert counts == {0, 60, *counts} and len(counts) == 4
    # the C API: a buffer of the bound, and the actual shape beside it
    manifest = {t["name"]: t["shape"] for t in json.loads((out / "hetgen.json").read_text())["outputs"]}
    assert manifest["idx"] == [3, 60] and manifest[shape_output("idx")] == [2]
    header = next(out.glob("*/hg_host.h")).read_text()
    assert '"idx::run_time_shape" int64[2] (16 bytes): the shape of "idx" at run time' in header
    assert all(error.ok for error in verify(out, seed=4))


@pytest.mark.cc
@pytest.mark.parametrize("center_point_box", [0, 1])
def test_nms_of_run_time_boxes_matches_onnxruntime(tmp_path, center_point_box):
    proto = nms_model(max_per_class=8, center_point_box=center_point_box)
    out = hetgen.compile(load_platform_text(HOST % "aot"), proto, out=tmp_path / "nms", **FAST)
    model = hetgen.load(out)
    session = ort_session(proto.SerializeToString())
    counts = set()
    for seed in range(6):
        feeds = nms_feeds(seed)
        (selected,) = session.run(None, feeds)
        got = model.run(feeds)["selected"]
        assert np.array_equal(got, selected), (seed, got, selected)
        counts.add(len(selected))
    assert len(counts) > 2 and max(counts) < 48  # the thresholds, not the limit, decide how many
    manifest = {t["name"]: t["shape"] for t in json.loads((out / "hetgen.json").read_text())["outputs"]}
    assert manifest["selected"] == [2 * 3 * 8, 3]  # batches * classes * min(boxes, max per class)


@pytest.mark.external
@pytest.mark.skipif(shutil.which("qemu-aarch64") is None, reason="needs qemu-user and gcc-aarch64-linux-gnu")
def test_nonzero_on_the_board_build_under_qemu(tmp_path):
    platform = load_platform_text("name: a64\ntarget: {kind: aarch64, runtime: aot}\n")
    out = hetgen.compile(platform, nonzero_model(), out=tmp_path / "a64", opt=("-O1",), native_tuning=False)
    errors = verify(out, seed=5, emulate=True)
    assert [e.name for e in errors] == ["idx", "r"] and all(e.ok for e in errors), errors


def test_run_time_length_read_by_another_node_is_refused_naming_both():
    nodes = [
        helper.make_node("NonZero", ["x"], ["idx"], name="nz"),
        helper.make_node("Cast", ["idx"], ["f"], name="to_float", to=F),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, [6])], [helper.make_tensor_value_info("f", F, [1, None])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError) as error:
        import_model(model)
    message = str(error.value)
    assert "NonZero 'nz': its output 'idx' has a length known only at run time (its shape is at most 1x6)" in message
    assert "Cast 'to_float' reads it" in message


def test_nms_needs_a_constant_per_class_limit():
    proto = nms_model(4)
    proto.graph.initializer.pop()
    proto.graph.input.append(helper.make_tensor_value_info("max_out", I64, [1]))
    with pytest.raises(ModelError, match=r"NonMaxSuppression 'nms': input 2 .*must be a compile-time constant"):
        import_model(proto)


def test_nonzero_of_a_constant_still_folds_to_its_exact_shape():
    node = helper.make_node("NonZero", ["c"], ["idx"])
    graph = helper.make_graph(
        [node],
        "g",
        [],
        [helper.make_tensor_value_info("idx", I64, [1, None])],
        initializer=[numpy_helper.from_array(np.array([0, 3, 0, 1], np.float32), "c")],
    )
    graph_ir = import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert not graph_ir.nodes and graph_ir.types["idx"].shape == (1, 2)
