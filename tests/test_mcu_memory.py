"""A microcontroller build's RAM against the activations' liveness bound (hetgen/lower/peak_memory.py):
the arena (activations and kernel workspaces, as planned) plus the caller's input and output buffers
within 10 % of the bound, plus one alignment unit per planned buffer (each starts on a 64-byte
boundary). The int8 kernels read their weights where they are linked and keep only two int16
columns (or one row) of activations, so int8 builds of every model meet it; fp32 builds whose GEMM
still packs into an application core's panels in the workspace do not yet (strict xfail: the day
they do, the mark must go)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from hetgen import lower
from hetgen.lower.memory import ALIGNMENT
from hetgen.lower.peak_memory import memory_figures
from hetgen.models import lenet5, mlp, tiny_cnn
from hetgen.partition.search import place
from hetgen.pipeline import import_graph
from hetgen.platform.loader import load_platform_text

REPO = Path(__file__).resolve().parent.parent
SLACK = 1.10
MODELS = {
    "lenet5": lambda: lenet5(seed=1),
    "tiny_cnn": lambda: tiny_cnn(seed=2),
    "mlp": lambda: mlp(seed=3),
    "resnet_tiny": lambda: onnx.load(REPO / "examples/resnet_tiny.onnx"),
}
FP32_PACKS = "the fp32 GEMM packs B panels sized for application cores into the workspace"
CASES = [
    *(pytest.param(name, "int8", id=f"{name}-int8") for name in MODELS),
    pytest.param("resnet_tiny", "fp32", id="resnet_tiny-fp32"),
    *(
        pytest.param(name, "fp32", id=f"{name}-fp32", marks=pytest.mark.xfail(strict=True, reason=FP32_PACKS))
        for name in ("lenet5", "tiny_cnn", "mlp")
    ),
]


@pytest.mark.parametrize(("name", "precision"), CASES)
def test_mcu_ram_within_the_liveness_bound(name, precision):
    model = MODELS[name]()
    if precision == "int8":
        pytest.importorskip("onnxruntime.quantization")
        from hetgen.models.quantized import quantized

        model = quantized(model, "QDQ")
    graph = import_graph(model, {})
    platform = load_platform_text((REPO / "platforms/mcu.yaml").read_text())
    lowered = lower.lower(graph, platform, place(graph, platform))
    figures = memory_figures(lowered, 0)
    buffers = len(lowered.root.memory.buffers)
    ram = figures.arena + figures.io
    allowed = figures.activation_bound * SLACK + ALIGNMENT * buffers
    assert ram <= allowed, (
        f"{name} {precision}: arena {figures.arena} + io {figures.io} = {ram} bytes, "
        f"bound {figures.activation_bound} (+10 % + {buffers} x {ALIGNMENT}: {allowed:.0f})"
    )
