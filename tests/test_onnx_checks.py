"""Invalid models are refused: onnx's full checker and strict inference, and hetgen's own node rules.

The corpus in tests/bad_models/ pins the first line for whole models (concat_ranks, rank_nine, ...);
these tests pin what the corpus cannot show: each rule on the cases onnx never sees (shapes hetgen
works out itself), that valid neighbours of each case still pass, that the pinned checker
exceptions still apply, that the checks do not see the weights, and that hetgen's rank limit is the
runtime's.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.errors import ModelError
from hetgen.frontend import import_model, rules
from hetgen.frontend.checker_exceptions import PINNED
from hetgen.frontend.onnx_checks import SKELETON_BYTES, check_with_onnx, model_skeleton
from hetgen.frontend.work import ValueType, Work, WorkNode
from hetgen.ir import MAX_RANK
from hetgen.templates_dir import templates_dir

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def work_with(types: dict, constants: dict | None = None) -> Work:
    constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
    typed = {k: ValueType(F, tuple(v)) for k, v in types.items()}
    typed.update({k: ValueType.of(v) for k, v in constants.items()})
    return Work("m.onnx", "m", [], [], [], constants, typed, {"": 21})


def node(op, inputs, opset=21, **attrs) -> WorkNode:
    return WorkNode(
        op, list(inputs), ["y"], {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}, "", opset, "n"
    )


def branch(name, elem):
    value = numpy_helper.from_array(np.ones(2, helper.tensor_dtype_to_np_dtype(elem)))
    return helper.make_graph(
        [helper.make_node("Constant", [], [name], value=value)],
        name,
        [],
        [helper.make_tensor_value_info(name, elem, [2])],
    )


CASES = [  # (node, types, constants, the rule's message or None for a valid node)
    (node("Concat", ["a", "b"], axis=0), {"a": (2, 3), "b": (1, 3)}, {}, None),
    (node("Concat", ["a", "b"], axis=0), {"a": (2, 3), "b": (2, 4)}, {}, "must agree on every axis but axis 0"),
    (node("Concat", ["a", "b"], axis=1), {"a": (2, 3), "b": (2, 3, 1)}, {}, "Concat's inputs must have the same rank"),
    (node("Concat", ["a", "b"], axis=2), {"a": (2, 3), "b": (2, 3)}, {}, r"axis 2 is outside \[-2, 1\]"),
    (node("Reshape", ["x", "s"]), {"x": (2, 3)}, {"s": np.array([0, -1], np.int64)}, None),
    (node("Reshape", ["x", "s"]), {"x": (2, 3)}, {"s": np.array([-1, -1], np.int64)}, "at most one may be inferred"),
    (node("Reshape", ["x", "s"]), {"x": (2, 3)}, {"s": np.array([4, 4], np.int64)}, "has 6 elements"),
    (node("Reshape", ["x", "s"]), {"x": (2, 3)}, {"s": np.array([4, -1], np.int64)}, "has 6 elements"),
    (node("Reshape", ["x", "s"]), {"x": (2, 3)}, {"s": np.array([-2, 3], np.int64)}, "below -1"),
    (node("Reshape", ["x", "s"], allowzero=1), {"x": (0, 3)}, {"s": np.array([0, -1], np.int64)}, "allowzero=1"),
    (node("Conv", ["x", "w"]), {"x": (1, 1, 8, 8), "w": (1, 1, 3, 3)}, {}, None),
    (node("Conv", ["x", "w"], dilations=[4, 1]), {"x": (1, 1, 8, 8), "w": (1, 1, 3, 3)}, {}, "spans 9 elements"),
    (node("Conv", ["x", "w"], dilations=[4, 1], pads=[1, 0, 0, 0]), {"x": (1, 1, 8, 8), "w": (1, 1, 3, 3)}, {}, None),
    (
        node("Conv", ["x", "w"], dilations=[9, 1], auto_pad="SAME_UPPER"),
        {"x": (1, 1, 8, 8), "w": (1, 1, 3, 3)},
        {},
        None,
    ),
    (node("Conv", ["x", "w"], strides=[0, 1]), {"x": (1, 1, 8, 8), "w": (1, 1, 3, 3)}, {}, "must be positive"),
    (node("Conv", ["x", "w"], pads=[1, 1]), {"x": (1, 1, 8, 8), "w": (1, 1, 3, 3)}, {}, "pads has 2 values"),
    (node("AveragePool", ["x"], kernel_shape=[4]), {"x": (1, 2, 3)}, {}, "spans 4 elements"),
    (node("AveragePool", ["x"], kernel_shape=[4], pads=[1, 0]), {"x": (1, 2, 3)}, {}, None),
    (node("AveragePool", ["x"], kernel_shape=[4]), {"x": (0, 2, 3)}, {}, None),  # empty: nothing to compute
    (node("MaxPool", ["x"], kernel_shape=[2, 2], dilations=[3, 1]), {"x": (1, 1, 3, 3)}, {}, "at dilation 3"),
    (node("MaxPool", ["x"], opset=8, kernel_shape=[2, 2], dilations=[3, 1]), {"x": (1, 1, 3, 3)}, {}, None),
    (node("Gather", ["x", "i"], axis=1), {"x": (3, 2)}, {"i": np.array([[0, -2]], np.int64)}, None),
    (node("Gather", ["x", "i"], axis=1), {"x": (3, 2)}, {"i": np.array([-3], np.int64)}, "index -3 is out of range"),
    (node("Gather", ["x", "i"], axis=2), {"x": (3, 2)}, {"i": np.array([0], np.int64)}, r"axis 2 is outside"),
    (node("GatherElements", ["x", "i"]), {"x": (3, 2)}, {"i": np.array([[2, 0]], np.int64)}, None),
    (node("GatherElements", ["x", "i"]), {"x": (3, 2)}, {"i": np.array([[3, 0]], np.int64)}, "index 3 is out of"),
    (node("If", ["c"], then_branch=branch("t", F), else_branch=branch("e", F)), {}, {"c": np.array(True)}, None),
    (
        node("If", ["c"], then_branch=branch("t", F), else_branch=branch("e", I64)),
        {},
        {"c": np.array(True)},
        "is float32 in then_branch",
    ),
]


@pytest.mark.parametrize(("case", "types", "constants", "message"), CASES)
def test_a_node_rule_refuses_the_broken_node_and_passes_its_valid_neighbour(case, types, constants, message):
    work = work_with(types, constants)
    if message is None:
        rules.check_node(case, work)
        return
    with pytest.raises(ModelError, match=rf"^m\.onnx: {case.op} 'n': .*{message}") as info:
        rules.check_node(case, work)
    assert "\n" not in str(info.value)


def model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_rule_judges_shapes_onnx_left_unknown():
    """A Concat behind a Reshape whose target onnx's data propagation cannot follow (through Max;
    hetgen folds it) is judged by hetgen's rule alone: onnx's strict inference passes the model."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Max", ["s", "floor"], ["target"]),
        helper.make_node("Reshape", ["y0", "target"], ["r"]),
        helper.make_node("Concat", ["r", "x"], ["y"], axis=0, name="cat"),
    ]
    inputs = [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("y0", F, [4, 6])]
    floor = numpy_helper.from_array(np.array([4, 6], np.int64), "floor")
    broken = model(nodes, inputs, [helper.make_tensor_value_info("y", F, ["a", "b"])], [floor])
    check_with_onnx(broken, "g")  # onnx lets it through
    with pytest.raises(ModelError, match=r"Concat 'cat': input 1 \('x'\) has shape \(2, 3\), input 0 \('r'\) \(4, 6\)"):
        import_model(broken)


def test_a_rank_past_the_runtimes_is_refused_where_a_node_makes_it():
    x = helper.make_tensor_value_info("x", F, [1] * MAX_RANK)
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    graph = model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["u"], name="up"), helper.make_node("Relu", ["u"], ["y"])],
        [x],
        [helper.make_tensor_value_info("y", F, [1] * (MAX_RANK + 1))],
        [axes],
    )
    with pytest.raises(ModelError, match=rf"tensor 'u' \(output of Unsqueeze 'up'\) has rank {MAX_RANK + 1}"):
        import_model(graph)
    same = [helper.make_tensor_value_info("y", F, [1] * MAX_RANK)]
    assert import_model(model([helper.make_node("Relu", ["x"], ["y"])], [x], same)).type_of("y").rank == MAX_RANK


@pytest.mark.cc
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_the_rank_limit_is_the_runtimes(tmp_path):
    check = tmp_path / "rank.c"
    check.write_text(f'#include "hg_runtime.h"\n_Static_assert(HG_MAX_RANK == {MAX_RANK}, "hetgen.ir.MAX_RANK");\n')
    subprocess.run(["cc", "-fsyntax-only", "-I", str(templates_dir() / "runtime"), str(check)], check=True)


def test_an_initializer_matching_the_input_it_shadows_is_a_default_value():
    x = helper.make_tensor_value_info("x", F, ["n", 3])
    graph = model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [x],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        [numpy_helper.from_array(np.ones((2, 3), np.float32), "x")],
    )
    assert import_model(graph).inputs == ()  # hetgen freezes it: a constant model


def test_the_checks_see_no_weights_but_keep_the_small_constants():
    big = numpy_helper.from_array(np.ones((SKELETON_BYTES // 4 + 1,), np.float32), "w")
    shape = numpy_helper.from_array(np.array([-1, 1], np.int64), "shape")
    graph = model(
        [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Reshape", ["s", "shape"], ["y"])],
        [helper.make_tensor_value_info("x", F, [big.dims[0]])],
        [helper.make_tensor_value_info("y", F, [big.dims[0], 1])],
        [big, shape],
    )
    skeleton = model_skeleton(graph)
    assert [t.name for t in skeleton.graph.initializer] == ["shape"]
    assert [i.name for i in skeleton.graph.input] == ["x", "w"]
    assert skeleton.ByteSize() < 1024 < graph.ByteSize()
    check_with_onnx(graph, "g")
    graph.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 2  # contradicts the small constant
    with pytest.raises(ModelError, match=r"^g: Reshape \(output 'y'\): .*\(onnx shape inference, strict\)$"):
        check_with_onnx(graph, "g")


def if_reading_an_outer_value_twice() -> onnx.ModelProto:
    def square(op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["x", "x"], ["r"])], op, [], [helper.make_tensor_value_info("r", F, [3])]
        )

    choose = helper.make_node("If", ["c"], ["y"], then_branch=square("Mul"), else_branch=square("Add"), name="choose")
    return model(
        [choose],
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, [3])],
        [numpy_helper.from_array(np.array(True), "c")],
    )


def stft_one_sided_by_default() -> onnx.ModelProto:
    return model(
        [helper.make_node("STFT", ["signal", "step", "", "length"], ["y"], name="stft")],
        [helper.make_tensor_value_info("signal", F, [1, 128, 1])],
        [helper.make_tensor_value_info("y", F, [1, 15, 9, 2])],
        [
            numpy_helper.from_array(np.array(8, np.int64), "step"),
            numpy_helper.from_array(np.array(16, np.int64), "length"),
        ],
    )


def mvn_with_default_axes() -> onnx.ModelProto:
    return model(
        [helper.make_node("MeanVarianceNormalization", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", F, [3, 3, 3, 1])],
        [helper.make_tensor_value_info("y", F, [3, 3, 3, 1])],
    )


@pytest.mark.parametrize("exception", PINNED, ids=[e.case for e in PINNED])
def test_a_pinned_checker_exception_still_applies_and_lets_its_case_through(exception):
    case = globals()[exception.case]()
    with pytest.raises(onnx.shape_inference.InferenceError, match=exception.pattern):
        onnx.shape_inference.infer_shapes(case, check_type=True, strict_mode=True, data_prop=True)
    check_with_onnx(case, exception.case)
    import_model(case)


def broken_concats(names: list[str]) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("a", F, [2, 3]), helper.make_tensor_value_info("b", F, [1, 2, 3])]
    nodes = [helper.make_node("Concat", ["a", "b"], [f"y{k}"], axis=0, name=name) for k, name in enumerate(names)]
    outputs = [helper.make_tensor_value_info(f"y{k}", F, [3, 3]) for k in range(len(names))]
    return model(nodes, inputs, outputs)


def test_onnx_errors_become_one_escaped_line_naming_the_first_node_and_counting_the_rest():
    with pytest.raises(ModelError) as info:
        import_model(broken_concats(["c\x1b[2Jat\nnext", "other"]))
    message = str(info.value)
    assert message == (
        "model 'g': Concat 'c\\x1b[2Jat\\nnext': All inputs to Concat must have same rank. Input 1 has rank 3 != 2 "
        "(onnx shape inference, strict) (and 1 more)"
    )
    with pytest.raises(ModelError, match=r"^model 'g': Concat \(output 'y0'\): All inputs"):
        import_model(broken_concats([""]))


def test_weights_kept_in_an_external_file_never_reach_onnx(tmp_path):
    """However large the external data (past protobuf's 2 GiB), onnx checks only the skeleton."""
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", F, [4, 4])],
        [helper.make_tensor_value_info("y", F, [4, 4])],
        [weight],
    )
    onnx.save_model(graph, tmp_path / "m.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    external = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    (tmp_path / "w.bin").unlink()  # nothing reads the data
    skeleton = model_skeleton(external)
    assert not skeleton.graph.initializer and [i.name for i in skeleton.graph.input] == ["x", "w"]
    check_with_onnx(external, "m.onnx")
