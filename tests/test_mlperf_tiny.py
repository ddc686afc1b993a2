"""MLPerf Tiny's four reference networks (hetgen/models/mlperf_tiny.py) and the Cortex-M boards they
are measured on (platforms/mcu.yaml, mcu-m7.yaml, mcu-m55.yaml; benchmarks/bench_mlperf_tiny.py).

Fast tier: each graph is the published layer list (operators, kernel shapes, strides, Keras 'same'
pads, widths), its parameter and MAC counts match the published figures, its int8 version is
onnxruntime's per-channel QDQ and still agrees with the float model. External tier: each int8
model built for the Cortex-M4 board and run under qemu-system-arm matches onnxruntime, and the
SysTick clocks the benchmark converts ticks with are the M7 and M55 boards' real ones.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from hetgen.models.mlperf_tiny import MLPERF_TINY, PUBLISHED, graph_counts, mlperf_tiny_int8
from hetgen.platform.loader import load_platform

ort = pytest.importorskip("onnxruntime")

REPO = Path(__file__).resolve().parent.parent


def attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def convs(model) -> list[dict]:
    """Each Conv's kernel, stride, group, pads and output channels, in graph order."""
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type == "Conv":
            a = attrs(node)
            found.append(
                {
                    "kernel": tuple(a["kernel_shape"]),
                    "stride": a["strides"][0],
                    "group": a.get("group", 1),
                    "pads": tuple(a["pads"]),
                    "cout": weights[node.input[1]][0],
                }
            )
    return found


def shape_of(value) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value.type.tensor_type.shape.dim)


@pytest.mark.parametrize("name", sorted(MLPERF_TINY))
def test_parameters_and_macs_match_the_published_figures(name):
    params, macs = graph_counts(MLPERF_TINY[name]())
    assert abs(params / PUBLISHED[name]["params"] - 1) < 0.03, params
    assert abs(macs / PUBLISHED[name]["macs"] - 1) < 0.03, macs


def test_graph_counts_count_what_the_layers_compute():
    # DS-CNN by hand: stem 25x5 positions x 64 x 10x4; 4 x (DW 125 x 64 x 9 + PW 125 x 64 x 64); FC 64 x 12
    assert graph_counts(MLPERF_TINY["ds_cnn"]()) == (
        64 * 40 + 64 + 4 * (64 * 9 + 64 + 64 * 64 + 64) + 64 * 12 + 12,
        125 * 64 * 40 + 4 * (125 * 64 * 9 + 125 * 64 * 64) + 64 * 12,
    )


def test_ds_cnn_layers():
    model = MLPERF_TINY["ds_cnn"]()
    assert shape_of(model.graph.input[0]) == (1, 1, 49, 10) and shape_of(model.graph.output[0]) == (1, 12)
    layers = convs(model)
    # Conv2D 64 (10, 4) stride 2 'same' on 49x10: 9 rows of padding (4 above, 5 below), 2 columns
    assert layers[0] == {"kernel": (10, 4), "stride": 2, "group": 1, "pads": (4, 1, 5, 1), "cout": 64}
    depthwise = {"kernel": (3, 3), "stride": 1, "group": 64, "pads": (1, 1, 1, 1), "cout": 64}
    pointwise = {"kernel": (1, 1), "stride": 1, "group": 1, "pads": (0, 0, 0, 0), "cout": 64}
    assert layers[1:] == [depthwise, pointwise] * 4
    (pool,) = [n for n in model.graph.node if n.op_type == "AveragePool"]
    assert attrs(pool)["kernel_shape"] == [25, 5]  # AveragePooling2D((25, 5)): the whole map
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["BatchNormalization"] == 9 and ops["Relu"] == 9 and ops["Gemm"] == 1 and ops["Softmax"] == 1


def test_mobilenet_v1_vww_layers():
    model = MLPERF_TINY["mobilenet_v1_vww"]()
    assert shape_of(model.graph.input[0]) == (1, 3, 96, 96) and shape_of(model.graph.output[0]) == (1, 2)
    layers = convs(model)
    # 3x3 stride 2 'same' on an even map pads only below and to the right
    assert layers[0] == {"kernel": (3, 3), "stride": 2, "group": 1, "pads": (0, 0, 1, 1), "cout": 8}
    depthwise, pointwise = layers[1::2], layers[2::2]
    assert len(depthwise) == len(pointwise) == 13
    assert [d["stride"] for d in depthwise] == [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]
    assert [p["cout"] for p in pointwise] == [16, 32, 32, 64, 64, 128, 128, 128, 128, 128, 128, 256, 256]
    assert all(d["group"] == d["cout"] and d["kernel"] == (3, 3) for d in depthwise)
    assert all(p["kernel"] == (1, 1) and p["group"] == 1 for p in pointwise)
    (pool,) = [n for n in model.graph.node if n.op_type == "AveragePool"]
    assert attrs(pool)["kernel_shape"] == [3, 3]
    assert {n.op_type for n in model.graph.node} == {"Conv", "BatchNormalization", "Relu", "AveragePool"} | {
        "Flatten",
        "Gemm",
        "Softmax",
    }  # ReLU, not ReLU6 (Clip), as the reference writes it


def test_resnet8_layers():
    model = MLPERF_TINY["resnet8"]()
    assert shape_of(model.graph.input[0]) == (1, 3, 32, 32) and shape_of(model.graph.output[0]) == (1, 10)
    layers = convs(model)
    assert [(c["kernel"], c["stride"], c["cout"]) for c in layers] == [
        ((3, 3), 1, 16),
        ((3, 3), 1, 16),
        ((3, 3), 1, 16),
        ((3, 3), 2, 32),
        ((3, 3), 1, 32),
        ((1, 1), 2, 32),  # the projection of stacks 2 and 3
        ((3, 3), 2, 64),
        ((3, 3), 1, 64),
        ((1, 1), 2, 64),
    ]
    assert layers[3]["pads"] == (0, 0, 1, 1) and layers[5]["pads"] == (0, 0, 0, 0)
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["Add"] == 3 and ops["BatchNormalization"] == 7  # no BN on the 1x1 projections, as published
    (pool,) = [n for n in model.graph.node if n.op_type == "AveragePool"]
    assert attrs(pool)["kernel_shape"] == [8, 8]


def test_fc_autoencoder_layers():
    model = MLPERF_TINY["fc_autoencoder"]()
    assert shape_of(model.graph.input[0]) == (1, 640) and shape_of(model.graph.output[0]) == (1, 640)
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    widths = [weights[n.input[1]][0] for n in model.graph.node if n.op_type == "Gemm"]
    assert widths == [128, 128, 128, 128, 8, 128, 128, 128, 128, 640]
    assert [n.op_type for n in model.graph.node].count("Relu") == 9
    assert model.graph.node[-1].op_type == "Gemm"  # the last Dense is linear


@pytest.mark.parametrize("name", sorted(MLPERF_TINY))
def test_int8_version_is_per_channel_qdq_and_agrees_with_the_float_model(name):
    float_model, int8 = MLPERF_TINY[name](), mlperf_tiny_int8(name)
    assert int8.SerializeToString() == mlperf_tiny_int8(name).SerializeToString()  # seeded calibration
    initializers = {t.name: numpy_helper.to_array(t) for t in int8.graph.initializer}
    producers = {node.output[0]: node for node in int8.graph.node}
    layers = [n for n in int8.graph.node if n.op_type in ("Conv", "Gemm")]
    assert layers and all(producers[n.input[0]].op_type == "DequantizeLinear" for n in layers)
    for layer in layers:
        weight = producers[layer.input[1]]
        assert initializers[weight.input[0]].dtype == np.int8
        scale = initializers[weight.input[1]]  # one scale per output channel (Conv: M x C x kH x kW;
        assert scale.ndim == 1 and scale.size == initializers[weight.input[0]].shape[0]  # Gemm: transB, N x K)
    assert "BatchNormalization" not in {n.op_type for n in int8.graph.node}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sessions = [ort.InferenceSession(m.SerializeToString(), options) for m in (float_model, int8)]
    shape = shape_of(float_model.graph.input[0])
    rng = np.random.default_rng(5)
    agree, correlations = 0, []
    for _ in range(16):
        x = rng.standard_normal(shape).astype(np.float32)
        a, b = (s.run(None, {"input": x})[0].ravel() for s in sessions)
        agree += int(a.argmax() == b.argmax())
        correlations.append(np.corrcoef(a, b)[0, 1] if a.std() > 0 else 1.0)
    if name == "fc_autoencoder":  # a reconstruction, not a class
        assert min(correlations) > 0.95, correlations
    else:
        assert agree >= 14, agree


def test_m7_and_m55_boards():
    m7, m55 = load_platform(str(REPO / "platforms/mcu-m7.yaml")), load_platform(str(REPO / "platforms/mcu-m55.yaml"))
    assert m7.root.kind.name == "cortex-m7" and m55.root.kind.name == "cortex-m55"
    assert m7.root.toolchain.emulator[-1] == "mps2-an500"
    assert m55.root.toolchain.emulator[-1] == "mps3-an547"


# -- under emulation ----------------------------------------------------------------------------

QEMU_TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")
needs_qemu = pytest.mark.skipif(not all(map(shutil.which, QEMU_TOOLS)), reason="needs arm-none-eabi-gcc and qemu")


# What the M4 ELF may differ from onnxruntime by, in steps of the output's quantization. Three match
# bit for bit. DS-CNN's first pointwise convolution has an output at -119.5000003 steps (seed 0's
# input): the integer kernel rounds the exact sum to -120, onnxruntime (which with its optimisations
# off runs DequantizeLinear -> float Conv -> QuantizeLinear) accumulates in float32 and gets -119;
# such one-step differences grow through the four blocks to one step of the softmax's output.
ALLOWED_STEPS = {"ds_cnn": 1, "mobilenet_v1_vww": 0, "resnet8": 0, "fc_autoencoder": 0}


@pytest.mark.external
@needs_qemu
@pytest.mark.parametrize("name", sorted(MLPERF_TINY))
def test_int8_model_on_cortex_m4_matches_onnxruntime_under_qemu(tmp_path, name):
    import hetgen
    from hetgen.runtime.verify import verify

    model = mlperf_tiny_int8(name)
    out = hetgen.compile(REPO / "platforms/mcu.yaml", model, out=tmp_path / name)
    # the output is DequantizeLinear's: verify compares it in steps of its scale
    (error,) = verify(out, seed=0, emulate=True, steps=ALLOWED_STEPS[name])
    assert error.ok and error.in_steps, error.describe()
    assert error.max_abs <= ALLOWED_STEPS[name]


LOOP = r"""
#include "hg_board.h"
int main(void)
{
    char number[24];
    uint32_t count = 10000000u;
    hg_board_ticks_start();
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(count)); /* two instructions a turn */
    hg_board_print("hg_board: ticks=");
    hg_board_print(hg_board_decimal(hg_board_ticks(), number));
    hg_board_print("\n");
    return 0;
}
"""


@pytest.mark.external
@needs_qemu
@pytest.mark.parametrize(("board", "hz"), [("mcu-m7", 25_000_000), ("mcu-m55", 32_000_000)])
def test_systick_clock_of_the_m7_and_m55_boards(tmp_path, board, hz):
    """What bench_mlperf_tiny.py converts ticks with: under -icount shift=0 (one instruction per ns),
    a loop of 20 million instructions reads 20e6 / (1e9 / hz) ticks of the board's SysTick."""
    import hetgen
    from hetgen.runtime.emulate import board_report, semihosting_command

    project = hetgen.compile(REPO / f"platforms/{board}.yaml", MLPERF_TINY["ds_cnn"](), tmp_path / "p", build=False)
    root = project / board.replace("-", "_")
    platform = load_platform(str(REPO / f"platforms/{board}.yaml"))
    flags = [*platform.root.toolchain.cflags, "-O2", "-nostartfiles"]
    source, elf = tmp_path / "loop.c", tmp_path / "loop.elf"
    source.write_text(LOOP)
    subprocess.run(
        ["arm-none-eabi-gcc", *flags, "-I", str(project / "runtime"), "-T", str(root / "link.ld")]
        + [str(source), str(project / "runtime/hg_board.c"), "-o", str(elf)],
        check=True,
    )
    emulator = tuple(platform.root.toolchain.emulator)
    command = semihosting_command((*emulator, "-icount", "shift=0", str(elf)), "loop", [])
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert abs(board_report(result.stdout)["ticks"] * 1e9 / hz - 20_000_000) <= 200
