"""Identical kernels are emitted once and shared, and a large model is a bounded number of
translation units (hetgen/codegen/kernel_files.py): 5,000 nodes must not be 5,000 compiler runs."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.codegen.kernel_files import FILE_BYTES
from hetgen.runtime.verify import verify
from kernel_text import kernel_functions


def conv_relu_chain(layers: int, seed: int = 0) -> onnx.ModelProto:
    """`layers` × (Conv 3x3 with its own weights and bias → Relu): 2 × `layers` nodes, one kernel."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        # 0.2, not more: at 0.3 each layer amplifies rounding (onnxruntime's own float32 result is 0.14
        # off float64's after 100 layers), so agreement would only say "the same summation order"
        w = (rng.standard_normal((4, 4, 3, 3)) * 0.2).astype(np.float32)
        b = (rng.standard_normal(4) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], f"relu{i}"))
        x = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def leaky_chain(alphas) -> onnx.ModelProto:
    """LeakyRelu nodes whose alphas differ: each its own kernel (the alpha is in the C text)."""
    nodes, x = [], "x"
    for i, alpha in enumerate(alphas):
        nodes.append(helper.make_node("LeakyRelu", [x], [f"y{i}"], f"leaky{i}", alpha=float(alpha)))
        x = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "leaky",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 16])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def kernel_files(out) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted((out / "host" / "kernels").glob("*.c"))}


@pytest.mark.cc
def test_two_hundred_identical_nodes_share_one_kernel_function_and_match_onnxruntime(tmp_path):
    out = hetgen.compile("host", conv_relu_chain(100), out=tmp_path / "out", native_only=True, werror=True)
    functions = kernel_functions(out)
    assert len(functions) == 1, sorted(functions)  # 100 Conv + Relu units, one function
    ((name, (label, _)),) = functions.items()
    assert name == "hg_host_k_n0_conv_conv0" and label.endswith("; and 92 more"), label
    assert len(kernel_files(out)) == 1
    model_c = (out / "host" / "model.c").read_text()
    assert len(re.findall(rf"^\s*{name}\(args\);", model_c, re.MULTILINE)) == 100
    assert len(re.findall(r"^void hg_host_k_\w+\(void \*const \*args\);", model_c, re.MULTILINE)) == 1
    errors = verify(out, seed=3)  # every layer's own weights through the one function, against onnxruntime
    assert errors and all(e.ok for e in errors), errors


def test_translation_units_grow_sublinearly_with_distinct_kernels(tmp_path):
    counts = {}
    for n in (16, 128, 512):
        out = hetgen.compile("host", leaky_chain(np.linspace(0.01, 0.5, n)), out=tmp_path / f"n{n}", build=False)
        files = kernel_files(out)
        assert len(kernel_functions(out)) == n  # all distinct: nothing is shared that differs
        assert all(len(text) < 4 * FILE_BYTES for text in files.values())
        counts[n] = len(files)
    assert counts[16] == 1 and counts[128] < 128 // 8 and counts[512] <= 4 * counts[128], counts
    assert counts[512] < 512 // 16, counts


def test_changing_one_kernel_rewrites_one_file_and_generation_is_deterministic(tmp_path):
    alphas = list(np.linspace(0.01, 0.5, 600))
    first = kernel_files(hetgen.compile("host", leaky_chain(alphas), out=tmp_path / "a", build=False))
    again = kernel_files(hetgen.compile("host", leaky_chain(alphas), out=tmp_path / "b", build=False))
    assert first == again and len(first) > 2
    alphas[123] = 0.75
    changed = kernel_files(hetgen.compile("host", leaky_chain(alphas), out=tmp_path / "c", build=False))
    assert changed.keys() == first.keys()
    assert [name for name in first if first[name] != changed[name]] == [
        name for name, text in changed.items() if "hg_host_k_n123_leakyrelu_leaky123(" in text
    ]
