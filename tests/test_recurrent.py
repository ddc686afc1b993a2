"""RNN, GRU and LSTM beyond the ONNX node cases, against onnxruntime: the attribute combinations the
node cases leave out, and a keyword spotter through the whole pipeline on host and on soc.yaml."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import harness
import hetgen
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

FAST = {"opt": ("-O1",), "native_tuning": False, "native_only": True}
HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"
SOC = Path(__file__).resolve().parents[1] / "platforms" / "soc.yaml"
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
F = TensorProto.FLOAT


def recurrent_model(kind, steps=5, batch=3, inputs=4, hidden=6, seq_lens=None, peepholes=False, **attrs):
    """One recurrent node, its weights initializers; `layout` 1 puts batch first in X, Y and the states."""
    rng = np.random.default_rng(len(kind) + steps + hidden)
    directions = 2 if attrs.get("direction") == "bidirectional" else 1
    g = GATES[kind]
    weights = {
        "W": rng.uniform(-0.6, 0.6, (directions, g * hidden, inputs)),
        "R": rng.uniform(-0.6, 0.6, (directions, g * hidden, hidden)),
        "B": rng.uniform(-0.3, 0.3, (directions, 2 * g * hidden)),
    }
    names = ["X", "W", "R", "B", "", "h0"]
    if seq_lens is not None:
        weights["lens"] = np.asarray(seq_lens, dtype=np.int32)
        names[4] = "lens"
    batch_first = attrs.get("layout", 0) == 1
    state_shape = (batch, directions, hidden) if batch_first else (directions, batch, hidden)
    weights["h0"] = rng.uniform(-0.5, 0.5, state_shape)
    if kind == "LSTM":
        weights["c0"] = rng.uniform(-0.5, 0.5, state_shape)
        names.append("c0")
        if peepholes:
            weights["P"] = rng.uniform(-0.5, 0.5, (directions, 3 * hidden))
            names.append("P")
    initializers = [
        numpy_helper.from_array(v if v.dtype == np.int32 else v.astype(np.float32), k) for k, v in weights.items()
    ]
    outputs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outputs, hidden_size=hidden, **attrs)
    shapes = {"Y": [steps, directions, batch, hidden], "Y_h": list(state_shape)}
    if batch_first:
        shapes["Y"] = [batch, steps, directions, hidden]
    shapes["Y_c"] = shapes["Y_h"]
    x_shape = [batch, steps, inputs] if batch_first else [steps, batch, inputs]
    graph = helper.make_graph(
        [node],
        kind.lower(),
        [helper.make_tensor_value_info("X", F, x_shape)],
        [helper.make_tensor_value_info(name, F, shapes[name]) for name in outputs],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


VARIANTS = [
    ("RNN", {"direction": "bidirectional", "activations": ["Relu", "LeakyRelu"], "activation_alpha": [0.2]}),
    ("RNN", {"direction": "reverse", "seq_lens": [5, 2, 0]}),
    ("RNN", {"activations": ["ScaledTanh"], "activation_alpha": [0.7], "activation_beta": [1.3], "clip": 0.8}),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1, "seq_lens": [3, 5, 1]}),
    ("GRU", {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.4]}),
    ("GRU", {"direction": "reverse", "clip": 0.5}),
    ("LSTM", {"direction": "bidirectional", "peepholes": True, "seq_lens": [4, 5, 2]}),
    ("LSTM", {"direction": "reverse", "input_forget": 1, "peepholes": True}),
    ("LSTM", {"activations": ["Sigmoid", "Elu", "Softplus"], "clip": 1.5}),
    # (steps, batch, inputs, hidden): hidden units over several GEMV panels, the last one partial, an
    # odd count (the GEMV's k loop remainder); batch first (layout 1)
    ("GRU", {"direction": "bidirectional", "layout": 1, "shape": (7, 2, 5, 37)}),
    ("GRU", {"linear_before_reset": 1, "clip": 0.9, "seq_lens": [7, 3], "shape": (7, 2, 5, 37)}),
    (
        "LSTM",
        {"direction": "bidirectional", "layout": 1, "peepholes": True, "seq_lens": [6, 0, 3], "shape": (6, 3, 5, 33)},
    ),
    ("RNN", {"direction": "reverse", "layout": 1, "shape": (4, 2, 3, 70)}),
]


@pytest.mark.parametrize("kind, attrs", VARIANTS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(VARIANTS)])
def test_recurrent_variant_matches_onnxruntime(kind, attrs):
    attrs = dict(attrs)
    steps, batch, inputs, hidden = attrs.pop("shape", (5, 3, 4, 6))
    model = recurrent_model(
        kind,
        steps,
        batch,
        inputs,
        hidden,
        seq_lens=attrs.pop("seq_lens", None),
        peepholes=attrs.pop("peepholes", False),
        **attrs,
    )
    x_shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(x_shape).astype(np.float32)
    got = harness.run_model(model, {"X": x})
    if attrs.get("layout") == 1:  # onnxruntime has no batch-first recurrent kernels: its layout 0, transposed
        expected = batch_first_reference(model, x)
    else:
        expected = ort_session(model.SerializeToString()).run(None, {"X": x})
    for output, wanted in zip(model.graph.output, expected):
        np.testing.assert_allclose(got[output.name], wanted, rtol=1e-5, atol=1e-5, err_msg=output.name)


def batch_first_reference(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """onnxruntime's outputs for a layout-1 node: the same node at layout 0 on X and the initial
    states transposed to sequence first, its outputs transposed back."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    (node,) = model.graph.node
    node.attribute.remove(next(a for a in node.attribute if a.name == "layout"))
    for tensor in model.graph.initializer:
        if tensor.name in ("h0", "c0"):
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).transpose(1, 0, 2), tensor.name))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.ClearField("shape")
    outputs = ort_session(model.SerializeToString()).run(None, {"X": x.transpose(1, 0, 2)})
    return [y.transpose(2, 0, 1, 3) if y.ndim == 4 else y.transpose(1, 0, 2) for y in outputs]


def keyword_spotter(kind: str) -> onnx.ModelProto:
    """MFCC frames [batch 1, 49 frames, 10 coefficients] → a recurrent layer → 12 keyword scores."""
    rng = np.random.default_rng(5)
    frames, coefficients, hidden, keywords = 49, 10, 32, 12
    g = GATES[kind]
    init = {
        "W": rng.uniform(-0.3, 0.3, (1, g * hidden, coefficients)),
        "R": rng.uniform(-0.3, 0.3, (1, g * hidden, hidden)),
        "B": rng.uniform(-0.1, 0.1, (1, 2 * g * hidden)),
        "fc_w": rng.uniform(-0.3, 0.3, (hidden, keywords)),
        "fc_b": rng.uniform(-0.1, 0.1, (keywords,)),
        "shape": np.asarray([1, hidden]),
    }
    nodes = [
        helper.make_node("Transpose", ["mfcc"], ["frames"], perm=[1, 0, 2]),
        helper.make_node(kind, ["frames", "W", "R", "B"], ["", "state"], hidden_size=hidden),
        helper.make_node("Reshape", ["state", "shape"], ["features"]),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["scores"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        f"kws_{kind.lower()}",
        [helper.make_tensor_value_info("mfcc", F, [1, frames, coefficients])],
        [helper.make_tensor_value_info("scores", F, [1, keywords])],
        initializer=[
            numpy_helper.from_array(v.astype(np.int64 if k == "shape" else np.float32), k) for k, v in init.items()
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("platform", ["host", "soc"])
@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_keyword_spotter_matches_onnxruntime(tmp_path, kind, platform):
    proto = keyword_spotter(kind)
    text = HOST if platform == "host" else SOC.read_text()
    out = hetgen.compile(load_platform_text(text), proto, out=tmp_path / platform, **FAST)
    mfcc = np.random.default_rng(6).standard_normal((1, 49, 10)).astype(np.float32)
    got = hetgen.load(out).run({"mfcc": mfcc})["scores"]
    (wanted,) = ort_session(proto.SerializeToString()).run(None, {"mfcc": mfcc})
    np.testing.assert_allclose(got, wanted, rtol=1e-5, atol=1e-6)
    assert abs(float(got.sum()) - 1.0) < 1e-5


def recurrent_stack() -> onnx.ModelProto:
    """A bidirectional LSTM (peepholes, sequence lengths, clip) feeding a GRU and an RNN: every branch
    of the template that a compiler could warn about."""
    lstm = recurrent_model("LSTM", seq_lens=[5, 3, 1], peepholes=True, direction="bidirectional", clip=2.0)
    gru = recurrent_model("GRU", linear_before_reset=1, direction="reverse")
    rnn = recurrent_model("RNN", activations=["LeakyRelu"], activation_alpha=[0.1])
    nodes = list(lstm.graph.node)
    inits = list(lstm.graph.initializer)
    for prefix, model in (("g_", gru), ("r_", rnn)):
        nodes.append(_prefixed(model, prefix, inits))
    shapes = {"Y": [5, 2, 3, 6], "Y_h": [2, 3, 6], "Y_c": [2, 3, 6], "g_Y": [5, 1, 3, 6], "r_Y_h": [1, 3, 6]}
    outputs = [helper.make_tensor_value_info(n, F, shape) for n, shape in shapes.items()]
    graph = helper.make_graph(nodes, "stack", list(lstm.graph.input), outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _prefixed(model: onnx.ModelProto, prefix: str, inits: list) -> onnx.NodeProto:
    """The one recurrent node of `model` with its names but the shared input X prefixed, its
    initializers (renamed alike) appended to `inits`: several such models stacked on one input."""
    for tensor in model.graph.initializer:
        tensor.name = prefix + tensor.name
        inits.append(tensor)
    (node,) = model.graph.node
    node.input[:] = ["X" if n == "X" else (prefix + n if n else "") for n in node.input]
    node.output[:] = [prefix + n for n in node.output]
    return node


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_recurrent_and_float16_kernels_compile_without_warnings(tmp_path, compiler):
    import shutil

    from test_float16 import float16_mlp
    from test_toolchains import assert_compiles_warning_free

    for name, model in (("stack", recurrent_stack()), ("mlp16", float16_mlp())):
        out = tmp_path / name
        hetgen.compile(load_platform_text(SOC.read_text()), model, out=out, build=False, weights="c_array")
        assert_compiles_warning_free(shutil.which(compiler), out, tmp_path / f"{name}-objects")


def wide_stack() -> onnx.ModelProto:
    """A bidirectional GRU, a bidirectional LSTM (peepholes, sequence lengths, clip) and a reverse
    RNN on one input of batch 3, hidden sizes over several GEMV panels, the last partial."""
    shape = (6, 3, 5)
    models = {
        "g_": recurrent_model("GRU", *shape, 37, seq_lens=[6, 2, 0], direction="bidirectional"),
        "l_": recurrent_model(
            "LSTM", *shape, 33, seq_lens=[4, 6, 1], peepholes=True, direction="bidirectional", clip=2.0
        ),
        "r_": recurrent_model("RNN", *shape, 40, direction="reverse"),
    }
    nodes, inits, outputs = [], [], []
    for prefix, model in models.items():
        nodes.append(_prefixed(model, prefix, inits))
        for output in model.graph.output:
            output.name = prefix + output.name
            outputs.append(output)
    x = models["g_"].graph.input
    graph = helper.make_graph(nodes, "wide_stack", list(x), outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_prepacked_recurrent_kernels_match_onnxruntime_under_sanitizers(tmp_path):
    """Constant W and R packed at generate time (the harness's kernels pack R themselves), built
    for this machine's vector unit, clean under ASan/UBSan, and the same numbers as onnxruntime."""
    import subprocess
    import sys

    out = hetgen.compile(
        load_platform_text(HOST),
        wide_stack(),
        out=tmp_path / "out",
        native_only=True,
        werror=True,
        sanitize=("address", "undefined"),
        opt=("-O1",),
    )
    kernels = "\n".join(path.read_text() for path in out.rglob("*.c"))
    assert kernels.count("/* packed at generate time */") >= 6  # W and R of each node
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-m", "hetgen", "verify", str(out)], capture_output=True, text=True, cwd=root, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "7 of 7 outputs match onnxruntime" in result.stdout, result.stdout
