"""Native float16 arithmetic on aarch64 kinds with `fp16: true` (ARMv8.2-A FP16), run under
qemu-aarch64 and compared with onnxruntime; kinds without it keep float32 arithmetic."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.errors import HetgenError
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.reference import ort_session

FAST = {"opt": ("-O2",), "native_tuning": False}
CROSS = ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump", "qemu-aarch64")
needs_cross = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in CROSS), reason="needs gcc-aarch64-linux-gnu and qemu-user"
)


def platform(fp16: str) -> str:
    return f"name: a64\ntarget:\n  kind: aarch64\n  runtime: aot\n  fp16: {fp16}\n"


def half(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT16, shape)


def elementwise_model() -> onnx.ModelProto:
    """One IEEE operation per node on float16 values."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Mul", ["s", "a"], ["m"]),
        helper.make_node("Sub", ["m", "b"], ["d"]),
        helper.make_node("Div", ["d", "c"], ["q"]),
        helper.make_node("Max", ["q", "b"], ["y"]),
    ]
    inputs = [half("a", [4, 64]), half("b", [4, 64]), half("c", [64])]
    graph = helper.make_graph(nodes, "ew16", inputs, [half("s", [4, 64]), half("q", [4, 64]), half("y", [4, 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def rounded_per_node(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`elementwise_model` as ONNX defines it: each node's float16 output rounded once from the exact
    result (float32 holds the exact sum, difference, product of two float16 values; the quotient
    rounds twice harmlessly, float32 having more than 2 * 11 + 2 bits)."""
    a, b, c = (feeds[k].astype(np.float32) for k in "abc")

    def node(x):
        return x.astype(np.float16).astype(np.float32)

    s = node(a + b)
    q = node((node(node(s * a) - b)) / c)
    return {"s": s.astype(np.float16), "q": q.astype(np.float16), "y": np.maximum(q, b).astype(np.float16)}


def cnn_model() -> onnx.ModelProto:
    """Conv + Relu, elementwise arithmetic, Sigmoid, MatMul, Softmax on float16 tensors."""
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float16), "w"),
        numpy_helper.from_array((rng.standard_normal(4) * 0.1).astype(np.float16), "bias"),
        numpy_helper.from_array(np.array([1.5], np.float16), "scale"),
        numpy_helper.from_array((rng.standard_normal((36, 10)) * 0.2).astype(np.float16), "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Mul", ["r", "scale"], ["m"]),
        helper.make_node("Sub", ["m", "c"], ["d"]),
        helper.make_node("Sigmoid", ["d"], ["g"]),
        helper.make_node("MaxPool", ["g"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "cnn16", [half("x", [2, 3, 6, 6])], [half("d", [2, 4, 6, 6]), half("prob", [2, 10])], initializer=inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(tmp_path: Path, proto: onnx.ModelProto, fp16: bool) -> Path:
    name = "fp16" if fp16 else "plain"
    return hetgen.compile(load_platform_text(platform(str(fp16).lower())), proto, out=tmp_path / name, **FAST)


def board_program(out: Path) -> Path:
    manifest = json.loads((out / "hetgen.json").read_text())
    (program,) = manifest["board"]["programs"]
    return out / program["path"]


# float16 arithmetic on h registers (scalar) or .4h/.8h vectors: fadd h0, h1, h2 / fmul v0.8h, ...
HALF_ARITHMETIC = re.compile(r"\bf(add|sub|mul|div|max|min|maxnm|minnm|mla|fma)\s+(h\d+|v\d+\.[48]h)")


def half_arithmetic(program: Path) -> list[str]:
    disassembly = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", str(program)], check=True, capture_output=True, text=True
    ).stdout
    return HALF_ARITHMETIC.findall(disassembly)


@pytest.mark.external
@needs_cross
def test_elementwise_float16_is_native_and_rounds_once_per_node(tmp_path):
    proto = elementwise_model()
    rng = np.random.default_rng(7)
    feeds = {
        "a": (rng.standard_normal((4, 64)) * 4).astype(np.float16),
        "b": (rng.standard_normal((4, 64)) * 4).astype(np.float16),
        "c": (rng.standard_normal(64) + 3).astype(np.float16),
    }
    exact = rounded_per_node(feeds)
    # onnxruntime computes a chain of float16 nodes that lack a float16 CPU kernel in float32 (its
    # InsertCastTransformer casts once around the chain, graph optimisations off or not), so it
    # rounds only the first node's output as ONNX says: bit for bit there; after it, `m - b` cancels
    # and the two roundings differ by more than any float16 tolerance (the cnn test below compares)
    reference = dict(zip(("s", "q", "y"), ort_session(proto.SerializeToString()).run(None, feeds)))
    for fp16 in (True, False):
        out = build(tmp_path, proto, fp16)
        got = EmulatedModel(out).run(feeds)
        for name in exact:
            assert got[name].dtype == np.float16
            assert np.array_equal(got[name].view(np.uint16), exact[name].view(np.uint16)), (fp16, name)
        assert np.array_equal(got["s"].view(np.uint16), reference["s"].view(np.uint16))
        # the fp16 kind computes on half registers; the plain aarch64 kind never does
        found = half_arithmetic(board_program(out))
        assert bool(found) is fp16, (fp16, found[:5])
        source = "\n".join(p.read_text() for p in out.rglob("kernels/*.c"))
        assert ("_Float16 *restrict out" in source) is fp16


@pytest.mark.external
@needs_cross
def test_float16_cnn_on_fp16_kind_agrees_with_onnxruntime(tmp_path):
    proto = cnn_model()
    out = build(tmp_path, proto, True)
    model = EmulatedModel(out)
    session = ort_session(proto.SerializeToString())
    for seed in (0, 1):
        feeds = {"x": np.random.default_rng(seed).standard_normal((2, 3, 6, 6)).astype(np.float16)}
        want = dict(zip(("d", "prob"), session.run(None, feeds)))
        got = model.run(feeds)
        for name in want:
            # the node tests' float16 tolerance (rtol 1e-3) plus an absolute float16 ulp near 1
            np.testing.assert_allclose(
                got[name].astype(np.float32), want[name].astype(np.float32), rtol=1e-3, atol=1e-3, err_msg=name
            )
    # Conv and MatMul keep float32 accumulation (as onnxruntime's CPU kernels): their float32 kernel is there
    source = "\n".join(p.read_text() for p in out.rglob("kernels/*.c"))
    assert "_f32(inner)" in source and "(_Float16)((const float *)" in source


def test_fp16_attribute_must_be_a_boolean(tmp_path):
    with pytest.raises(HetgenError) as error:
        load_platform_text(platform("yes please"), "a64.yaml")
    assert re.search(r"a64\.yaml:5:\d+: .*fp16.* must be true or false", str(error.value)), str(error.value)


def test_fp16_kind_compiles_for_armv8_2_fp16_and_plain_kind_does_not(tmp_path):
    from hetgen.build import BuildOptions
    from hetgen.build.toolchain import board_toolchain

    for fp16, wanted in (("true", True), ("false", False)):
        target = load_platform_text(platform(fp16)).root
        assert ("-march=armv8.2-a+fp16" in board_toolchain(target, BuildOptions()).cflags) is wanted


# ONNX node cases on float16 whose kernels compute natively (elementwise, activations), and one with
# a Conv (float32 accumulation); the whole float16 set passes so (40 of 46, the rest as on float32).
NODE_CASES = ("test_celu_float16", "test_max_float16", "test_mod_mixed_sign_float16", "test_swiglu_float16")
NODE_CASES += ("test_isinf_float16", "test_causal_conv_with_state_silu_fp16")


@pytest.mark.external
@needs_cross
def test_float16_node_cases_on_the_fp16_kind_under_qemu(tmp_path):
    import conformance
    import harness

    cases = {case.name: case for case in conformance.cases() if case.name in NODE_CASES}
    assert sorted(cases) == sorted(NODE_CASES)
    target = load_platform_text(platform("true"))
    for name, case in sorted(cases.items()):
        graph_inputs, problem = conformance._checked_inputs(case)
        assert problem is None, problem
        frozen = conformance._frozen_inputs(case.model)
        for k, (inputs, outputs) in enumerate(case.data_sets):
            feeds = {vi.name: conformance._as_array(v) for vi, v in zip(graph_inputs, inputs)}
            model = harness.freeze_inputs(case.model, feeds, frozen)
            out = hetgen.compile(target, model, out=tmp_path / f"{name}_{k}", **FAST)
            got = EmulatedModel(out).run({n: v for n, v in feeds.items() if n not in frozen})
            for vi, expected in zip(case.model.graph.output, outputs):
                mismatch = conformance._compare(vi.name, got[vi.name], expected, case.rtol, case.atol)
                assert mismatch is None, f"{name}: {mismatch}"
