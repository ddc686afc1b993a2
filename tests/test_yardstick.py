"""onnxruntime's two roles (hetgen/runtime/reference.py): the optimiser-off numerical reference and
the speed yardstick at its defaults; `hetgen bench` and benchmarks/bench_models.py time the second,
check it against the first, and skip a model where onnxruntime's optimiser gives a wrong result.

Nothing here compiles C: the built library is stood in for by a numpy model of the same network.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen import cli
from hetgen.runtime import bench as bench_module
from hetgen.runtime import reference
from hetgen.runtime.bench import BenchResult, bench
from hetgen.runtime.loader import TensorInfo
from hetgen.runtime.verify import MODEL_COPY

ort = pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]
WEIGHT = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)


def tiny_model() -> onnx.ModelProto:
    """Relu(x @ W), an output onnxruntime computes the same with optimisations on and off."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[numpy_helper.from_array(WEIGHT, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class NumpyModel:
    """What `hetgen.runtime.loader.load` returns, as far as bench uses it: the same network in numpy."""

    inputs = (TensorInfo("x", (2, 8), np.dtype(np.float32)),)
    outputs = (TensorInfo("y", (2, 4), np.dtype(np.float32)),)

    def run_into(self, inputs, outputs):
        np.maximum(inputs[0] @ WEIGHT, 0, out=outputs[0])


class Perturbed:
    """An onnxruntime session whose outputs are off by 1 % of their largest value: a wrong optimiser."""

    def __init__(self, session):
        self.session = session

    def run(self, names, feeds):
        return [y + 0.01 * np.max(np.abs(y)) for y in self.session.run(names, feeds)]


@pytest.fixture
def built(tmp_path, monkeypatch):
    """A folder as `hetgen build` leaves it, as far as bench reads it (the model's copy), with `load`
    giving the numpy model."""
    onnx.save(tiny_model(), tmp_path / MODEL_COPY)
    monkeypatch.setattr(bench_module, "load", lambda out_dir: NumpyModel())
    return tmp_path


def test_the_speed_session_runs_at_onnxruntimes_defaults_with_the_threads_asked():
    for threads in (1, 2):
        options = reference.speed_session(tiny_model().SerializeToString(), threads=threads).get_session_options()
        assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (threads, 1)
    # the optimisation level a default SessionOptions has: the yardstick is what a user gets
    assert ort.SessionOptions().graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def test_the_reference_session_keeps_the_optimiser_off():
    options = reference.ort_session(tiny_model().SerializeToString(), threads=2).get_session_options()
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert options.intra_op_num_threads == 2


def test_optimiser_error_is_relative_to_the_largest_reference_value():
    want = [np.array([[1.0, -4.0]], np.float32)]
    assert reference.optimiser_error([np.array([[1.0, -4.0]], np.float32)], want) == 0.0
    assert reference.optimiser_error([np.array([[1.0, -3.0]], np.float32)], want) == pytest.approx(0.25)
    assert reference.optimiser_error([np.zeros((2, 1), np.float32)], want) == float("inf")  # shape
    assert reference.optimiser_error([np.array([[np.nan, -4.0]], np.float32)], want) == float("inf")
    assert reference.wrong_result_message("m", 1e-6) is None
    message = reference.wrong_result_message("resnet", 0.25)
    assert message.startswith("onnxruntime's optimiser gives a wrong result on resnet: max diff 2.50e-01")
    assert message.endswith("comparison skipped")


def test_bench_times_the_speed_session_and_checks_it_against_the_reference(built, monkeypatch):
    made = []

    def recording(model_bytes, threads=1):
        made.append(threads)
        return reference.speed_session(model_bytes, threads)

    monkeypatch.setattr(bench_module, "speed_session", recording)
    result = bench(built, runs=3, warmup=1, threads=2)
    assert made == [2]
    assert result.skipped is None and result.ort_ms > 0 and result.ratio > 0
    assert result.optimiser_error <= reference.OPTIMISER_TOLERANCE and result.threads == 2


def test_bench_skips_the_comparison_where_the_optimiser_gives_a_wrong_result(built, monkeypatch):
    monkeypatch.setattr(bench_module, "speed_session", lambda b, threads=1: Perturbed(reference.speed_session(b)))
    result = bench(built, runs=3, warmup=1)
    assert result.ort_ms is None and result.ratio is None and result.hetgen_ms > 0
    assert result.optimiser_error == pytest.approx(0.01, rel=1e-3)
    assert result.skipped.startswith(f"onnxruntime's optimiser gives a wrong result on {built.name}")


def bench_output(monkeypatch, capsys, tmp_path, result: BenchResult, *extra) -> str:
    monkeypatch.setattr(bench_module, "bench", lambda out_dir, runs, threads: result)
    report = SimpleNamespace(devices=[], to_json=lambda: {})
    monkeypatch.setattr("hetgen.runtime.devices.simulation_report", lambda out_dir: report)
    assert cli.main(["bench", str(tmp_path), *extra]) == 0
    return capsys.readouterr().out


def test_hetgen_bench_names_both_sessions(monkeypatch, capsys, tmp_path):
    text = bench_output(monkeypatch, capsys, tmp_path, BenchResult(2.0, 4.0, 20, 1, 3e-7))
    assert (
        "onnxruntime     4.000 ms (median of 20, 1 thread, onnxruntime at its defaults (graph optimisations on))"
        in text
    )
    assert "ratio            0.50 x (hetgen / onnxruntime at its defaults)" in text
    assert "against onnxruntime with graph optimisations off (the numerical reference" in text
    skipped = BenchResult(2.0, None, 20, 1, 0.5, "onnxruntime's optimiser gives a wrong result on m: ...")
    text = bench_output(monkeypatch, capsys, tmp_path, skipped)
    assert "wrong result on m" in text and "ratio" not in text


def test_hetgen_bench_json_names_both_sessions(monkeypatch, capsys, tmp_path):
    import json

    text = bench_output(monkeypatch, capsys, tmp_path, BenchResult(2.0, 4.0, 20, 2, 3e-7), "--format", "json")
    document = json.loads(text)
    assert document["ort_session"] == "onnxruntime at its defaults (graph optimisations on), 2 threads"
    assert document["reference_session"] == reference.REFERENCE_SESSION
    assert (document["ort_ms"], document["skipped"], document["threads"]) == (4.0, None, 2)


@pytest.fixture
def bench_models(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_models

    yield bench_models
    sys.modules.pop("bench_models", None)


def test_bench_models_skips_a_model_the_optimiser_gets_wrong_and_leaves_it_out_of_the_mean(
    built, monkeypatch, bench_models
):
    monkeypatch.setattr(bench_models, "load", lambda out_dir: NumpyModel())
    right = bench_models.measure_threads(built, 2, [1, 2], "tiny", per_round=1)
    assert all(f.skipped is None and f.theirs > 0 and f.error < 1e-6 for f in right.values())
    monkeypatch.setattr(
        bench_models, "speed_session", lambda b, threads=1: Perturbed(reference.speed_session(b, threads))
    )
    wrong = bench_models.measure(built, 2, "tiny")
    assert wrong.theirs is None and wrong.ratio is None
    assert wrong.skipped.startswith("onnxruntime's optimiser gives a wrong result on tiny")
    assert "skipped" in bench_models.row("tiny", 1, wrong, 64, 100.0)
    assert bench_models.summary([0.5, 2.0]) == "geometric mean ratio 1.00, max ratio 2.00 (2 models)"


def test_bench_models_says_why_the_xnnpack_peer_is_skipped(built, monkeypatch, bench_models, capsys):
    monkeypatch.setattr(bench_models, "load", lambda out_dir: NumpyModel())
    assert bench_models.xnnpack_peer("resnet50@224", tiny_model(), built) == {}  # not MobileNet-class

    def unavailable(model, feeds, threads):
        raise bench_models.PeerUnavailable("XNNPACK (ExecuTorch) peer skipped: ModuleNotFoundError: no torch")

    monkeypatch.setattr(bench_models, "xnnpack_runner", unavailable)
    assert bench_models.xnnpack_peer("ds_cnn", tiny_model(), built) == {}
    assert "ds_cnn: XNNPACK (ExecuTorch) peer skipped: ModuleNotFoundError: no torch" in capsys.readouterr().out

    def wrong(model, feeds, threads):
        return (lambda: None), [np.zeros((2, 4), np.float32) + 5], 0.1

    monkeypatch.setattr(bench_models, "xnnpack_runner", wrong)
    assert bench_models.xnnpack_peer("ds_cnn", tiny_model(), built) == {}
    assert "result differs from the reference" in capsys.readouterr().out


@pytest.mark.parametrize("threads", ["0", "65", "two"])
def test_hetgen_bench_refuses_a_thread_count_it_cannot_run(tmp_path, capsys, threads):
    assert cli.main(["bench", str(tmp_path), "--threads", threads]) == 2
    assert f"{threads!r} is not a thread count (1 to 64)" in capsys.readouterr().err


def test_bench_layers_yardstick_cuts_out_a_call_with_the_nodes_hetgen_folded(monkeypatch):
    """benchmarks/ort_layers.py: a call named 'conv+relu' (its BatchNorm folded away by hetgen) is
    cut out with the BatchNorm, and onnxruntime on it computes what the whole model computes there."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import ort_layers

    rng = np.random.default_rng(5)
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)),
        "w2": rng.standard_normal((2, 4, 1, 1)),
        **{name: rng.uniform(0.5, 1.5, 4) for name in ("scale", "bias", "mean", "var")},
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("y", "r")],
        initializer=[numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    inferred = onnx.shape_inference.infer_shapes(model)
    layer = ort_layers.layer_model(model, inferred, ["conv", "relu"])
    assert [node.name for node in layer.graph.node] == ["conv", "bn", "relu"]
    assert [v.name for v in layer.graph.input] == ["x"] and [v.name for v in layer.graph.output] == ["r"]
    assert ort_layers.layer_model(model, inferred, ["conv", "made_by_hetgen"]) is None
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    (got,) = reference.ort_session(layer.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(got, reference.ort_session(model.SerializeToString()).run(["r"], {"x": x})[0])
    times = ort_layers.ort_layer_times(model, ["conv+relu", "conv2", "nothing"], runs=3)
    assert [len(t) if t else None for t in times] == [3, 3, None] and min(times[0] + times[1]) > 0
    sys.modules.pop("ort_layers", None)
