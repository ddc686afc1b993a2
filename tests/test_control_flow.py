"""If, Loop and Scan decided at compile time, and the operators that need constant inputs, against
onnxruntime; a run-time condition or shape-setting input is refused with the node's name."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import harness
from hetgen.errors import ModelError
from hetgen.frontend import import_model
from hetgen.runtime.reference import ort_session

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def loop_model(trips: int) -> helper.ModelProto:
    """y = x doubled `trips` times; the scan output stacks each step's sum."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "v_in"], ["v_out"]),
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
            helper.make_node("Add", ["s", "i_f"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", B, []),
            helper.make_tensor_value_info("v_in", F, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", B, []),
            helper.make_tensor_value_info("v_out", F, [3]),
            helper.make_tensor_value_info("scan", F, []),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "cond", "x"], ["y", "sums"], body=body)],
        "loop",
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, [3]), helper.make_tensor_value_info("sums", F, [trips])],
        initializer=[helper.make_tensor("trips", I64, [], [trips]), helper.make_tensor("cond", B, [], [True])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def if_model(condition: bool, constant: bool = True) -> helper.ModelProto:
    def branch(op: str):
        return helper.make_graph(
            [helper.make_node(op, ["x", "x"], ["r"])], op, [], [helper.make_tensor_value_info("r", F, [3])]
        )

    inputs = [helper.make_tensor_value_info("x", F, [3])]
    inits = [helper.make_tensor("c", B, [], [condition])]
    if not constant:
        inputs.append(helper.make_tensor_value_info("c", B, []))
        inits = []
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("Add"), else_branch=branch("Mul"), name="choose")
    graph = helper.make_graph([node], "if", inputs, [helper.make_tensor_value_info("y", F, [3])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def check(model, feeds):
    got = harness.run_model(model, feeds)
    expected = ort_session(model.SerializeToString()).run(None, feeds)
    for output, wanted in zip(model.graph.output, expected):
        np.testing.assert_allclose(got[output.name], wanted, rtol=1e-6, err_msg=output.name)


@pytest.mark.cc
@pytest.mark.parametrize("trips", [1, 4])
def test_loop_with_constant_trip_count_unrolls(trips):
    check(loop_model(trips), {"x": np.asarray([1.0, -2.0, 0.5], np.float32)})


@pytest.mark.cc
@pytest.mark.parametrize("condition", [True, False])
def test_if_with_constant_condition_takes_its_branch(condition):
    check(if_model(condition), {"x": np.asarray([1.5, -2.0, 3.0], np.float32)})


def test_if_with_run_time_condition_is_refused_by_name():
    with pytest.raises(ModelError, match=r"If 'choose': input 0 must be a compile-time constant"):
        import_model(if_model(True, constant=False))


def test_nonzero_of_run_time_values_read_by_another_node_is_refused_by_name():
    # as a graph output it compiles (tests/test_dynamic_count.py); read by a node, its length is dynamic
    nodes = [
        helper.make_node("NonZero", ["x"], ["y"], name="nz"),
        helper.make_node("Transpose", ["y"], ["t"], name="t"),
    ]
    graph = helper.make_graph(
        nodes, "nz", [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("t", I64, [4, 1])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"NonZero 'nz': its output 'y' has a length known only at run time"):
        import_model(model)
