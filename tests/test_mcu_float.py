"""Float Conv, Gemm and MatMul on bare metal read their weights where they are linked (flash):
hetgen/ops/_in_place.py's kernels, taken on bare-metal targets only. Under qemu-system-arm on the
Cortex-M4 (FPv4 VFMA), the Cortex-M55 (Helium VFMA) and the Cortex-M3 (soft float), against
onnxruntime: grouped, strided, padded and dilated 2-D convolutions, a 1-D one, Gemm with transposes,
alpha, beta and a broadcast C, a fully connected Gemm and a batched MatMul; no kernel calls the
packing GEMM."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.runtime.verify import verify

pytestmark = pytest.mark.external  # cross-compiled for Cortex-M, run under qemu-system-arm

TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")
F = TensorProto.FLOAT


def layers() -> onnx.ModelProto:
    rng = np.random.default_rng(4)

    def const(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    nodes = [
        helper.make_node(
            "Conv",
            ["x2d", "w2d", "b2d"],
            ["c2d"],
            group=2,
            strides=[2, 1],
            pads=[1, 0, 2, 1],
            dilations=[1, 2],
        ),
        helper.make_node("Relu", ["c2d"], ["y2d"]),
        helper.make_node("Conv", ["x1d", "w1d"], ["y1d"], strides=[3], pads=[2, 1]),
        helper.make_node("Gemm", ["ga", "gb", "gc"], ["yg"], transA=1, alpha=0.7, beta=1.3),
        helper.make_node("Gemm", ["fa", "fw", "fb"], ["yf"], transB=1),
        helper.make_node("MatMul", ["ma", "mb"], ["ym"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x2d", F, [1, 4, 11, 9]),
        helper.make_tensor_value_info("x1d", F, [1, 3, 17]),
        helper.make_tensor_value_info("ga", F, [7, 2]),
        helper.make_tensor_value_info("fa", F, [1, 33]),
        helper.make_tensor_value_info("ma", F, [2, 3, 8]),
    ]
    outputs = [helper.make_tensor_value_info(name, F, None) for name in ("y2d", "y1d", "yg", "yf", "ym")]
    initializers = [
        const("w2d", (6, 2, 3, 3)),
        const("b2d", (6,)),
        const("w1d", (5, 3, 4)),
        const("gb", (7, 5)),
        const("gc", (5,)),
        const("fw", (10, 33)),
        const("fb", (10,)),
        const("mb", (8, 6)),
    ]
    graph = helper.make_graph(nodes, "in_place", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS), reason="needs arm-none-eabi-gcc, qemu-system-arm"
)
@pytest.mark.parametrize("kind", ["cortex-m4", "cortex-m55", "cortex-m"])
def test_float_layers_read_weights_in_place_under_qemu(tmp_path, kind):
    platform = tmp_path / "mcu.yaml"
    platform.write_text(f"name: mcu\ntarget: {{kind: {kind}, runtime: aot}}\n")
    out = hetgen.compile(platform, layers(), out=tmp_path / "out", opt=("-O2",), werror=True)
    kernels = "".join(path.read_text() for path in (out / "mcu" / "kernels").glob("*.c"))
    assert "hg_sgemm_ex" not in kernels and kernels.count("hg_sdot_") >= 5
    errors = verify(out, seed=2, emulate=True)
    assert errors and all(e.ok for e in errors), errors
