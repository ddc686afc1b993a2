"""Bias, residual and Relu/Clip applied in the GEMM micro-kernel's registers (`hg_sgemm_finish`,
templates/runtime/hg_sgemm_tile.h; `_gemm_plan.finish` decides, `templates/kernels/_conv_gemm.j2`
lays it out) for the convolutions that are one GEMM: which fused activations it takes, what the
lowering passes, that the program is priced as it runs; one small native build of 1x1 layers (odd
channel counts, stride 2, with and without a residual, ReLU6, Relu and HardSwish) against
onnxruntime at 1 and 2 threads, the two bit for bit. tests/c/gemm_check.c checks it against the C
epilogue bit for bit on every ISA."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.ir import DType, Node, TensorType
from hetgen.ops import _gemm_plan
from hetgen.ops._activation import Epilogue
from hetgen.ops.base import OpInstance
from hetgen.ops.registry import op_def
from hetgen.pipeline import import_graph
from hetgen.platform.loader import load_platform_text
from tests.test_priced_choices import HOST, check


@pytest.mark.parametrize(
    ("epilogue", "expected"),
    [
        ((), ("HG_SGEMM_CLAMP_NONE", "0.0f", "0.0f")),
        ((Epilogue("Relu"),), ("HG_SGEMM_CLAMP_RELU", "0.0f", "0.0f")),
        ((Epilogue("Clip", 0.0, 6.0),), ("HG_SGEMM_CLAMP_CLIP", "0.0f", "6.0f")),
        ((Epilogue("Clip", -math.inf, 0.5),), ("HG_SGEMM_CLAMP_CLIP", "(-INFINITY)", "0.5f")),
        ((Epilogue("HardSwish"),), None),  # the C epilogue's expression, on every ISA
        ((Epilogue("Sigmoid"),), None),
        ((Epilogue("Relu"), Epilogue("Clip", 0.0, 6.0)), None),  # one clamp at most
    ],
)
def test_the_micro_kernel_takes_no_activation_or_one_clamp(epilogue, expected):
    finish = _gemm_plan.finish(epilogue)
    assert (finish and (finish["clamp"], finish["lo"], finish["hi"])) == expected


def pointwise(channels, out_channels, size, stride=1, bias=True, residual=False, epilogue=()):
    """The parameters of a 1x1 Conv's kernel (weights constant)."""
    out = (size - 1) // stride + 1
    w = np.ones((out_channels, channels, 1, 1), np.float32)
    attrs = {"kernel_shape": (1, 1), "strides": (stride, stride)}
    names = ("x", "w", *(("b",) if bias or residual else ()), *(("r",) if residual else ()))
    node = Node("pw", "Conv", names, ("y",), tuple(sorted(attrs.items())))
    y = TensorType(DType.FLOAT32, (1, out_channels, out, out))
    types = [TensorType(DType.FLOAT32, (1, channels, size, size)), TensorType(DType.FLOAT32, w.shape)]
    types += [TensorType(DType.FLOAT32, (out_channels,))] if bias or residual else []
    types += [y] if residual else []
    consts = (None, w, *([None] * (len(types) - 2)))
    instance = OpInstance(node, tuple(types), (y,), consts, epilogue=epilogue)
    return op_def("Conv").lower(instance).params


def test_the_lowering_passes_the_groups_bias_and_the_residuals_block():
    p = pointwise(13, 37, 9, residual=True, epilogue=(Epilogue("Clip", 0.0, 6.0),))
    assert p["variant"] == "pointwise"
    assert p["finish"] == {
        "clamp": "HG_SGEMM_CLAMP_CLIP",
        "lo": "0.0f",
        "hi": "6.0f",
        "bias": "bias + g * 37u",
        "residual": "residual + (yg - y)",
    }
    stride2 = pointwise(13, 37, 9, stride=2, epilogue=(Epilogue("Relu"),))
    assert stride2["variant"] == "implicit_planes" and stride2["finish"]["residual"] == "NULL"
    assert pointwise(13, 37, 9, epilogue=(Epilogue("HardSwish"),))["finish"] is None
    assert pointwise(13, 37, 9, bias=False)["finish"] is None  # nothing to apply: no epilogue either


def pointwise_model() -> onnx.ModelProto:
    """1x1 layers around the shapes of MobileNet-class blocks, scaled down: 13 -> 40 (ReLU6) -> 13
    (+ x) -> 37 (Relu) -> 24 stride 2 (HardSwish) -> 24 (+ itself, ReLU6) -> 16 (no bias). 20 x 20
    pixels: 12 full tiles and a 16-column one; 13 and 37 rows: a partial row panel."""
    rng = np.random.default_rng(11)
    layers = [  # (out channels, stride, bias, residual input, activation)
        (40, 1, True, None, ("Clip", 0.0, 6.0)),
        (13, 1, True, "x", None),
        (37, 1, True, None, ("Relu",)),
        (24, 2, True, None, ("HardSwish",)),
        (24, 1, True, "same", ("Clip", 0.0, 6.0)),
        (16, 1, False, None, None),
    ]
    nodes, inits, name, channels = [], [], "x", 13
    for k, (out_channels, stride, bias, residual, activation) in enumerate(layers):
        w = (rng.standard_normal((out_channels, channels, 1, 1)) / np.sqrt(channels)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        inputs = [name, f"w{k}"]
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), f"b{k}"))
            inputs.append(f"b{k}")
        conv = f"conv{k}"
        nodes.append(helper.make_node("Conv", inputs, [conv], kernel_shape=[1, 1], strides=[stride] * 2))
        if residual:
            nodes.append(helper.make_node("Add", [conv, "x" if residual == "x" else name], [f"sum{k}"]))
            conv = f"sum{k}"
        if activation:
            kind, *bounds = activation
            extra = [f"lo{k}", f"hi{k}"] if bounds else []
            inits += [numpy_helper.from_array(np.float32(v), n) for n, v in zip(extra, bounds)]
            nodes.append(helper.make_node(kind, [conv, *extra], [f"y{k}"]))
            conv = f"y{k}"
        name, channels = conv, out_channels
    outputs = [
        helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 37, 20, 20]),
        helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 16, 10, 10]),
    ]
    graph = helper.make_graph(
        nodes, "pointwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 13, 20, 20])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_the_program_is_priced_as_it_runs():
    check(import_graph(pointwise_model(), {}), load_platform_text(HOST), "pointwise")


@pytest.mark.cc
def test_a_native_build_matches_onnxruntime_at_one_and_two_threads(tmp_path, monkeypatch):
    import hetgen
    from hetgen.runtime.reference import ort_session

    proto = pointwise_model()
    platform = load_platform_text(HOST + "options: {threads: 2}\n")
    out = hetgen.compile(platform, proto, out=tmp_path / "out", native_only=True, opt=("-O1",))
    kernels = "".join(path.read_text() for path in sorted((out / "host" / "kernels").glob("*.c")))
    # every layer but the HardSwish one (the C epilogue) and the one with nothing to apply
    assert kernels.count("const hg_sgemm_finish finish = {") == 4
    x = np.random.default_rng(3).standard_normal((1, 13, 20, 20)).astype(np.float32)
    wanted = ort_session(proto.SerializeToString()).run(None, {"x": x})
    got = {}
    for threads in (1, 2):
        monkeypatch.setenv("HG_THREADS", str(threads))
        with hetgen.load(out) as model:
            got[threads] = model.run({"x": x})
        for info, value in zip(proto.graph.output, wanted, strict=True):
            np.testing.assert_allclose(got[threads][info.name], value, rtol=1e-5, atol=1e-5, err_msg=info.name)
    for info in proto.graph.output:
        assert np.array_equal(got[1][info.name], got[2][info.name]), info.name
