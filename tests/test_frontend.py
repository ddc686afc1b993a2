"""The frontend stage: ONNX → Graph IR. Fast: no C is compiled; onnxruntime is the reference.

Most tests compare a model with the Graph the frontend made of it, exported back to ONNX
(`export_onnx`), both run in onnxruntime with its graph optimisations off.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen import models
from hetgen.errors import ModelError
from hetgen.frontend import MAX_OPSET, export_onnx, import_model, import_onnx
from hetgen.ops import registry
from hetgen.ops.base import OpDef

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _unlowerable(op):
    raise AssertionError("the frontend tests never lower")


@pytest.fixture
def all_ops(monkeypatch):
    """Pretend hetgen supports every default-domain ONNX operator (the registry fills up elsewhere)."""
    ops = dict(registry.OPS)
    for schema in onnx.defs.get_all_schemas():
        if schema.domain == "" and schema.name not in ops:
            ops[schema.name] = OpDef(schema.name, _unlowerable)
    monkeypatch.setattr(registry, "OPS", ops)
    return ops


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name="test"):
    """A model; outputs declared without a shape get the one onnx infers (the checker wants one)."""
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model).graph
    found = {vi.name: vi for vi in (*inferred.value_info, *inferred.output)}
    for vi in model.graph.output:
        if not vi.type.tensor_type.HasField("shape") and vi.name in found:
            vi.type.CopyFrom(found[vi.name].type)
    return model


def run_ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tensor = vi.type.tensor_type
        shape = [d.dim_value for d in tensor.shape.dim]
        if tensor.elem_type == I64:
            feeds[vi.name] = rng.integers(0, 5, shape).astype(np.int64)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    return feeds


def assert_same_results(model: onnx.ModelProto, graph=None, rtol=1e-5, atol=1e-5) -> None:
    graph = graph if graph is not None else import_model(model)
    feeds = random_feeds(model)
    expected = run_ort(model, feeds)
    actual = run_ort(export_onnx(graph), {k: v for k, v in feeds.items() if k in graph.inputs})
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual):
        assert want.shape == got.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def ops_of(graph) -> list[str]:
    return [n.op for n in graph.nodes]


# -- whole models at every opset ------------------------------------------------------------------

MODEL_OPSETS = [7, 9, 11, 13, 17, 21]


@pytest.mark.parametrize("opset", MODEL_OPSETS)
@pytest.mark.parametrize("builder", ["mlp", "resnet", "mobilenet_v2", "shufflenet", "squeezenet", "alexnet"])
def test_models_import_at_every_opset(all_ops, builder, opset):
    model = models.BUILDERS[builder](opset=opset)
    graph = import_model(model)
    assert graph.inputs == ("input",)
    assert "Dropout" not in ops_of(graph) and "Identity" not in ops_of(graph)
    assert_same_results(model, graph)


@pytest.mark.parametrize("opset", [9, 11, 13, 17, 21])
def test_transformer_imports_with_folded_shapes_and_fused_patterns(all_ops, opset):
    model = models.transformer_encoder(opset=opset, layer_norm="decomposed")
    graph = import_model(model)
    ops = ops_of(graph)
    assert "Shape" not in ops and "Concat" not in ops and "Erf" not in ops
    assert ops.count("LayerNormalization") == 5 and ops.count("Gelu") == 2
    assert "ReduceMean" not in ops and "Pow" not in ops
    for node in graph.nodes:
        if node.op == "Reshape":
            assert graph.is_constant(node.inputs[1])
    assert_same_results(model, graph, rtol=1e-4, atol=1e-4)


def test_every_node_carries_its_opset(all_ops):
    graph = import_model(models.transformer_encoder(opset=13, layer_norm="decomposed"))
    for node in graph.nodes:
        assert isinstance(node.opset, int) and not any(name.startswith("_") for name, _ in node.attrs)
    by_op = {n.op: n.opset for n in graph.nodes}
    assert by_op["MatMul"] == 13 and by_op["LayerNormalization"] == 17 and by_op["Gelu"] == 20


def test_node_names_are_unique_deterministic_c_identifiers(all_ops):
    model = models.resnet(opset=13)
    first, second = import_model(model), import_model(model)
    names = [n.name for n in first.nodes]
    assert names == [n.name for n in second.nodes]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in names)
    assert names[0].startswith("n0_conv")
    assert {n.source_name for n in first.nodes} <= {n.name for n in model.graph.node}


def test_name_argument_and_import_onnx_alias(all_ops):
    graph = import_onnx(models.mlp(), name="my model")
    assert graph.name == "my_model"


def test_model_from_a_file(all_ops, tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(), path)
    assert import_model(path).outputs == import_model(str(path)).outputs


# -- old IR, initializers listed as inputs --------------------------------------------------------


def test_old_ir_initializers_listed_as_inputs_are_constants(all_ops):
    model = models.tiny_cnn(opset=7)
    assert model.ir_version == 3
    assert len(model.graph.input) == 1 + len(model.graph.initializer)
    graph = import_model(model)
    assert graph.inputs == ("input",)
    assert {t.name for t in model.graph.initializer} <= set(graph.constants)
    assert_same_results(model, graph)


# -- constant folding -----------------------------------------------------------------------------


def shape_arithmetic_model():
    """y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) with x: [2, 3, 4]."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
        numpy_helper.from_array(np.asarray([0], np.int64), "axes0"),
        numpy_helper.from_array(np.asarray([-1], np.int64), "minus_one"),
    ]
    x = helper.make_tensor_value_info("x", F, [2, 3, 4])
    return make_model(nodes, [x], [helper.make_tensor_value_info("y", F, None)], inits)


def test_shape_arithmetic_folds_to_a_constant_shape(all_ops):
    graph = import_model(shape_arithmetic_model())
    assert ops_of(graph) == ["Reshape", "Relu"]
    reshape = graph.nodes[0]
    np.testing.assert_array_equal(graph.constants[reshape.inputs[1]], [2, -1])
    assert graph.type_of("y").shape == (2, 12)
    assert reshape.source_name == "reshape"


def test_weight_only_subgraphs_fold(all_ops):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("Mul", ["wt", "two"], ["w2"]),
        helper.make_node("MatMul", ["x", "w2"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.asarray(2, np.float32), "two")]
    model = make_model(
        nodes, [helper.make_tensor_value_info("x", F, [2, 4])], [helper.make_tensor_value_info("y", F, None)], inits
    )
    graph = import_model(model)
    assert ops_of(graph) == ["MatMul"]
    np.testing.assert_array_equal(graph.constants[graph.nodes[0].inputs[1]], w.T * 2)
    assert_same_results(model, graph)


def test_constant_nodes_range_and_constant_of_shape_fold(all_ops):
    nodes = [
        helper.make_node("Constant", [], ["n"], value=numpy_helper.from_array(np.asarray([4], np.int64))),
        helper.make_node("ConstantOfShape", ["n"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Range", ["start", "limit", "delta"], ["ramp"]),
        helper.make_node("Add", ["ones", "ramp"], ["bias"]),
        helper.make_node("Add", ["x", "bias"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in (("start", 0), ("limit", 4), ("delta", 1))
    ]
    model = make_model(
        nodes, [helper.make_tensor_value_info("x", F, [3, 4])], [helper.make_tensor_value_info("y", F, None)], inits
    )
    graph = import_model(model)
    assert ops_of(graph) == ["Add"]
    np.testing.assert_array_equal(graph.constants[graph.nodes[0].inputs[1]], [1, 2, 3, 4])


def large_constant_model(size=1 << 20):
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["big"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Add", ["x", "big"], ["y"]),
    ]
    shape = numpy_helper.from_array(np.asarray([size], np.int64), "shape")
    x = helper.make_tensor_value_info("x", F, [size])
    return make_model(nodes, [x], [helper.make_tensor_value_info("y", F, None)], [shape])


def test_large_expanding_constant_is_kept_as_a_node_when_supported(all_ops):
    graph = import_model(large_constant_model())
    assert ops_of(graph) == ["ConstantOfShape", "Add"]
    assert all(a.nbytes < 1024 for a in graph.constants.values())


def test_large_expanding_constant_stays_folded_when_its_op_is_unsupported(all_ops, monkeypatch):
    del all_ops["ConstantOfShape"]
    graph = import_model(large_constant_model())
    assert ops_of(graph) == ["Add"]
    assert graph.constants[graph.nodes[0].inputs[1]].shape == (1 << 20,)


# -- Identity and Dropout -------------------------------------------------------------------------


def test_identity_and_dropout_are_removed_and_output_names_kept(all_ops):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
        helper.make_node("Dropout", ["r"], ["d"], name="drop"),
        helper.make_node("Sigmoid", ["d"], ["s"]),
        helper.make_node("Identity", ["s"], ["z"]),
        helper.make_node("Identity", ["x"], ["passthrough"]),
        helper.make_node("Identity", ["c"], ["constant_out"]),
    ]
    outputs = [helper.make_tensor_value_info(n, F, None) for n in ("y", "z", "passthrough", "constant_out")]
    c = numpy_helper.from_array(np.ones(3, np.float32), "c")
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [3])], outputs, [c])
    graph = import_model(model)
    assert graph.outputs == ("y", "z", "passthrough", "constant_out")
    assert ops_of(graph) == ["Relu", "Sigmoid", "Identity"]  # the input → output copy stays
    assert graph.nodes[0].outputs == ("y",) and graph.nodes[1].inputs == ("y",)
    assert graph.is_constant("constant_out")
    assert_same_results(model, graph)


def test_dropout_mask_output_becomes_all_true(all_ops):
    nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"]), helper.make_node("Not", ["mask"], ["m"])]
    outputs = [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("m", TensorProto.BOOL, None)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 2])], outputs, opset=11)
    graph = import_model(model)
    assert ops_of(graph) == ["Identity"]  # y = x: a copy; Not(mask) folded
    np.testing.assert_array_equal(graph.constants["m"], np.zeros((2, 2), bool))


def test_dead_nodes_are_removed(all_ops):
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["unused"])]
    model = make_model(
        nodes, [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, None)]
    )
    assert ops_of(import_model(model)) == ["Relu"]


def test_unused_training_outputs_are_dropped(all_ops):
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "indices"], kernel_shape=[2, 2])]
    model = make_model(
        nodes, [helper.make_tensor_value_info("x", F, [1, 1, 4, 4])], [helper.make_tensor_value_info("y", F, None)]
    )
    assert import_model(model).nodes[0].outputs == ("y",)


# -- opset normalisation --------------------------------------------------------------------------


def single_node_model(op, inputs, attrs=None, opset=17, outputs=1, inits=(), extra_inputs=()):
    """One node reading x (and constants), at the given opset."""
    names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, ["x", *inputs], names, **(attrs or {}))
    x = helper.make_tensor_value_info("x", F, [2, 3, 4, 5])
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in names]
    init = [numpy_helper.from_array(np.asarray(v), n) for n, v in inits]
    return make_model([node], [x, *extra_inputs], outs, init, opset=opset)


NORMALISATIONS = [
    # (id, op, inputs, attrs, opset, outputs, initializers, expected op sequence)
    ("softmax11_axis1", "Softmax", [], {"axis": 1}, 11, 1, [], ["Reshape", "Softmax", "Reshape"]),
    ("logsoftmax9_default", "LogSoftmax", [], {}, 9, 1, [], ["Reshape", "LogSoftmax", "Reshape"]),
    ("softmax11_last", "Softmax", [], {"axis": 3}, 11, 1, [], ["Softmax"]),
    ("hardmax13_neg", "Hardmax", [], {"axis": -2}, 13, 1, [], ["Hardmax"]),
    ("clip7", "Clip", [], {"min": -0.5, "max": 0.5}, 7, 1, [], ["Clip"]),
    ("clip7_max_only", "Clip", [], {"max": 0.5}, 7, 1, [], ["Clip"]),
    ("reducemean11_all", "ReduceMean", [], {}, 11, 1, [], ["ReduceMean"]),
    ("reducesum11_axes", "ReduceSum", [], {"axes": [-1, 1], "keepdims": 0}, 11, 1, [], ["ReduceSum"]),
    ("reducesum13_input", "ReduceSum", ["axes"], {}, 13, 1, [("axes", np.array([2], np.int64))], ["ReduceSum"]),
    ("reducemax18_noop", "ReduceMax", [], {"noop_with_empty_axes": 1}, 18, 1, [], ["Identity"]),  # x → y copy
    ("argmax11", "ArgMax", [], {"axis": -1}, 11, 1, [], ["ArgMax"]),
    ("split11_equal", "Split", [], {"axis": 1}, 11, 3, [], ["Split"]),
    ("split11_sizes", "Split", [], {"axis": -1, "split": [2, 3]}, 11, 2, [], ["Split"]),
    ("split18_num_outputs", "Split", [], {"axis": 2, "num_outputs": 3}, 18, 3, [], ["Split"]),
    ("slice9", "Slice", [], {"starts": [1, -3], "ends": [100, -1], "axes": [1, 3]}, 9, 1, [], ["Slice"]),
    (
        "slice13_default_axes",
        "Slice",
        ["starts", "ends"],
        {},
        13,
        1,
        [("starts", np.array([1, 0], np.int64)), ("ends", np.array([2, 2], np.int64))],
        ["Slice"],
    ),
    ("pad7", "Pad", [], {"pads": [0, 0, 1, 2, 0, 0, 2, 1], "value": 1.5}, 7, 1, [], ["Pad"]),
    ("pad10_reflect", "Pad", [], {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "mode": "reflect"}, 10, 1, [], ["Pad"]),
    (
        "pad18_axes",
        "Pad",
        ["pads", "", "axes"],
        {},
        18,
        1,
        [("pads", np.array([1, 2, 0, 1], np.int64)), ("axes", np.array([-1, 1], np.int64))],
        ["Pad"],
    ),
    ("upsample7_nearest", "Upsample", [], {"scales": [1.0, 1.0, 2.0, 3.0]}, 7, 1, [], ["Resize"]),
    ("upsample7_linear", "Upsample", [], {"scales": [1.0, 1.0, 2.0, 2.0], "mode": "linear"}, 7, 1, [], ["Resize"]),
    (
        "upsample9_nearest",
        "Upsample",
        ["scales"],
        {},
        9,
        1,
        [("scales", np.array([1, 1, 2, 2], np.float32))],
        ["Resize"],
    ),
    (
        "resize10_linear",
        "Resize",
        ["scales"],
        {"mode": "linear"},
        10,
        1,
        [("scales", np.array([1, 1, 2, 1.5], np.float32))],
        ["Resize"],
    ),
    (
        "resize11_empty_roi",
        "Resize",
        ["roi", "scales"],
        {"mode": "nearest"},
        11,
        1,
        [("roi", np.zeros(0, np.float32)), ("scales", np.array([1, 1, 2, 2], np.float32))],
        ["Resize"],
    ),
    ("topk9", "TopK", [], {"k": 2}, 9, 2, [], ["TopK"]),
    ("flatten11_neg", "Flatten", [], {"axis": -1}, 11, 1, [], ["Flatten"]),
    ("gather_default_axis", "Gather", ["idx"], {}, 13, 1, [("idx", np.array([1, 0], np.int64))], ["Gather"]),
]


@pytest.mark.parametrize("case", NORMALISATIONS, ids=[c[0] for c in NORMALISATIONS])
def test_opset_normalisation_keeps_results(all_ops, case):
    _, op, inputs, attrs, opset, outputs, inits, expected_ops = case
    model = single_node_model(op, inputs, attrs, opset, outputs, inits)
    graph = import_model(model)
    assert ops_of(graph) == expected_ops
    assert_same_results(model, graph)


TRANSPOSES = [
    # (input shape, perm, op after the frontend): one moving only size-1 axes is a Reshape (a view)
    ((1, 5, 4), [1, 0, 2], "Reshape"),  # batch-first at batch 1 -> sequence-first
    ((2, 5, 1), [0, 2, 1], "Reshape"),
    ((1, 1, 6), None, "Reshape"),  # the default perm reverses the axes
    ((2, 5, 4), [1, 0, 2], "Transpose"),
    ((3, 1, 2), [2, 1, 0], "Transpose"),  # the size-1 axis stays, the others swap
]


@pytest.mark.parametrize("shape, perm, op", TRANSPOSES, ids=[f"{s}-{p}" for s, p, _ in TRANSPOSES])
def test_transpose_of_size_one_axes_becomes_a_reshape(all_ops, shape, perm, op):
    attrs = {} if perm is None else {"perm": perm}
    node = helper.make_node("Transpose", ["x"], ["y"], **attrs)
    model = make_model(
        [node], [helper.make_tensor_value_info("x", F, list(shape))], [helper.make_tensor_value_info("y", F, None)]
    )
    graph = import_model(model)
    assert ops_of(graph) == [op]
    assert_same_results(model, graph)


@pytest.mark.parametrize("builder", ["gru_classifier", "lstm_classifier", "rnn_classifier"])
def test_recurrent_classifiers_keep_one_recurrent_node_between_views(builder):
    """As PyTorch exports them: the batch-first Transpose a Reshape, the recurrent layer one node."""
    from hetgen.models import recurrent

    graph = import_model(getattr(recurrent, builder)(seq=7, inputs=5, hidden=6))
    assert ops_of(graph) == ["Reshape", builder.split("_")[0].upper(), "Squeeze", "Gemm"]


def test_normal_forms_have_constant_inputs_and_explicit_axes(all_ops):
    graph = import_model(single_node_model("ReduceMean", [], {"axes": [-1, 1]}, 11))
    node = graph.nodes[0]
    np.testing.assert_array_equal(graph.constants[node.inputs[1]], [1, 3])
    assert node.attr("keepdims") == 1 and node.opset == 18 and not node.has_attr("axes")

    graph = import_model(single_node_model("Split", [], {"axis": -1, "num_outputs": 2}, 18, outputs=2))
    node = graph.nodes[0]
    np.testing.assert_array_equal(graph.constants[node.inputs[1]], [3, 2])
    assert node.attr("axis") == 3 and not node.has_attr("num_outputs")

    graph = import_model(single_node_model("Clip", [], {"min": 0.0}, 7))
    node = graph.nodes[0]
    assert len(node.inputs) == 2 and float(graph.constants[node.inputs[1]]) == 0.0 and node.opset == 11

    graph = import_model(single_node_model("Softmax", [], {}, 17))
    assert graph.nodes[0].attr("axis") == 3

    graph = import_model(single_node_model("Slice", [], {"starts": [1], "ends": [3]}, 7))
    node = graph.nodes[0]
    assert [graph.constants[n].tolist() for n in node.inputs[1:]] == [[1], [3], [0], [1]]


def test_squeeze_without_axes_gets_explicit_axes(all_ops):
    node = helper.make_node("Squeeze", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", F, [1, 3, 1, 2])
    model = make_model([node], [x], [helper.make_tensor_value_info("y", F, None)], opset=11)
    graph = import_model(model)
    np.testing.assert_array_equal(graph.constants[graph.nodes[0].inputs[1]], [0, 2])
    assert_same_results(model, graph)


def test_batch_norm_spatial_attribute(all_ops):
    rng = np.random.default_rng(1)
    params = [("scale", rng.uniform(0.5, 1.5, 3)), ("b", rng.standard_normal(3)), ("mean", rng.standard_normal(3))]
    params.append(("var", rng.uniform(0.5, 1.5, 3)))
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in params]
    x = helper.make_tensor_value_info("x", F, [2, 3, 4, 4])
    node = helper.make_node("BatchNormalization", ["x", "scale", "b", "mean", "var"], ["y"], spatial=1)
    model = make_model([node], [x], [helper.make_tensor_value_info("y", F, None)], inits, opset=7)
    graph = import_model(model)
    assert ops_of(graph) == ["BatchNormalization"] and not graph.nodes[0].has_attr("spatial")
    assert_same_results(model, graph)


def test_batch_norm_spatial_zero_becomes_mul_add(all_ops):
    rng = np.random.default_rng(2)
    shape = (3, 4, 4)
    params = [("scale", rng.uniform(0.5, 1.5, shape)), ("b", rng.standard_normal(shape))]
    params += [("mean", rng.standard_normal(shape)), ("var", rng.uniform(0.5, 1.5, shape))]
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in params]
    x = helper.make_tensor_value_info("x", F, [2, 3, 4, 4])
    node = helper.make_node("BatchNormalization", ["x", "scale", "b", "mean", "var"], ["y"], spatial=0, epsilon=1e-3)
    model = make_model([node], [x], [helper.make_tensor_value_info("y", F, None)], inits, opset=7)
    graph = import_model(model)
    assert ops_of(graph) == ["Mul", "Add"]
    feeds = random_feeds(model)
    v = {n: numpy_helper.to_array(t).astype(np.float64) for n, t in zip([p[0] for p in params], inits)}
    want = (feeds["x"] - v["mean"]) / np.sqrt(v["var"] + 1e-3) * v["scale"] + v["b"]
    got = run_ort(export_onnx(graph), feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_softmax_folds_with_old_semantics(all_ops):
    """Folding must use opset<13 semantics too: the evaluator does not implement them."""
    value = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    nodes = [helper.make_node("Softmax", ["c"], ["s"], axis=1), helper.make_node("Add", ["x", "s"], ["y"])]
    x = helper.make_tensor_value_info("x", F, [2, 2, 2])
    model = make_model(
        nodes, [x], [helper.make_tensor_value_info("y", F, None)], [numpy_helper.from_array(value, "c")], opset=11
    )
    graph = import_model(model)
    assert ops_of(graph) == ["Add"]
    assert_same_results(model, graph)


# -- decomposed LayerNorm and Gelu -------------------------------------------------------------


def decomposed_layer_norm(axes=(-1,), gamma_shape=(8,), x_shape=(2, 4, 8), square="Pow", extra_use=False, opset=17):
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.uniform(0.5, 1.5, gamma_shape).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(gamma_shape).astype(np.float32), "beta"),
        numpy_helper.from_array(np.asarray(2.0, np.float32), "two"),
        numpy_helper.from_array(np.asarray(1e-5, np.float32), "eps"),
        numpy_helper.from_array(np.asarray(axes, np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"])
        if square == "Pow"
        else helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["var"]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["beta", "g"], ["y"], name="ln_out"),
    ]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_use:
        outputs.append(helper.make_tensor_value_info("var", F, None))
    x = helper.make_tensor_value_info("x", F, list(x_shape))
    if opset < 18:
        for node in nodes:
            if node.op_type == "ReduceMean":
                del node.input[1]
                node.attribute.append(helper.make_attribute("axes", list(axes)))
    return make_model(nodes, [x], outputs, inits, opset=opset)


@pytest.mark.parametrize("square", ["Pow", "Mul"])
@pytest.mark.parametrize("opset", [13, 18])
def test_decomposed_layer_norm_becomes_layer_normalization(all_ops, square, opset):
    model = decomposed_layer_norm(square=square, opset=opset)
    graph = import_model(model)
    assert ops_of(graph) == ["LayerNormalization"]
    node = graph.nodes[0]
    assert node.outputs == ("y",) and node.attr("axis") == 2 and node.opset == max(opset, 17)
    assert node.attr("epsilon") == pytest.approx(1e-5)
    assert_same_results(model, graph)


def test_layer_norm_over_two_trailing_axes_with_broadcast_gamma(all_ops):
    model = decomposed_layer_norm(axes=(1, 2), gamma_shape=(1, 1, 8), x_shape=(2, 4, 8))
    graph = import_model(model)
    assert ops_of(graph) == ["LayerNormalization"] and graph.nodes[0].attr("axis") == 1
    assert graph.constants[graph.nodes[0].inputs[1]].shape == (4, 8)
    assert_same_results(model, graph)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"axes": (1,)},  # not the trailing axis
        {"extra_use": True},  # an intermediate is read elsewhere
    ],
    ids=["middle_axis", "shared_intermediate"],
)
def test_layer_norm_lookalikes_are_left_alone(all_ops, kwargs):
    model = decomposed_layer_norm(**kwargs)
    graph = import_model(model)
    assert "ReduceMean" in ops_of(graph)
    assert_same_results(model, graph)


def test_layer_norm_with_a_gamma_over_more_axes_keeps_its_mul_and_add(all_ops):
    model = decomposed_layer_norm(gamma_shape=(4, 8), x_shape=(2, 4, 8))
    graph = import_model(model)
    assert ops_of(graph) == ["LayerNormalization", "Mul", "Add"]
    assert_same_results(model, graph)


def test_layer_norm_rewrite_needs_the_fused_op_supported(all_ops):
    del all_ops["LayerNormalization"]
    assert "LayerNormalization" not in ops_of(import_model(decomposed_layer_norm()))


def test_erf_gelu_becomes_gelu(all_ops):
    model = models.transformer_encoder(opset=13, layers=1)  # decomposed at opset 13
    graph = import_model(model)
    assert ops_of(graph).count("Gelu") == 1 and "Erf" not in ops_of(graph)
    assert_same_results(model, graph, rtol=1e-4, atol=1e-4)


def test_gelu_lookalike_is_left_alone(all_ops):
    inits = [
        numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in (("s", 1.5), ("one", 1.0), ("half", 0.5))
    ]
    nodes = [
        helper.make_node("Div", ["x", "s"], ["a"]),
        helper.make_node("Erf", ["a"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["x", "p"], ["q"]),
        helper.make_node("Mul", ["q", "half"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", F, [2, 8])
    model = make_model(nodes, [x], [helper.make_tensor_value_info("y", F, None)], inits)
    assert "Erf" in ops_of(import_model(model))


# -- the unsupported-operator and constant-input reports ---------------------------------------


def test_all_unsupported_operators_are_listed_in_one_message(monkeypatch):
    monkeypatch.setattr(registry, "OPS", {"Relu": OpDef("Relu", _unlowerable)})
    monkeypatch.setattr(registry, "EXPANDED_OPS", frozenset())
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Foo", ["a"], ["b"], domain="com.example", name="foo_first"),
        helper.make_node("Foo", ["b"], ["c"], domain="com.example", name="foo_second"),
        helper.make_node("Bar", ["c"], ["d"], domain="com.example", name="bar"),
        helper.make_node("Sigmoid", ["d"], ["e"], name="sig"),
        helper.make_node("Tanh", ["e"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", F, [2, 3])
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", F, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(ModelError) as info:
        import_model(model)
    message = str(info.value)
    assert "4 operators are not supported" in message
    assert "Foo (domain com.example): 2 nodes, first 'foo_first'" in message
    assert "Bar (domain com.example): 1 node, first 'bar'" in message
    assert "Sigmoid: 1 node, first 'sig'" in message
    assert "Tanh: 1 node, first unnamed, output 'y'" in message
    assert "supported operators (default domain): Relu" in message


def test_non_constant_shape_input_is_reported(all_ops, monkeypatch):
    all_ops["Reshape"] = OpDef("Reshape", _unlowerable, const_inputs=(1,))
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="foo")
    inputs = [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("shape", I64, [2])]
    model = make_model([node], inputs, [helper.make_tensor_value_info("y", F, None)])
    with pytest.raises(
        ModelError,
        match=r"Reshape 'foo': input 1 \(shape\) must be a compile-time constant; hetgen needs static shapes",
    ):
        import_model(model)


def test_unsupported_dtype_inside_the_graph_is_reported(all_ops):
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),  # float16 is supported since #11
        helper.make_node("Cast", ["h"], ["y"], to=F),
    ]
    model = make_model(
        nodes, [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, None)]
    )
    with pytest.raises(ModelError, match=r"tensor 'h' \(output of Cast .*\) has element type bfloat16"):
        import_model(model)


def test_float16_weights_cast_at_compile_time_are_fine(all_ops):
    w = numpy_helper.from_array(np.ones(2, np.float16), "w")
    nodes = [helper.make_node("Cast", ["w"], ["w32"], to=F), helper.make_node("Add", ["x", "w32"], ["y"])]
    model = make_model(
        nodes, [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, None)], [w]
    )
    assert ops_of(import_model(model)) == ["Add"]


# -- broken models --------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match=r"nope\.onnx: no such model file"):
        import_model(tmp_path / "nope.onnx")


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes(models.mlp().SerializeToString()[:-700])
    with pytest.raises(ModelError, match=r"cut\.onnx: not an ONNX model"):
        import_model(path)


def test_not_protobuf(tmp_path):
    path = tmp_path / "text.onnx"
    path.write_text("this is not a model\n")
    with pytest.raises(ModelError, match=r"text\.onnx: not an ONNX model"):
        import_model(path)


def test_checker_failure_names_the_file_and_says_why(tmp_path):
    node = helper.make_node("Add", ["x"], ["y"])  # Add needs two inputs
    model = make_model(
        [node], [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])]
    )
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(ModelError, match=r"bad\.onnx: the onnx checker rejects the model: .*Add"):
        import_model(path)


def test_no_outputs():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])], [])
    with pytest.raises(ModelError, match="no outputs"):
        import_model(model)


@pytest.mark.parametrize("opset", [6, MAX_OPSET + 1])
def test_opset_out_of_range(opset):
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
        opset=opset,
    )
    with pytest.raises(ModelError, match=f"opset {opset} is not supported; hetgen accepts opsets 7 to {MAX_OPSET}"):
        import_model(model)


def test_unsupported_input_dtype():
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [x], [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None)]
    )
    with pytest.raises(ModelError, match="input 'x' has element type bfloat16; hetgen accepts float32"):
        import_model(model)


def dynamic_model():
    x = helper.make_tensor_value_info("x", F, ["batch", 3, None])
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [x], [helper.make_tensor_value_info("y", F, ["batch", 3, None])]
    )


def test_dynamic_input_dims_are_named(all_ops):
    with pytest.raises(ModelError) as info:
        import_model(dynamic_model())
    message = str(info.value)
    assert "input 'x' dimension 0 is dynamic ('batch'); hetgen needs static shapes" in message
    assert "input 'x' dimension 2 is unknown" in message
    assert "shapes=" in message


def test_shapes_argument_fixes_dynamic_dims(all_ops):
    graph = import_model(dynamic_model(), shapes={"x": (4, 3, 5)})
    assert graph.type_of("y").shape == (4, 3, 5)


def test_shapes_argument_is_checked(all_ops):
    with pytest.raises(ModelError, match="shapes names 'z', which is not a graph input; graph inputs: 'x'"):
        import_model(dynamic_model(), shapes={"z": (1,)})
    with pytest.raises(ModelError, match="rank 2"):
        import_model(dynamic_model(), shapes={"x": (1, 2)})


def test_dynamic_model_from_shape_arithmetic_resolves_with_shapes(all_ops):
    model = shape_arithmetic_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    graph = import_model(model, shapes={"x": (5, 3, 4)})
    np.testing.assert_array_equal(graph.constants[graph.nodes[0].inputs[1]], [5, -1])
    assert graph.type_of("y").shape == (5, 12)


# -- where types come from ------------------------------------------------------------------------


def test_registry_rule_types_what_onnx_cannot(all_ops, monkeypatch):
    from hetgen.frontend import convert, resolve
    from hetgen.ir import DType, TensorType

    calls = []

    def infer(op):
        calls.append(op.node.op)
        return (TensorType(DType.FLOAT32, op.input_types[0].shape),)

    all_ops["Relu"] = OpDef("Relu", _unlowerable, infer=infer)
    monkeypatch.setattr(convert, "infer_onnx_shapes", lambda proto: proto)  # onnx infers nothing
    monkeypatch.setattr(resolve, "_onnx_node_types", lambda node, work: {})
    y = helper.make_tensor_value_info("y", F, ["a", "b"])  # declared without sizes
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2, 3])], [y])
    graph = import_model(model)
    assert calls == ["Relu"] and graph.type_of("y") == TensorType(DType.FLOAT32, (2, 3))


def test_placeholder_evaluation_types_what_nothing_else_can(all_ops, monkeypatch):
    from hetgen.frontend import convert, resolve

    monkeypatch.setattr(convert, "infer_onnx_shapes", lambda proto: proto)
    monkeypatch.setattr(resolve, "_onnx_node_types", lambda node, work: {})
    y = helper.make_tensor_value_info("y", F, ["a", "b"])
    model = make_model(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], [helper.make_tensor_value_info("x", F, [2, 3])], [y]
    )
    assert import_model(model).type_of("y").shape == (3, 2)


def test_new_tensor_names_never_collide_with_the_models(all_ops):
    """Normalisation invents names like '<output>_2d'; a model tensor may already be called that."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["y"], axis=1),
        helper.make_node("Relu", ["x"], ["y_2d"]),
        helper.make_node("Add", ["y", "y_2d"], ["z"]),
    ]
    x = helper.make_tensor_value_info("x", F, [2, 3, 4])
    model = make_model(nodes, [x], [helper.make_tensor_value_info("z", F, None)], opset=11)
    assert_same_results(model, import_model(model))


# -- the folder of broken models ------------------------------------------------------------------

BAD_MODELS = sorted((Path(__file__).resolve().parent / "bad_models").glob("*.onnx"))


# A `.expected` with a `platform:` line is a model that imports but that platform cannot hold;
# tests/test_hostile_files.py compiles those.
IMPORT_ERRORS = [p for p in BAD_MODELS if "\nplatform:" not in p.with_suffix(".expected").read_text()]


@pytest.mark.parametrize("path", IMPORT_ERRORS, ids=[p.stem for p in IMPORT_ERRORS])
def test_bad_model_reports_expected_first_error(path):
    expected = path.with_suffix(".expected").read_text().splitlines()[0].replace("{file}", str(path))
    with pytest.raises(ModelError) as info:
        import_model(path)
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith(expected), first_line


def test_every_onnx_backend_node_case_imports_or_fails_cleanly(all_ops):
    """No model makes the frontend crash: each imports, or gets one ModelError."""
    import conformance

    cases = conformance.all_cases()  # onnx's node cases, cached across runs and workers
    imported = 0
    for case in cases:
        try:
            import_model(case.model)
            imported += 1
        except ModelError:
            pass
    assert imported > len(cases) // 2
