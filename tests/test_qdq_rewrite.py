"""The QDQ rewrite (hetgen/frontend/qdq.py) at the graph level: what it turns into integer operators,
what it must leave alone, and that the rewritten graph still means the same thing (exported back to
ONNX, com.microsoft operators included, it runs in onnxruntime with the original's results)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.frontend import export_onnx, import_model
from hetgen.runtime.reference import ort_session

RNG = np.random.default_rng(11)


def qdq_block(extra_reader: bool = False) -> onnx.ModelProto:
    """x → Q → DQ → Conv(DQ(int8 weights), DQ(int32 bias)) → Q → DQ → Add(DQ(skip)) → Q → DQ."""
    w = RNG.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8)
    inits = {
        "xs": np.float32(0.04),
        "xz": np.array(2, np.int8),
        "wq": w,
        "ws": (RNG.random(4) * 0.02 + 0.005).astype(np.float32),
        "wz": np.zeros(4, np.int8),
        "bq": RNG.integers(-500, 500, 4).astype(np.int32),
        "cs": np.float32(0.08),
        "cz": np.array(-3, np.int8),
        "ys": np.float32(0.1),
        "yz": np.array(0, np.int8),
    }
    inits["bs"] = (inits["xs"] * inits["ws"]).astype(np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "cs", "cz"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "cs", "cz"], ["cd"]),
        helper.make_node("Add", ["cd", "xd"], ["s"]),
        helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["sq"]),
        helper.make_node("DequantizeLinear", ["sq", "ys", "yz"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])]
    if extra_reader:  # the float convolution result is also a graph output: the island is not closed
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4, 8, 8]))
    graph = helper.make_graph(
        nodes,
        "qdq_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        outputs,
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_islands_become_integer_operators_and_mean_the_same():
    model = qdq_block()
    graph = import_model(model)
    assert Counter(n.op for n in graph.nodes) == Counter(
        {"QuantizeLinear": 1, "QLinearConv": 1, "QLinearAdd": 1, "DequantizeLinear": 1}
    )
    assert graph.types[graph.nodes[1].inputs[3]].dtype.label == "int8"  # the weights stayed int8
    exported = export_onnx(graph)
    assert {(o.domain, o.version) for o in exported.opset_import} >= {("com.microsoft", 1)}
    feeds = {"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    original = ort_session(model.SerializeToString()).run(None, feeds)[0]
    rewritten = ort_session(exported.SerializeToString()).run(None, feeds)[0]
    # onnxruntime's own QLinearAdd is fixed-point: within one output step of the float path
    assert np.abs(rewritten - original).max() <= 0.1 + 1e-6


def test_an_island_with_another_reader_stays_float():
    graph = import_model(qdq_block(extra_reader=True))
    ops = Counter(n.op for n in graph.nodes)
    assert ops["Conv"] == 1 and ops["QLinearConv"] == 0  # its float output is needed as it is
    assert ops["QLinearAdd"] == 1  # the island after it is still closed


@pytest.mark.parametrize("scale", [np.float32(0.04), np.float32(0.05)], ids=["same", "other"])
def test_maxpool_runs_on_the_quantized_tensor_only_at_one_scale(scale):
    inits = {"s": np.float32(0.04), "z": np.array(1, np.int8), "t": scale}
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
        helper.make_node("MaxPool", ["f"], ["p"], kernel_shape=[2, 2]),
        helper.make_node("QuantizeLinear", ["p", "t", "z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 2, 3, 3])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    ops = [n.op for n in import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).nodes]
    assert ops == (["MaxPool"] if scale == inits["s"] else ["DequantizeLinear", "MaxPool", "QuantizeLinear"])
