"""Compute operators (Conv, Gemm, MatMul, pooling, normalisation, Softmax) against two references:
the ONNX backend node test cases, and onnxruntime on random shapes (fused activations included).

Every kernel is compiled for real with the harness's flags (-Wall -Wextra -Werror) and run on
numpy buffers. Compiling dominates the run time, so each test merges its cases into one model
(independent nodes side by side): one compiler run per test, and a failure names its case.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import harness
from hetgen.codegen.kernels import kernel_source
from hetgen.frontend import MAX_OPSET
from hetgen.ops.base import Epilogue, OpInstance, Unsupported
from hetgen.ops.registry import op_def
from hetgen.templates_dir import templates_dir

COMPUTE_OPS = (
    "AveragePool",
    "BatchNormalization",
    "Conv",
    "ConvTranspose",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "InstanceNormalization",
    "LayerNormalization",
    "LogSoftmax",
    "LRN",
    "MatMul",
    "MaxPool",
    "Softmax",
)

# Conformance cases hetgen deliberately does not run; any other Unsupported is a failure.
NOT_SUPPORTED = {
    "test_batchnorm_example_training_mode": "training mode is not an inference operator",
    "test_batchnorm_epsilon_training_mode": "training mode is not an inference operator",
}


# --- merging single-node models -----------------------------------------------------------------


def merged_model(models: list[onnx.ModelProto], prefixes: list[str]) -> onnx.ModelProto:
    """One model running the given models' graphs side by side, their names prefixed.

    The opset is the newest among them, capped at the frontend's newest: the ONNX cases are
    stamped with their operator's latest schema, and opset 22 only added bfloat16/float16 types to
    these operators, so the float semantics are those of opset 21.
    """
    nodes, inputs, outputs, initializers = [], [], [], []
    for model, prefix in zip(models, prefixes):
        graph = model.graph
        for node in graph.node:
            node = onnx.NodeProto.FromString(node.SerializeToString())
            node.name = prefix + (node.name or node.op_type.lower())
            node.input[:] = [prefix + n if n else "" for n in node.input]
            node.output[:] = [prefix + n if n else "" for n in node.output]
            nodes.append(node)
        for source, target in ((graph.input, inputs), (graph.output, outputs), (graph.initializer, initializers)):
            for item in source:
                item = type(item).FromString(item.SerializeToString())  # a copy
                item.name = prefix + item.name
                target.append(item)
    opset = min(MAX_OPSET, max(o.version for m in models for o in m.opset_import if o.domain in ("", "ai.onnx")))
    graph = helper.make_graph(nodes, "merged", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check_outputs(results: dict, expected: dict, tolerances: dict) -> list[str]:
    """Messages for every output that differs; tolerances maps output name -> (rtol, atol)."""
    failures = []
    for name, want in expected.items():
        got = results[name]
        rtol, atol = tolerances[name]
        try:
            assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        except AssertionError as exc:
            failures.append(f"{name}: {str(exc).strip()[:600]}")
    return failures


# --- the ONNX backend node test cases -----------------------------------------------------------


@functools.cache
def conformance_cases() -> tuple:
    """The single-node ONNX backend test cases of the compute operators."""
    import conformance

    cases = conformance.all_cases()  # every operator's (a filtered collection would hide the others')
    return tuple(
        case for case in cases if len(case.model.graph.node) == 1 and case.model.graph.node[0].op_type in COMPUTE_OPS
    )


def _array(value) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


@pytest.mark.cc
@pytest.mark.parametrize("op", COMPUTE_OPS)
def test_conformance(op):
    cases = [c for c in conformance_cases() if c.model.graph.node[0].op_type == op and c.name not in NOT_SUPPORTED]
    assert cases, f"no ONNX backend test case for {op}"
    feeds, expected, tolerances = {}, {}, {}
    for case in cases:
        graph = case.model.graph
        initializers = {init.name for init in graph.initializer}
        inputs, outputs = case.data_sets[0]
        names = [vi.name for vi in graph.input if vi.name not in initializers]
        feeds.update({f"{case.name}/{n}": _array(v) for n, v in zip(names, inputs)})
        for vi, value in zip(graph.output, outputs):
            expected[f"{case.name}/{vi.name}"] = _array(value)
            tolerances[f"{case.name}/{vi.name}"] = (max(case.rtol, 1e-4), max(case.atol, 1e-5))
    model = merged_model([c.model for c in cases], [f"{c.name}/" for c in cases])
    results = harness.run_model(model, feeds)
    failures = check_outputs(results, expected, tolerances)
    assert not failures, "\n".join(failures)


# --- onnxruntime on random shapes -------------------------------------------------------------


def ort_run(model: onnx.ModelProto, feeds: dict) -> dict:
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def make_model(nodes, inputs: dict, opset: int = 17) -> onnx.ModelProto:
    """A model over float32 `inputs` (name -> shape); its outputs, typed by onnx, are the last node's."""
    graph = helper.make_graph(
        nodes,
        "compute_test",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in nodes[-1].output],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def random_feeds(model: onnx.ModelProto, positive=(), seed: int = 0) -> dict:
    """Standard normal inputs; those named in `positive` (variances) are made positive."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        value = rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
        feeds[vi.name] = np.abs(value) + 0.1 if vi.name in positive else value
    return feeds


def compare_all(models: list[onnx.ModelProto], frozen=(), positive=(), rtol: float = 1e-4, atol: float = 1e-4):
    """Run every model through onnxruntime and, merged into one library, through hetgen."""
    prefixes = [f"m{i}_" for i in range(len(models))]
    feeds, expected = {}, {}
    for model, prefix in zip(models, prefixes):
        model_feeds = random_feeds(model, positive)
        expected.update({prefix + k: v for k, v in ort_run(model, model_feeds).items()})
        feeds.update({prefix + k: v for k, v in model_feeds.items()})
    merged = merged_model(models, prefixes)
    frozen_names = tuple(p + n for p in prefixes for n in frozen if p + n in feeds)
    results = harness.run_model(merged, feeds, frozen=frozen_names)
    failures = check_outputs(results, expected, dict.fromkeys(expected, (rtol, atol)))
    assert not failures, "\n".join(failures)


CONV_CASES = [
    # x shape, w shape, bias, attributes
    ((1, 3, 9, 9), (4, 3, 3, 3), True, {}),
    ((2, 4, 10, 7), (6, 2, 3, 2), True, {"group": 2, "pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 8, 12, 12), (8, 1, 3, 3), True, {"group": 8, "pads": [1, 1, 1, 1]}),
    ((1, 8, 12, 11), (16, 1, 3, 3), False, {"group": 8, "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 6, 11, 13), (6, 1, 5, 3), True, {"group": 6, "dilations": [2, 1], "pads": [4, 1, 4, 1]}),
    ((2, 16, 7, 7), (32, 8, 1, 1), True, {"group": 2}),
    ((2, 16, 8, 8), (24, 16, 1, 1), False, {"strides": [2, 2]}),
    ((1, 5, 20), (3, 5, 4), True, {"dilations": [2], "pads": [3, 1]}),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 3), True, {"pads": [1, 0, 1, 1, 1, 0]}),
    ((1, 32, 30, 30), (40, 32, 3, 3), True, {"pads": [1, 1, 1, 1], "strides": [1, 2]}),
    ((1, 3, 33, 33), (8, 3, 7, 7), True, {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    ((1, 4, 9, 9), (6, 4, 3, 3), True, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 64, 40, 40), (8, 64, 3, 3), True, {"pads": [1, 1, 1, 1]}),  # im2col in 4 chunks
    ((1, 4, 5, 2), (4, 1, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]}),  # no tap-complete column
    ((2, 3, 17), (6, 1, 4), False, {"group": 3, "strides": [3], "pads": [2, 1]}),
]


def conv_model(x_shape, w_shape, bias, attrs) -> onnx.ModelProto:
    inputs = {"x": x_shape, "w": w_shape}
    if bias:
        inputs["b"] = (w_shape[0],)
    return make_model([helper.make_node("Conv", list(inputs), ["y"], name="conv", **attrs)], inputs)


@pytest.mark.cc
def test_conv_matches_onnxruntime():
    compare_all([conv_model(*case) for case in CONV_CASES], frozen=("w", "b"))


@pytest.mark.cc
def test_conv_transpose_matches_onnxruntime():
    cases = [
        ({"x": (1, 4, 5, 6), "w": (4, 3, 3, 3), "b": (6,)}, {"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 1]}),
        ({"x": (2, 3, 4, 4), "w": (3, 5, 2, 2)}, {"strides": [2, 2], "output_padding": [1, 0]}),
        ({"x": (1, 2, 7), "w": (2, 3, 3)}, {"dilations": [2], "auto_pad": "SAME_UPPER", "strides": [2]}),
        ({"x": (1, 8, 40, 40), "w": (8, 16, 4, 4), "b": (16,)}, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # 2 chunks
    ]
    models = [
        make_model([helper.make_node("ConvTranspose", list(inputs), ["y"], name="ct", **attrs)], inputs)
        for inputs, attrs in cases
    ]
    compare_all(models)


GEMM_CASES = [
    ((7, 5), (5, 9), (9,), {}),
    ((5, 7), (5, 9), (7, 1), {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    ((7, 5), (9, 5), (7, 9), {"transB": 1}),
    ((40, 300), (300, 70), (1, 70), {}),
    ((1, 256), (100, 256), (100,), {"transB": 1}),
    ((3, 300), (300, 2), None, {"transA": 0, "transB": 0}),
    ((300, 2), (1, 300), None, {"transA": 1, "transB": 1}),
]

MATMUL_CASES = [
    ((3, 4), (4, 5)),
    ((2, 3, 33, 17), (17, 20)),
    ((2, 1, 6, 7), (3, 7, 5)),
    ((7,), (2, 7, 3)),
    ((4, 6, 7), (7,)),
    ((7,), (7,)),
    ((150, 260), (260, 70)),
]


@pytest.mark.cc
def test_gemm_and_matmul_match_onnxruntime():
    models = []
    for a_shape, b_shape, c_shape, attrs in GEMM_CASES:
        inputs = {"a": a_shape, "b": b_shape} | ({"c": c_shape} if c_shape else {})
        models.append(make_model([helper.make_node("Gemm", list(inputs), ["y"], name="gemm", **attrs)], inputs))
    for a_shape, b_shape in MATMUL_CASES:
        inputs = {"a": a_shape, "b": b_shape}
        models.append(make_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], inputs))
    compare_all(models)


POOL_CASES = [
    ("MaxPool", (1, 3, 11, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (2, 2, 9, 10), {"kernel_shape": [2, 3], "ceil_mode": 1, "strides": [2, 2]}),
    ("MaxPool", (1, 2, 12), {"kernel_shape": [3], "dilations": [2], "pads": [2, 1]}),
    ("AveragePool", (1, 3, 11, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (
        "AveragePool",
        (1, 3, 10, 9),
        {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "count_include_pad": 1},
    ),
    ("AveragePool", (1, 2, 9, 9), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", (1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "auto_pad": "SAME_LOWER"}),
    # the two-pass kernel (pool_rows.c.j2): SqueezeNet's 3x3/2 in ceil_mode on a row that is no
    # multiple of the vector, dilated taps, padding with ceil_mode counted by the average; and a row
    # too long for its band, which keeps the one-pass loop
    ("MaxPool", (1, 3, 23, 37), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 2, 13, 21), {"kernel_shape": [3, 2], "strides": [1, 2], "dilations": [2, 3], "pads": [2, 1, 1, 0]}),
    (
        "AveragePool",
        (1, 2, 11, 19),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 0, 1], "ceil_mode": 1, "count_include_pad": 1},
    ),
    ("MaxPool", (1, 1, 4200), {"kernel_shape": [3], "strides": [1]}),
    ("GlobalAveragePool", (2, 5, 7, 9), {}),
    ("GlobalMaxPool", (2, 5, 7, 9), {}),
]


@pytest.mark.cc
def test_pools_match_onnxruntime():
    compare_all(
        [
            make_model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)], {"x": x_shape})
            for op, x_shape, attrs in POOL_CASES
        ]
    )


@pytest.mark.cc
def test_normalisations_and_softmax_match_onnxruntime():
    inputs = {"x": (2, 6, 5, 7), "s": (6,), "b": (6,), "m": (6,), "v": (6,)}
    models = []
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn", epsilon=1e-3)
    models.append(make_model([bn], inputs))
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="inorm")
    models.append(make_model([node], {"x": (2, 6, 5, 7), "s": (6,), "b": (6,)}))
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="ln", axis=-2)
    models.append(make_model([node], {"x": (3, 4, 40), "s": (4, 40), "b": (4, 40)}))
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln", epsilon=1e-3)
    models.append(make_model([node], {"x": (5, 70), "s": (70,)}))
    node = helper.make_node("LRN", ["x"], ["y"], name="lrn", size=3, alpha=0.01, beta=0.6, bias=1.5)
    models.append(make_model([node], {"x": (1, 7, 4, 5)}))
    for op in ("Softmax", "LogSoftmax"):
        for axis in (-1, 1, 0):
            models.append(make_model([helper.make_node(op, ["x"], ["y"], name="sm", axis=axis)], {"x": (3, 37, 5)}))
    compare_all(models, positive=("v",))


# --- fused activations ------------------------------------------------------------------------

FUSED_CASES = [
    ("Conv", {"x": (1, 8, 10, 10), "w": (12, 8, 3, 3), "b": (12,)}, {"pads": [1, 1, 1, 1]}),
    ("Conv", {"x": (1, 8, 10, 10), "w": (8, 1, 3, 3), "b": (8,)}, {"group": 8}),
    ("Conv", {"x": (1, 8, 6, 6), "w": (12, 8, 1, 1)}, {}),
    ("Gemm", {"a": (13, 20), "b": (20, 17), "c": (17,)}, {"alpha": 0.5}),
    ("MatMul", {"a": (2, 9, 20), "b": (20, 11)}, {}),
    # pre-activation (DenseNet's BN-ReLU before each Conv): a BatchNormalization no Conv folds
    ("BatchNormalization", {"x": (1, 8, 6, 6), "scale": (8,), "bias": (8,), "mean": (8,), "var": (8,)}, {}),
]

ACTIVATIONS = [
    ("Relu", {}, Epilogue("Relu")),
    ("LeakyRelu", {"alpha": 0.2}, Epilogue("LeakyRelu", 0.2)),
    ("Clip", {}, Epilogue("Clip", -0.5, 0.75)),
    ("Sigmoid", {}, Epilogue("Sigmoid")),
    ("Tanh", {}, Epilogue("Tanh")),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, Epilogue("HardSigmoid", 0.3, 0.4)),
    ("HardSwish", {}, Epilogue("HardSwish")),
]


def activation_nodes(activation: str, attrs: dict) -> list:
    if activation != "Clip":
        return [helper.make_node(activation, ["t"], ["y"], name="act", **attrs)]
    bounds = [
        helper.make_node("Constant", [], ["lo"], name="lo", value=numpy_helper.from_array(np.float32(-0.5))),
        helper.make_node("Constant", [], ["hi"], name="hi", value=numpy_helper.from_array(np.float32(0.75))),
    ]
    return [*bounds, helper.make_node("Clip", ["t", "lo", "hi"], ["y"], name="act")]


@pytest.mark.cc
def test_fused_epilogues_match_onnxruntime():
    """An activation fused into Conv/Gemm/MatMul/BatchNormalization gives what onnxruntime computes
    with two nodes."""
    runs = []
    rng = np.random.default_rng(1)
    for op, inputs, attrs in FUSED_CASES:
        for activation, act_attrs, epilogue in ACTIVATIONS:
            main = helper.make_node(op, list(inputs), ["t"], name="main", **attrs)
            model = make_model([main, *activation_nodes(activation, act_attrs)], inputs)
            feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs.items()}
            if "var" in feeds:  # a variance, positive
                feeds["var"] = np.abs(feeds["var"]) + 0.5
            runs.append((model, feeds, epilogue, ort_run(model, feeds)["y"]))
    results = run_fused([(model, feeds, epilogue) for model, feeds, epilogue, _ in runs])
    failures = []
    for index, ((model, _, epilogue, expected), got) in enumerate(zip(runs, results)):
        try:
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        except AssertionError as exc:
            failures.append(f"case {index} {model.graph.node[0].op_type} + {epilogue.kind}: {exc}")
    assert not failures, "\n".join(failures)


def run_fused(runs: list) -> list[np.ndarray]:
    """Lower each model's first node with the epilogue, compile all into one library, run each."""
    kernels = []
    for index, (model, _, epilogue) in enumerate(runs):
        single = onnx.ModelProto.FromString(model.SerializeToString())
        del single.graph.node[1:]
        single.graph.node[0].output[0] = "y"
        graph = harness.import_onnx(single).verify()
        ((node, instance),) = harness.op_instances(graph)
        instance = dataclasses.replace(instance, epilogue=(epilogue,))
        kernels.append((graph, node, op_def(node.op, node.opset).lower(instance), f"hg_fused{index}"))
    with tempfile.TemporaryDirectory(prefix="hg_fused_") as tmp:
        sources, helpers = [], set()
        for _graph, node, kernel, fn in kernels:
            source = Path(tmp) / f"{fn}.c"
            source.write_text(kernel_source(kernel, fn, node.label))
            sources.append(str(source))
            helpers.update(kernel.helpers)
        runtime = templates_dir() / "runtime"
        lib = Path(tmp) / "libfused.so"
        cmd = ["cc", *harness.CFLAGS, "-I", str(runtime), "-o", str(lib), *sources]
        cmd += [str(runtime / h) for h in sorted(helpers)] + ["-lm"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-4000:]
        library = ctypes.CDLL(str(lib))
        outputs = []
        for (graph, node, kernel, fn), (_, feeds, _) in zip(kernels, runs):
            arrays = [np.ascontiguousarray(feeds[n], dtype=np.float32) for n in node.inputs]
            out = np.zeros(graph.types[node.outputs[0]].shape, dtype=np.float32)
            scratch = np.zeros(kernel.scratch_bytes + 64, dtype=np.uint8)
            pointers = [a.ctypes.data for a in arrays] + [out.ctypes.data, scratch.ctypes.data]
            getattr(library, fn)((ctypes.c_void_p * len(pointers))(*pointers))
            outputs.append(out)
        return outputs


# --- lowering decisions, no compiler ----------------------------------------------------------


def lowered(op: str, attrs: dict, shapes: list, out_shapes: list, opset: int | None = None, constant=()):
    """`op` lowered for inputs of `shapes`; the inputs at the indices in `constant` are known at
    compile time (zeros of their shape), as a model's weights are."""
    from hetgen.ir import DType, Node, TensorType

    names = tuple(f"i{k}" for k in range(len(shapes)))
    outputs = tuple(f"o{k}" for k in range(len(out_shapes)))
    node = Node("n0", op, names, outputs, tuple(sorted(attrs.items())), opset=opset)
    types = tuple(TensorType(DType.FLOAT32, tuple(s)) for s in shapes)
    outs = tuple(TensorType(DType.FLOAT32, tuple(s)) for s in out_shapes)
    constants = tuple(np.zeros(s, np.float32) if k in constant else None for k, s in enumerate(shapes))
    return op_def(op, opset).lower(OpInstance(node, types, outs, constants))


def test_softmax_before_opset_13_coerces_to_2d():
    """Before opset 13, Softmax normalises over all dimensions from `axis` on."""
    old = lowered("Softmax", {"axis": 1}, [(2, 3, 4)], [(2, 3, 4)], opset=11)
    assert (old.params["outer"], old.params["length"], old.params["inner"]) == (2, 12, 1)
    new = lowered("Softmax", {"axis": 1}, [(2, 3, 4)], [(2, 3, 4)])
    assert (new.params["outer"], new.params["length"], new.params["inner"]) == (2, 3, 4)
    default_old = lowered("LogSoftmax", {}, [(2, 3, 4)], [(2, 3, 4)], opset=12)
    assert default_old.params["length"] == 12


def test_the_registry_picks_the_entry_for_the_opset():
    """An operator whose meaning changed with an opset has one entry per meaning (`since`)."""
    assert [op_def("Softmax", opset).since for opset in (7, 12, 13, 21, None)] == [1, 1, 13, 13, 13]
    assert [op_def("DFT", opset).since for opset in (17, 19, 20, None)] == [17, 17, 20, 20]
    assert op_def("DFT", 16).since == 17  # older than every entry: the oldest
    assert op_def("Conv", 7) is op_def("Conv")  # one entry: every opset
    for op in ("Softmax", "DFT"):  # the same facts, only the lowering differs
        old, new = op_def(op, 1), op_def(op)
        assert dataclasses.replace(old, lower=None, since=0) == dataclasses.replace(new, lower=None, since=0)


def test_conv_strategies_and_cost():
    depthwise = lowered("Conv", {"group": 8}, [(1, 8, 10, 10), (8, 1, 3, 3)], [(1, 8, 8, 8)])
    assert depthwise.params["variant"] == "direct" and not depthwise.helpers
    pointwise = lowered("Conv", {}, [(1, 8, 10, 10), (16, 8, 1, 1)], [(1, 16, 10, 10)])
    assert pointwise.params["variant"] == "pointwise"
    assert pointwise.flops == 2 * 16 * 100 * 8
    im2col = lowered("Conv", {}, [(1, 8, 10, 10), (16, 8, 3, 3)], [(1, 16, 8, 8)], constant=(1,))
    # the input as phase planes first in the workspace, the GEMM's packing after them
    assert im2col.params["variant"] == "implicit_planes"
    # weights known only at run time (an accelerator's tile kernels read them from its SRAM): the
    # same planes, the GEMM packing the weights too
    at_run_time = lowered("Conv", {}, [(1, 8, 10, 10), (16, 8, 3, 3)], [(1, 16, 8, 8)])
    assert at_run_time.params["variant"] == "implicit_planes" and not at_run_time.prepacked
    assert at_run_time.params["planes"] == im2col.params["planes"]
    assert im2col.scratch_bytes == im2col.params["planes"]["bytes"] + im2col.params["pack_bytes"] > 4 * 8 * 10 * 10
    # a large image: the planes of one band of output rows at a time, one GEMM block of columns
    stem = lowered(
        "Conv",
        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
        [(1, 3, 224, 224), (32, 3, 3, 3)],
        [(1, 32, 112, 112)],
        constant=(1,),
    )
    assert stem.params["variant"] == "implicit_planes" and stem.params["planes"]["band_rows"] == 1024 // 112
    # from the input as it lies: a 3-D window, and a fused residual's whole-image planes past their
    # share of the GEMM's B buffer
    volume = lowered("Conv", {}, [(1, 2, 4, 6, 6), (4, 2, 3, 3, 3)], [(1, 4, 2, 4, 4)], constant=(1,))
    residual = lowered(
        "Conv", {}, [(1, 1, 512, 512), (4, 1, 3, 3), (4,), (1, 4, 510, 510)], [(1, 4, 510, 510)], constant=(1, 2)
    )
    for kernel in (volume, residual):
        assert kernel.params["variant"] == "implicit" and kernel.params["planes"] is None


def test_unsupported_dtype_is_reported():
    from hetgen.ir import DType, Node, TensorType

    node = Node("n0_gemm", "Gemm", ("a", "b"), ("y",))
    int_type = TensorType(DType.INT32, (2, 2))
    with pytest.raises(Unsupported, match="float32"):
        op_def("Gemm").lower(OpInstance(node, (int_type, int_type), (int_type,), (None, None)))


@pytest.mark.cc
def test_phase_plane_packing_at_o3_matches_onnxruntime(tmp_path):
    """The implicit GEMM's B operand from phase planes (templates/kernels/conv_implicit_planes.c.j2),
    built as a model is (-O3, -march=native: the GEMM runtime too). With AVX-512 a packed panel row
    is two permutes where its columns span at most 48 plane floats, else run by run; and products
    of at most 64 rows read the panels that lie in one output row in place (`b_rows`), packing the
    others alone. Panels across 2-3 output rows (13 and 7 columns), one in place then one packed
    (37), stride 2 (each input row split into its column phases in one pass), a 1x1 downsample,
    a 5x5 window whose k (600) starts its second block mid-channel, and a dilated window whose
    panels span more than 48 floats (the run-by-run copy). And a 7 x 7 plane of 32 output
    channels: its 49 columns' last 17 are one 32-row tile with the rows in the lanes (AVX-512's
    hg_sgemm_tile_t: 32 rows, 17 columns, k = 216 >= 64), the others too (143 = 4 x 32 + 15 at
    11 x 13). The weights are inputs: with constant ones these small layers take the `small`
    kernel or Winograd."""
    import hetgen
    from hetgen.platform.loader import load_platform_text

    rng = np.random.default_rng(6)
    layers = {  # name: (kernel, attributes)
        "same": (3, {"pads": [1, 1, 1, 1]}),
        "stride2": (3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
        "down": (1, {"strides": [2, 2]}),
        "wide": (5, {"pads": [2, 2, 2, 2]}),
        "dilated": (3, {"pads": [6, 6, 6, 6], "dilations": [6, 6]}),
    }
    layout_keys = (("pads", 0), ("strides", 1), ("dilations", 1))
    nodes, weights, outputs = [], {}, []
    for width in (13, 37):
        for name, (k, attrs) in layers.items():
            out = f"{name}{width}"
            weights[f"{out}_w"] = rng.standard_normal((16, 24, k, k)).astype(np.float32)
            nodes.append(helper.make_node("Conv", [f"x{width}", f"{out}_w"], [out], name=out, **attrs))
            pad, stride, dilation = (attrs.get(key, [default])[0] for key, default in layout_keys)
            size = [(n + 2 * pad - dilation * (k - 1) - 1) // stride + 1 for n in (11, width)]
            outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, (1, 16, *size)))
    weights["small7_w"] = rng.standard_normal((32, 24, 3, 3)).astype(np.float32)
    nodes.append(helper.make_node("Conv", ["x7", "small7_w"], ["small7"], name="small7", pads=[1, 1, 1, 1]))
    outputs.append(helper.make_tensor_value_info("small7", TensorProto.FLOAT, (1, 32, 7, 7)))
    feeds = {f"x{w}": rng.standard_normal((1, 24, 11, w)).astype(np.float32) for w in (13, 37)} | weights
    feeds["x7"] = rng.standard_normal((1, 24, 7, 7)).astype(np.float32)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()]
    graph = helper.make_graph(nodes, "plane_packing", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    expected = ort_run(model, feeds)
    # `memory: fast`: the GEMM's own blocks, so a band holds the whole image (lean's workspace cap
    # gives these layers bands of 1-4 rows, whose panels never span rows)
    platform = load_platform_text("name: host\ntarget: {kind: native, runtime: aot}\noptions: {memory: fast}\n")
    out = hetgen.compile(platform, model, out=tmp_path / "out", native_only=True, opt=("-O3",), werror=True)
    kernels = "".join(path.read_text() for path in (out / "host" / "kernels").glob("*.c"))
    assert kernels.count("implicit, from phase planes") == len(nodes)
    assert kernels.count(".b_rows = ") == 3  # the 37-column outputs of stride 1
    # stride 2 on 11 x 13 and 11 x 37 inputs (odd sides, padded on both): each input row split once
    # into its two column phases (3x3), or its even columns taken alone (1x1)
    assert kernels.count("hg_split_columns(src, ") == 4 and kernels.count("hg_every_other_column(src, ") == 2
    assert "hg_sgemm_ex(32u, rows * 7u, 216u," in kernels  # the 7 x 7 plane's one product: 32 x 49 x 216
    got = hetgen.load(out).run(feeds)
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.cc
@pytest.mark.parametrize("side", ["bare_metal", "hosted"])
def test_padding_row_kernels_at_o3_match_onnxruntime(side):
    """Each float convolution kernel that finds its padding row by row, as a model builds it (-O3,
    -march=native): GCC 12.2's vectoriser once turned such a row test into wrong masks across rows
    (templates/kernels/conv_implicit_planes.c.j2, docs/kernels.md), on 14 x 14 inputs of 16 channels
    and more with a 3x3 window and padding 1. Bare metal: the depthwise direct kernel and the one
    reading its weights in place; hosted: Winograd's input rows (the other forms are covered
    where they are tested: test_tiling, test_depthwise_plane)."""
    rng = np.random.default_rng(5)
    weights = {
        "full_w": rng.standard_normal((16, 16, 3, 3)),
        "full_b": rng.standard_normal(16),
        "dw_w": rng.standard_normal((16, 1, 3, 3)),
        "dw_b": rng.standard_normal(16),
    }
    nodes = [
        helper.make_node("Conv", ["x", f"{name}_w", f"{name}_b"], [name], name=name, group=group, pads=[1, 1, 1, 1])
        for name, group in (("full", 1), ("dw", 16))
    ]
    graph = helper.make_graph(
        nodes,
        "padding_rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, 14, 14))],
        [helper.make_tensor_value_info(n.name, TensorProto.FLOAT, (1, 16, 14, 14)) for n in nodes],
        initializer=[numpy_helper.from_array(v.astype(np.float32), n) for n, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 16, 14, 14)).astype(np.float32)}
    expected = ort_run(model, feeds)
    got = harness.run_model(model, feeds, side=side, opt=("-O3", "-march=native"))
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4, err_msg=name)
