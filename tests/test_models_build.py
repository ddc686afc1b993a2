"""The model builders: valid, deterministic, small, structured like their namesakes, run in onnxruntime.

Structure only; nothing here compiles C.
"""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import onnx
import pytest

from hetgen import models

ort = pytest.importorskip("onnxruntime")

# name -> operators the model must contain (what makes it that kind of network)
SIGNATURE_OPS = {
    "mlp": {"Gemm", "Relu", "MatMul", "Add", "Softmax"},
    "tiny_cnn": {"Conv", "Relu", "MaxPool", "Flatten", "Gemm"},
    "lenet5": {"Conv", "Relu", "MaxPool", "Flatten", "Gemm"},
    "resnet": {"Conv", "BatchNormalization", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm"},
    "mobilenet_v2": {"Conv", "BatchNormalization", "Clip", "Add", "GlobalAveragePool", "Gemm"},
    "squeezenet": {"Conv", "Relu", "Concat", "MaxPool", "Dropout", "GlobalAveragePool", "Flatten"},
    "googlenet": {"Conv", "Relu", "Concat", "MaxPool", "AveragePool", "Dropout", "Gemm"},
    "densenet": {"Conv", "BatchNormalization", "Relu", "Concat", "AveragePool", "GlobalAveragePool", "Gemm"},
    "vgg": {"Conv", "Relu", "MaxPool", "Flatten", "Gemm", "Dropout"},
    "alexnet": {"Conv", "Relu", "LRN", "MaxPool", "Dropout", "Gemm"},
    "shufflenet": {"Conv", "BatchNormalization", "Reshape", "Transpose", "Split", "Slice", "Concat"},
    "transformer_encoder": {
        "Gather",
        "MatMul",
        "Add",
        "Gemm",
        "Reshape",
        "Transpose",
        "Softmax",
        "LayerNormalization",
        "Erf",
        "Where",
        "Split",
        "Slice",
        "Concat",
        "Shape",
        "Div",
    },
    # MLPerf Tiny's reference networks (tests/test_mlperf_tiny.py checks their layer lists)
    "ds_cnn": {"Conv", "BatchNormalization", "Relu", "AveragePool", "Flatten", "Gemm", "Softmax"},
    "mobilenet_v1_vww": {"Conv", "BatchNormalization", "Relu", "AveragePool", "Flatten", "Gemm", "Softmax"},
    "resnet8": {"Conv", "BatchNormalization", "Relu", "Add", "AveragePool", "Flatten", "Gemm", "Softmax"},
    "fc_autoencoder": {"Gemm", "Relu"},
    # issue #22's benchmark networks (hetgen/models/suite.py)
    "unet": {"Conv", "BatchNormalization", "Relu", "MaxPool", "ConvTranspose", "Concat"},
    "mobilenet_v3_small": {"Conv", "BatchNormalization", "HardSigmoid", "Mul", "GlobalAveragePool", "Gemm"},
    "efficientnet_lite": {"Conv", "BatchNormalization", "Clip", "Add", "GlobalAveragePool", "Gemm"},
    "gru_classifier": {"Transpose", "GRU", "Squeeze", "Gemm"},
    "lstm_classifier": {"Transpose", "LSTM", "Squeeze", "Gemm"},
}

# the networks whose output is a map (per-pixel logits), not a [1, classes] vector
SEGMENTATION = {"unet"}

MAX_WEIGHT_BYTES = 4 << 20


def feeds_for(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[vi.name] = rng.integers(0, 8, shape).astype(np.int64)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def run(model: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds_for(model))


@functools.cache
def default_outputs(name: str) -> list[np.ndarray]:
    """onnxruntime's outputs for the builder's model at its default opset: made once per builder, not
    once per opset (test_builders_at_every_opset_run_in_onnxruntime compares six opsets with it)."""
    return run(models.BUILDERS[name]())


def test_every_builder_has_a_signature():
    assert set(models.BUILDERS) == set(SIGNATURE_OPS)


@pytest.mark.parametrize("name", sorted(SIGNATURE_OPS))
def test_builder_structure_size_and_onnxruntime(name):
    model = models.BUILDERS[name]()
    onnx.checker.check_model(model, full_check=True)
    ops = Counter(n.op_type for n in model.graph.node)
    assert SIGNATURE_OPS[name] <= set(ops), SIGNATURE_OPS[name] - set(ops)
    weight_bytes = sum(onnx.numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    assert weight_bytes <= MAX_WEIGHT_BYTES
    (logits,) = run(model)
    assert logits.ndim == (4 if name in SEGMENTATION else 2) and logits.shape[0] == 1
    assert np.all(np.isfinite(logits)) and np.abs(logits).max() > 1e-3


@pytest.mark.parametrize("name", sorted(SIGNATURE_OPS))
def test_builders_are_deterministic(name):
    builder = models.BUILDERS[name]
    assert builder().SerializeToString() == builder().SerializeToString()
    assert builder(seed=1).SerializeToString() != builder().SerializeToString()


@pytest.mark.parametrize("opset", [7, 9, 11, 13, 17, 21])
@pytest.mark.parametrize("name", sorted(SIGNATURE_OPS))
def test_builders_at_every_opset_run_in_onnxruntime(name, opset):
    if name == "transformer_encoder" and opset < 9:
        with pytest.raises(ValueError, match="opset 9 or later"):
            models.BUILDERS[name](opset=opset)
        return
    model = models.BUILDERS[name](opset=opset)
    assert model.opset_import[0].version == opset
    reference = default_outputs(name)  # the same weights at the default opset
    np.testing.assert_allclose(run(model)[0], reference[0], rtol=1e-4, atol=1e-4)


def test_old_ir_lists_initializers_among_inputs():
    model = models.resnet(opset=7)
    assert model.ir_version < 4
    assert {t.name for t in model.graph.initializer} <= {vi.name for vi in model.graph.input}
    assert models.resnet(opset=9).graph.input[0].name == "input" and len(models.resnet(opset=9).graph.input) == 1


def test_opset_dependent_forms():
    clip7 = next(n for n in models.mobilenet_v2(opset=7).graph.node if n.op_type == "Clip")
    clip13 = next(n for n in models.mobilenet_v2(opset=13).graph.node if n.op_type == "Clip")
    assert {a.name for a in clip7.attribute} == {"min", "max"} and len(clip7.input) == 1
    assert len(clip13.input) == 3
    split11 = next(n for n in models.shufflenet(opset=11).graph.node if n.op_type == "Split")
    split13 = next(n for n in models.shufflenet(opset=13).graph.node if n.op_type == "Split")
    assert len(split11.input) == 1 and len(split13.input) == 2


def test_transformer_layer_norm_variants():
    decomposed = Counter(n.op_type for n in models.transformer_encoder(layer_norm="decomposed").graph.node)
    assert "LayerNormalization" not in decomposed
    assert {"ReduceMean", "Sub", "Pow", "Sqrt", "Div"} <= set(decomposed)
    assert "LayerNormalization" not in {n.op_type for n in models.transformer_encoder(opset=13).graph.node}
    with pytest.raises(ValueError, match="no LayerNormalization"):
        models.transformer_encoder(opset=13, layer_norm="fused")
    fused = run(models.transformer_encoder(layer_norm="fused"))[0]
    np.testing.assert_allclose(run(models.transformer_encoder(layer_norm="decomposed"))[0], fused, rtol=1e-4, atol=1e-4)


def test_builders_reject_opsets_out_of_range():
    with pytest.raises(ValueError, match="opsets 7 to 21"):
        models.mlp(opset=6)


def test_shipped_examples_are_what_make_models_writes():
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "examples" / "make_models.py"
    spec = importlib.util.spec_from_file_location("make_models", script)
    make_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_models)
    for filename, build in make_models.EXAMPLES.items():
        assert (script.parent / filename).read_bytes() == build().SerializeToString(), filename
