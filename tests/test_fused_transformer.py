"""Transformer kernels: fused attention, LayerNorm and Gelu as single kernels, GEMMs with few rows.

Each test compiles the generated C for real, compares with onnxruntime (graph optimisations off),
and checks from the generated sources that the fusion happened: each kernel file's first line names
the operators it computes.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.frontend import import_model
from hetgen.models import transformer_encoder
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session, random_inputs
from hetgen.spec.patterns import ATTENTION, RESIDUAL
from kernel_text import unit_kernels

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

FAST = {"opt": ("-O1",), "native_tuning": False, "native_only": True}
HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"


def compile_and_compare(tmp_path, proto: onnx.ModelProto, rtol=1e-4, atol=1e-5) -> list[str]:
    """Build `proto` for the host, check it against onnxruntime, return each kernel's label."""
    out = hetgen.compile(load_platform_text(HOST), proto, out=tmp_path / "out", **FAST)
    model = hetgen.load(out)
    feeds = random_inputs(model.inputs, seed=3)
    got = model.run(feeds)
    for info, wanted in zip(model.outputs, ort_session(proto.SerializeToString()).run(None, feeds)):
        np.testing.assert_allclose(got[info.name], wanted, rtol=rtol, atol=atol, err_msg=info.name)
    labels = kernel_labels(out)
    # what runs fused is what placement priced as one kernel (hetgen/spec/patterns.py)
    placement = place(import_model(proto), load_platform_text(HOST))
    priced = sorted(g.label for g in placement.groups if g.label in (ATTENTION, RESIDUAL))
    assert priced == sorted(pattern_kind(label) for label in labels if pattern_kind(label)), (priced, labels)
    return labels


def pattern_kind(label: str) -> str | None:
    """Which multi-operator unit a kernel's label shows, if any."""
    if "Softmax" in label and " + " in label:
        return ATTENTION
    return RESIDUAL if label.startswith("Conv") and " + Add" in label else None


def kernel_labels(out) -> list[str]:
    return list(unit_kernels(out))


def attention_model(
    shape=(2, 3, 13, 12),
    sk=37,
    dv=20,
    scale=("Div", 2.5),
    mask="add",
    scores_output=False,
    opset=17,
) -> onnx.ModelProto:
    """Q [B, H, Sq, D], K [B, H, Sk, D], V [B, H, Sk, Dv] as inputs; K is transposed in the graph."""
    b, h, sq, d = shape
    inputs = [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, [b, h, sq, d]),
        helper.make_tensor_value_info("k", TensorProto.FLOAT, [b, h, sk, d]),
        helper.make_tensor_value_info("v", TensorProto.FLOAT, [b, h, sk, dv]),
    ]
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
    ]
    inits = []
    current = "scores"
    if scale is not None:
        op, value = scale
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), "scale"))
        nodes.append(helper.make_node(op, [current, "scale"], ["scaled"]))
        current = "scaled"
    if mask == "add":
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [b, 1, 1, sk]))
        nodes.append(helper.make_node("Add", ["mask", current], ["masked"]))  # mask first: either order
        current = "masked"
    elif mask in ("where_fill_true", "where_keep_true"):
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, [1, 1, sq, sk]))
        inits.append(numpy_helper.from_array(np.asarray(-1e4, np.float32), "fill"))
        branches = ["fill", current] if mask == "where_fill_true" else [current, "fill"]
        nodes.append(helper.make_node("Where", ["cond", *branches], ["masked"]))
        current = "masked"
    nodes += [
        helper.make_node("Softmax", [current], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, h, sq, dv])]
    if scores_output:
        outputs.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, [b, h, sq, sk]))
    graph = helper.make_graph(nodes, "attention", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def is_attention(label: str) -> bool:
    return label.startswith("MatMul") and "Softmax" in label and label.count("MatMul") == 2


@pytest.mark.parametrize(
    "scale, mask",
    [
        (("Div", 2.5), "add"),
        (("Mul", 0.125), "where_fill_true"),
        (None, "where_keep_true"),
        (None, None),
    ],
)
def test_attention_pattern_is_one_kernel(tmp_path, scale, mask):
    labels = compile_and_compare(tmp_path, attention_model(scale=scale, mask=mask))
    assert len(labels) == 1 and is_attention(labels[0]), labels
    assert "Transpose" in labels[0]  # Kᵀ read through strides, never copied


def test_attention_in_several_row_blocks(tmp_path):
    # 300 query rows of 200 scores: the 64 KiB score block holds 80 rows, so four blocks per head
    labels = compile_and_compare(tmp_path, attention_model(shape=(1, 2, 300, 16), sk=200, dv=24))
    assert len(labels) == 1 and is_attention(labels[0]), labels


def test_attention_with_few_query_rows_and_wide_heads(tmp_path):
    # 5 query rows take the small-m GEMM; 70 keys and 45 values span several partial 32-column panels
    labels = compile_and_compare(tmp_path, attention_model(shape=(1, 2, 5, 40), sk=70, dv=45, mask="where_keep_true"))
    assert len(labels) == 1 and is_attention(labels[0]), labels


def test_scores_read_elsewhere_are_not_fused(tmp_path):
    labels = compile_and_compare(tmp_path, attention_model(scores_output=True))
    assert not any(is_attention(label) for label in labels)
    assert any(label.startswith("Softmax") for label in labels)


def test_transformer_encoder_attention_layer_norm_and_gelu_are_single_kernels(tmp_path):
    proto = transformer_encoder(opset=13, layer_norm="decomposed", layers=2)
    labels = compile_and_compare(tmp_path, proto)
    attention = [label for label in labels if is_attention(label)]
    assert len(attention) == 2, labels
    # the heads' split, Kᵀ and the merge are strides of the fused kernel: no Transpose kernel is left
    assert not any(label.startswith("Transpose") for label in labels), labels
    assert not any(label.startswith(("Softmax", "Where", "Div")) for label in labels), labels
    assert sum(label.startswith("LayerNormalization") for label in labels) == 5, labels
    assert sum(label.startswith("Gelu") for label in labels) == 2, labels
    assert not any(label.startswith(("ReduceMean", "Erf", "Sqrt", "Pow")) for label in labels), labels


def test_attention_operator_body_is_fused(tmp_path):
    b, h, s, d = 1, 2, 9, 8
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, h, s, d]) for n in ("q", "k", "v", "y")]
    graph = helper.make_graph([helper.make_node("Attention", ["q", "k", "v"], ["y"])], "a", io[:3], io[3:])
    try:
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
        ort_session(proto.SerializeToString())
    except Exception as exc:  # an onnxruntime without opset 23
        pytest.skip(f"onnxruntime cannot run Attention-23: {exc}")
    labels = compile_and_compare(tmp_path, proto)
    assert sum(is_attention(label) for label in labels) == 1, labels
    assert not any(label.startswith("Softmax") for label in labels), labels


def gelu_tanh_model(cube: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 33])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 33])
    consts = {"three": 3.0, "c": 0.044715, "k": math.sqrt(2 / math.pi), "one": 1.0, "half": 0.5}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in consts.items()]
    if cube == "pow":
        nodes = [helper.make_node("Pow", ["x", "three"], ["x3"])]
    else:
        nodes = [helper.make_node("Mul", ["x", "x"], ["x2"]), helper.make_node("Mul", ["x2", "x"], ["x3"])]
    nodes += [
        helper.make_node("Mul", ["c", "x3"], ["cx3"]),
        helper.make_node("Add", ["x", "cx3"], ["inner"]),
        helper.make_node("Mul", ["inner", "k"], ["scaled"]),
        helper.make_node("Tanh", ["scaled"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "half"], ["hx"]),
        helper.make_node("Mul", ["hx", "t1"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "gelu_tanh", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("cube", ["pow", "mul"])
def test_decomposed_tanh_gelu_is_one_kernel(tmp_path, cube):
    labels = compile_and_compare(tmp_path, gelu_tanh_model(cube))
    assert len(labels) == 1 and labels[0].startswith("Gelu"), labels


def small_m_model(m: int, n: int, k: int, constant_b: bool, bias: bool) -> onnx.ModelProto:
    """Gemm [m x k] x [k x n] (+ bias, then Relu), B a weight (packed at generate time) or an input."""
    rng = np.random.default_rng(m * 1000 + n)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])]
    inits = []
    if constant_b:
        inits.append(numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n]))
    gemm_inputs = ["a", "b"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c"))
        gemm_inputs.append("c")
    nodes = [helper.make_node("Gemm", gemm_inputs, ["g"]), helper.make_node("Relu", ["g"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])]
    graph = helper.make_graph(nodes, "small_m", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    "m, n, k, constant_b, bias",
    [
        (1, 70, 300, True, True),  # packed B, a partial last block, k past one KC block
        (3, 70, 300, False, True),  # B read by rows, its partial last block copied in KC pieces
        (8, 64, 40, False, False),
        (9, 33, 17, True, True),  # just past the small-m path: the blocked path, same answers
    ],
)
def test_small_m_gemm_matches_onnxruntime(tmp_path, m, n, k, constant_b, bias):
    labels = compile_and_compare(tmp_path, small_m_model(m, n, k, constant_b, bias))
    assert len(labels) == 1 and labels[0].startswith("Gemm") and "Relu" in labels[0], labels


def test_small_m_path_gives_the_blocked_paths_bits(tmp_path):
    """Rows through the small-m path (m = 3) equal, bit for bit, the same rows inside a 9-row GEMM,
    which takes the blocked path: same k order, same fused multiply-adds, same KC blocks."""
    a = np.random.default_rng(5).standard_normal((9, 300)).astype(np.float32)
    results = {}
    for m in (3, 9):
        proto = small_m_model(m, 70, 300, constant_b=True, bias=True)
        rng = np.random.default_rng(6)  # the same weights and bias for both
        proto.graph.initializer[0].CopyFrom(
            numpy_helper.from_array(rng.standard_normal((300, 70)).astype(np.float32), "b")
        )
        proto.graph.initializer[1].CopyFrom(numpy_helper.from_array(rng.standard_normal(70).astype(np.float32), "c"))
        out = hetgen.compile(load_platform_text(HOST), proto, out=tmp_path / f"m{m}", **FAST)
        results[m] = hetgen.load(out).run({"a": a[:m]})["y"]
    assert results[3].tobytes() == results[9][:3].tobytes()
