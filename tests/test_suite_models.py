"""The benchmark suite (hetgen/models/suite.py): every entry's network, built small, is a model
onnx.checker accepts and onnxruntime runs, with the same result optimised and not.

Nothing here compiles C; tests/test_models.py compiles the builders' default sizes against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from hetgen.models import imagenet
from hetgen.models.suite import BENCH_MODELS
from hetgen.runtime.reference import OPTIMISER_TOLERANCE, optimiser_error, ort_session, speed_session
from tests.test_models_build import feeds_for

pytest.importorskip("onnxruntime")

# issue #22's list: each kind of network the suite must cover, by the operator that makes it one
COVERED = {
    "lenet5": {"Conv", "MaxPool", "Gemm"},
    "ds_cnn": {"Conv", "BatchNormalization", "AveragePool"},
    "shufflenet@224": {"Transpose", "Split", "Concat"},
    "squeezenet@224": {"Concat"},
    "mobilenetv2-1.0@224": {"Clip", "Add"},
    "mobilenetv3s@224": {"HardSwish", "HardSigmoid", "Mul", "GlobalAveragePool"},
    "efficientnet-lite0@224": {"Clip", "Add"},
    "resnet18-real@224": {"Add", "MaxPool"},
    "resnet50@224": {"Add", "MaxPool"},
    "vgg@64": {"Conv", "Gemm"},
    "googlenet@224": {"Concat", "AveragePool"},
    "densenet121@160": {"Concat", "AveragePool"},
    "unet@128": {"ConvTranspose", "Concat"},
    "gru": {"GRU"},
    "lstm": {"LSTM"},
    "transformer": {"LayerNormalization", "Softmax", "MatMul"},
}


def test_the_suite_covers_issue_22s_networks():
    assert set(COVERED) <= set(BENCH_MODELS)


@pytest.mark.parametrize("name", sorted(BENCH_MODELS))
def test_every_suite_model_built_small_is_checked_and_runs_in_onnxruntime(name):
    model = BENCH_MODELS[name].small()
    onnx.checker.check_model(model, full_check=True)
    assert COVERED.get(name, set()) <= {node.op_type for node in model.graph.node}
    data = model.SerializeToString()
    inputs = feeds_for(model)
    want = ort_session(data).run(None, inputs)
    got = speed_session(data).run(None, inputs)
    assert all(np.all(np.isfinite(w)) for w in want) and max(float(np.abs(w).max()) for w in want) > 1e-3
    assert optimiser_error(got, want) <= OPTIMISER_TOLERANCE


def test_real_widths_follow_torchvision():
    """Parameter counts of the real-width builders, 1000 classes, against torchvision's (within 1 %:
    torchvision's convolutions before BatchNorm have no bias, these have one)."""
    torchvision_params = {
        "mobilenet_v2": 3_504_872,
        "mobilenet_v3_small": 2_542_856,
        "resnet18": 11_689_512,
    }
    built = {
        "mobilenet_v2": imagenet.mobilenet_v2(size=32, width=1.0, classes=1000),
        "mobilenet_v3_small": imagenet.mobilenet_v3_small(size=32, width=1.0, classes=1000),
        "resnet18": imagenet.resnet(depth=18, size=32, width=1.0, classes=1000),
    }
    for name, model in built.items():
        # BatchNorm's running mean and variance are buffers in torch, parameters here: leave them out
        params = sum(
            int(np.prod(t.dims)) for t in model.graph.initializer if not t.name.startswith(("bn_mean", "bn_var"))
        )
        assert params == pytest.approx(torchvision_params[name], rel=0.01), name
