"""The generated program's memory (arena + packed weights + the caller's buffers) against its bound:
the model's weights plus the liveness lower bound of its activations (hetgen/lower/peak_memory.py).
`options.memory: lean`, the default, keeps real builds within 10 % of it, with the caller's buffers
counted on both sides and left out of both; `fast` does not. Lean gets there by taking Winograd's
larger weights only where they fit, and by giving each layer whose workspace would lift the
activation peak smaller GEMM blocks (hetgen/partition/prepack.py); those layers still match onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen import lower
from hetgen.lower.peak_memory import memory_figures
from hetgen.models import cnn
from hetgen.models.suite import BENCH_MODELS
from hetgen.ops._gemm_plan import DEFAULT_BLOCKS, KC_FLOOR, PANEL_N, smaller_blocks
from hetgen.partition.search import place
from hetgen.pipeline import import_graph
from hetgen.platform.loader import load_platform_text
from hetgen.platform.tuning import gemm_blocks
from hetgen.runtime.verify import verify
from verify_support import verify_matches

HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"
SLACK = 1.10
REPO = Path(__file__).resolve().parent.parent


def mlp(rows: int = 16, width: int = 256, hidden: int = 1024) -> onnx.ModelProto:
    """x [rows x width] -> MatMul -> Relu -> MatMul -> y: two steps whose live tensors are known."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])],
        [
            numpy_helper.from_array(rng.standard_normal((width, hidden)).astype(np.float32) * 0.05, "w1"),
            numpy_helper.from_array(rng.standard_normal((hidden, width)).astype(np.float32) * 0.05, "w2"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def weights_of(model: onnx.ModelProto) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def lowered(model: onnx.ModelProto, platform_text: str):
    graph, platform = import_graph(model, {}), load_platform_text(platform_text)
    return lower.lower(graph, platform, place(graph, platform))


def figures(model: onnx.ModelProto, platform_text: str):
    return memory_figures(lowered(model, platform_text), weights_of(model))


def own_blocks(model: onnx.ModelProto, platform_text: str = HOST) -> dict[str, tuple[str, int, int]]:
    """The layers that were given GEMM blocks smaller than the platform's: label -> (variant, kc, nc)."""
    found = {}
    platform = load_platform_text(platform_text)
    blocks = gemm_blocks(platform)
    for unit in lowered(model, platform_text).root.units:
        params = unit.kernel.params
        if "gemm_nc" in params and (params["gemm_kc"], params["gemm_nc"]) != (blocks.kc, blocks.nc):
            found[unit.label] = (params["variant"], params["gemm_kc"], params["gemm_nc"])
    return found


def test_the_bound_is_the_weights_plus_the_most_bytes_live_at_one_step():
    model = mlp()
    got = figures(model, HOST)
    # x and y are the caller's buffers, there for the whole run; of the rest only r (16 x 1024
    # floats, between the two steps) is ever live: MatMul + Relu is one step.
    assert got.activation_bound == 4 * (16 * 256 + 16 * 256 + 16 * 1024)
    assert got.model_weights == 4 * 2 * 256 * 1024
    assert got.bound == got.model_weights + got.activation_bound
    assert got.io == 4 * 2 * 16 * 256
    assert got.program == got.arena + got.weights + got.io


def built_within_the_bound(tmp_path: Path, name: str, model: onnx.ModelProto) -> float:
    """Build for real (lean: the default), check the build against onnxruntime, return program / bound."""
    out = hetgen.compile("host", model, out=tmp_path / name, native_only=True, opt=("-O1",))  # memory, not speed
    errors = verify(out, seed=0)
    assert errors and all(e.ok for e in errors), errors
    root = json.loads((out / "hetgen.json").read_text())["targets"][0]
    planned = figures(model, HOST)
    # the built program is the one the figures describe
    assert (root["arena_size"], root["weights_bytes"]) == (planned.arena, planned.weights)
    return planned.program / planned.bound


@pytest.mark.cc
def test_an_mlp_builds_within_ten_percent_of_its_bound(tmp_path):
    assert built_within_the_bound(tmp_path, "mlp", mlp()) <= SLACK


@pytest.mark.cc
def test_a_vgg_builds_within_ten_percent_of_its_bound_where_fast_memory_would_not(tmp_path):
    """VGG at 64 x 64: Winograd's 16/9 larger weights for every 3x3 layer would put it 35 % over;
    lean takes them only for the layers that fit the budget."""
    model = cnn.vgg(widths=(64, 128, 256), size=64)
    lean = built_within_the_bound(tmp_path, "vgg", model)
    fast = figures(model, HOST + "options: {memory: fast}\n")
    assert lean <= SLACK < fast.program / fast.bound
    # Winograd layers near the activation peak run on fewer tiles at a time (a smaller nc); fast keeps all
    assert any(variant == "winograd" for variant, _, nc in own_blocks(model).values())
    assert own_blocks(model, HOST + "options: {memory: fast}\n") == {}


# Known over the bound (issue #22's suite brought them in): strict, so the fix shows.
OVER_THE_BOUND = {
    # 246,824 bytes of weights packed into 273,152: the Gemms' B panels are padded to 32 columns
    # (120 -> 128, 84 -> 96, 10 -> 32 outputs), 10.7 % on a model that is nearly all Gemm weights
    "lenet5": "LeNet-5's Gemm weights padded to whole 32-column panels: 1.11x its bound",
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=OVER_THE_BOUND[name]))
        if name in OVER_THE_BOUND
        else name
        for name in sorted(BENCH_MODELS)
    ],
)
def test_every_bench_model_is_planned_within_ten_percent_of_its_bound(name):
    """Both ways of counting the caller's buffers: on both sides of the ratio, and on neither."""
    got = figures(BENCH_MODELS[name](), HOST)
    assert got.program / got.bound <= SLACK, got
    assert got.arena_ratio <= SLACK, got


@pytest.mark.cc
def test_a_small_alexnet_stem_takes_smaller_blocks_and_still_matches_onnxruntime(tmp_path):
    """AlexNet at 224: one 1 MiB block of the stem's input taps (nc = 1024 columns of 363 rows) would
    be more than the activations live there; a narrower block keeps the program near its bound."""
    model = cnn.alexnet(size=224)
    blocks = own_blocks(model)
    assert blocks["Conv 'conv' + Relu 'relu'"][2] < DEFAULT_BLOCKS.nc
    assert "Conv 'conv_2' + Relu 'relu_2'" not in blocks  # little is live there: the platform's blocks
    assert built_within_the_bound(tmp_path, "alexnet", model) <= SLACK


def test_a_layers_own_blocks_stay_within_the_platforms_and_the_micro_kernels():
    """Never larger than the platform's (each worker thread's scratch is sized for those), never
    below one B panel of columns or KC_FLOOR rows."""
    tuned = HOST + "options: {tuning: {mc: 64, kc: 256, nc: 512}}\n"
    blocks = own_blocks(cnn.alexnet(size=224), tuned)
    assert blocks
    for _, kc, nc in blocks.values():
        assert KC_FLOOR <= kc <= 256 and PANEL_N <= nc <= 512 and nc % PANEL_N == 0
    for smaller in smaller_blocks(DEFAULT_BLOCKS):
        assert not smaller.problems() and smaller.kc * smaller.nc < DEFAULT_BLOCKS.kc * DEFAULT_BLOCKS.nc


# Smaller models, where greedy by size fragmented the arena 13-24 % above the liveness bound of its
# own buffers and put the program 15-23 % above its bound; the arena planner's search
# (hetgen/lower/memory.py) places them at that liveness bound.
SMALL_MODELS = {
    "resnet(32,64)@64": lambda: cnn.resnet(widths=(32, 64), size=64),
    "googlenet@96": lambda: cnn.googlenet(size=96),
}


@pytest.mark.cc
@pytest.mark.parametrize("name", sorted(SMALL_MODELS))
def test_smaller_models_build_within_ten_percent_of_their_bound(tmp_path, name):
    assert built_within_the_bound(tmp_path, name, SMALL_MODELS[name]()) <= SLACK


@pytest.mark.cc
def test_a_densenet_planned_at_its_bound_is_clean_under_asan_and_ubsan(tmp_path):
    """DenseNet's concatenations keep many maps live at once: every offset the search moved, in a
    sanitized build checked against onnxruntime."""
    model = cnn.densenet(size=32)
    out = hetgen.compile(
        "host", model, out=tmp_path / "densenet", native_only=True, sanitize=("address", "undefined"), opt=("-O1",)
    )
    verify_matches(out, 1)
    planned = figures(model, HOST)
    assert planned.program / planned.bound <= SLACK and planned.arena_ratio <= SLACK, planned
