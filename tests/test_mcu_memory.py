"""A microcontroller build's RAM against the activations' liveness bound (hetgen/lower/peak_memory.py):
the arena (activations and kernel workspaces, as planned) plus the caller's input and output buffers
within 10 % of the bound, strictly: issue 20's "RAM for any model <= its activations' liveness bound
+ 10 % + stack" (the stack is not in the arena, so it is the arena and the caller's buffers that are
held to the bound + 10 %; workspaces must fit in the 10 %). The planner starts every buffer on a
64-byte boundary, so the bound counts each activation rounded up to 64 bytes
(`aligned_activation_bound`): it is what any such plan must hold, and it differs from the unpadded
bound only where tensors are small (the mlp: 296 bytes against 264; the others by at most 1 %). The kernels read their weights where they are linked and keep only
two columns (or one row) of activations in their workspace -- a fully connected layer none: it reads
its input vector in place (hg_qvec_* in templates/runtime/hg_quant.h) -- the int8 ones always
(hetgen/ops/qlinear.py), the float Conv, Gemm and MatMul on bare metal (hetgen/ops/_in_place.py),
where the GEMM would pack operands into blocks sized for application cores (lenet5 fp32 was 1.23x
the bound, tiny_cnn 4.3x, the mlp 12.7x)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from hetgen import lower
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
    # MLPerf Tiny's autoencoder: fully connected layers only, its activations 128 bytes where its
    # 128 -> 640 layer's int32 row of sums took 2,560 (1.48x the bound), then its 640 -> 128 layer's
    # widened input and sums 1,024 (1.174x: 6,912 bytes against 5,888); now 1.000x
    "fc_autoencoder": lambda: onnx.load(REPO / "examples/fc_autoencoder.onnx"),
}
CASES = [pytest.param(name, precision, id=f"{name}-{precision}") for name in MODELS for precision in ("int8", "fp32")]


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
    ram = figures.arena + figures.io
    allowed = figures.aligned_activation_bound * SLACK
    assert ram <= allowed, (
        f"{name} {precision}: arena {figures.arena} + io {figures.io} = {ram} bytes, bound "
        f"{figures.aligned_activation_bound} with 64-byte alignment ({figures.activation_bound} without; "
        f"+10 %: {allowed:.0f})"
    )
