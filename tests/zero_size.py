"""Small models with a tensor of zero elements somewhere (a dimension of 0): an empty graph input, a
weight with no rows, an operator whose output is empty (Conv with 0 output channels, Slice past the
end, Split into an empty piece, TopK with k = 0), and operators that read an empty tensor but write a
full one (MatMul over K = 0, a reduction over an empty axis, Concat or Pad of an empty piece).

`CASES` maps a case name to a function returning (model, feeds); outputs are typed by onnx's strict
shape inference. tests/test_zero_size.py generates each on every shipped platform and compares the
built program with onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, I64 = np.float32, np.int64
OPSET = 21


def model(op: str, inputs: list, attrs: dict | None = None, outputs: int = 1, extra=()) -> tuple:
    """One `op` node named 'node' (then the `extra` nodes, which read 'out0'); each input is an
    ndarray (an initializer) or a (shape, dtype) graph input."""
    names, graph_inputs, initializers, feeds = [], [], [], {}
    rng = np.random.default_rng(0)
    for index, value in enumerate(inputs):
        name = "" if isinstance(value, str) else f"in{index}"  # "": an omitted optional input
        names.append(name)
        if not name:
            continue
        if isinstance(value, tuple):
            shape, dtype = value
            graph_inputs.append(
                helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
            )
            feeds[name] = rng.uniform(-2, 2, shape).astype(dtype)
        else:
            initializers.append(numpy_helper.from_array(np.asarray(value), name))
    out_names = [f"out{i}" for i in range(outputs)]
    nodes = [helper.make_node(op, names, out_names, name="node", **(attrs or {})), *extra]
    final = [out_names[0] if not extra else extra[-1].output[0], *out_names[1:]]
    graph = helper.make_graph(nodes, f"zero_{op}", graph_inputs, [], initializer=initializers)
    graph.output.extend(helper.make_empty_tensor_value_info(name) for name in final)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    proto.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    known = {vi.name: vi for vi in inferred.graph.value_info}
    typed = [known[o.name] for o in proto.graph.output]
    del proto.graph.output[:]
    proto.graph.output.extend(typed)
    return proto, feeds


def relu_after() -> tuple:
    """A Relu reading the first node's output: an empty tensor flows into another kernel."""
    return (helper.make_node("Relu", ["out0"], ["after"], name="after"),)


def w(*shape) -> np.ndarray:
    return np.random.default_rng(1).uniform(-1, 1, shape).astype(F32)


def i64(*values) -> np.ndarray:
    return np.array(values, I64)


CASES: dict[str, Callable[[], tuple]] = {
    # an operator whose output is empty
    "conv_no_output_channels": lambda: model("Conv", [((1, 3, 6, 6), F32), w(0, 3, 3, 3)]),
    "conv_no_output_channels_bias": lambda: model(
        "Conv", [((1, 3, 6, 6), F32), w(0, 3, 3, 3), w(0)], extra=relu_after()
    ),
    "conv_empty_batch": lambda: model("Conv", [((0, 3, 6, 6), F32), w(2, 3, 3, 3)], {"pads": [1, 1, 1, 1]}),
    "conv_transpose_no_output_channels": lambda: model("ConvTranspose", [((1, 2, 3, 3), F32), w(2, 0, 3, 3)]),
    "gemm_no_columns": lambda: model("Gemm", [((3, 4), F32), w(4, 0)]),
    "gemm_no_rows": lambda: model("Gemm", [((0, 4), F32), w(4, 5), w(5)]),
    "matmul_empty_batch": lambda: model("MatMul", [((0, 3, 4), F32), w(4, 5)]),
    "relu_empty_input": lambda: model("Relu", [((0, 3), F32)]),
    "add_broadcast_empty": lambda: model("Add", [((2, 0, 3), F32), w(3)], extra=relu_after()),
    "where_empty": lambda: model("Where", [np.zeros((0, 3), bool), ((0, 3), F32), w(1)]),
    "cast_empty": lambda: model("Cast", [((4, 0), F32)], {"to": TensorProto.INT64}),
    "softmax_empty_rows": lambda: model("Softmax", [((0, 5), F32)]),
    "slice_past_the_end": lambda: model("Slice", [((4, 5), F32), i64(3), i64(1)], extra=relu_after()),
    "slice_of_empty": lambda: model("Slice", [((0, 5), F32), i64(1), i64(4), i64(1)]),
    "split_empty_piece": lambda: model("Split", [((4, 3), F32), i64(0, 4)], {"axis": 0}, outputs=2),
    "transpose_empty": lambda: model("Transpose", [((0, 2, 3), F32)], {"perm": [2, 0, 1]}),
    "reshape_empty": lambda: model("Reshape", [((0, 6), F32), i64(3, 0, 2)], {"allowzero": 1}),
    "flatten_empty": lambda: model("Flatten", [((2, 0, 3), F32)], {"axis": 2}),
    "unsqueeze_empty": lambda: model("Unsqueeze", [((0, 3), F32), i64(1)]),
    "expand_to_empty": lambda: model("Expand", [((1, 3), F32), i64(0, 3)]),
    "tile_zero_repeats": lambda: model("Tile", [((2, 3), F32), i64(0, 2)]),
    "gather_empty_indices": lambda: model("Gather", [((4, 3), F32), np.zeros((0,), I64)], {"axis": 0}),
    "maxpool_empty_channels": lambda: model("MaxPool", [((1, 0, 4, 4), F32)], {"kernel_shape": [2, 2]}),
    "avgpool_empty_batch": lambda: model("AveragePool", [((0, 2, 4, 4), F32)], {"kernel_shape": [2, 2]}),
    "global_avgpool_empty_channels": lambda: model("GlobalAveragePool", [((1, 0, 3, 3), F32)]),
    "batchnorm_empty_batch": lambda: model("BatchNormalization", [((0, 2, 3), F32), w(2), w(2), w(2), np.ones(2, F32)]),
    "layernorm_empty_rows": lambda: model("LayerNormalization", [((0, 4), F32), w(4), w(4)]),
    "topk_zero": lambda: model("TopK", [((3, 5), F32), i64(0)], outputs=2),
    "cumsum_empty": lambda: model("CumSum", [((0,), F32), np.array(0, I64)]),
    "argmax_empty_rows": lambda: model("ArgMax", [((0, 4), F32)], {"axis": 1}),
    "resize_empty_batch": lambda: model("Resize", [((0, 1, 2, 2), F32), "", np.array([1, 1, 2, 2], F32)]),
    # an empty tensor read, a full one written
    "matmul_over_empty_k": lambda: model("MatMul", [((3, 0), F32), w(0, 4)]),
    "gemm_over_empty_k_with_bias": lambda: model("Gemm", [((3, 0), F32), w(0, 4), w(4)]),
    "conv_no_input_channels": lambda: model("Conv", [((1, 0, 5, 5), F32), w(2, 0, 3, 3), w(2)]),
    "reduce_sum_of_empty": lambda: model("ReduceSum", [((0, 3), F32), i64(0)], {"keepdims": 0}),
    "reduce_prod_of_empty": lambda: model("ReduceProd", [((3, 0), F32), i64(1)], {"keepdims": 1}),
    "reduce_max_of_empty_rows": lambda: model("ReduceMax", [((0, 3), F32), i64(1)], {"keepdims": 0}),
    "concat_with_empty_piece": lambda: model("Concat", [((2, 3), F32), ((0, 3), F32), w(1, 3)], {"axis": 0}),
    "pad_empty": lambda: model("Pad", [((0, 3), F32), i64(1, 0, 1, 1), np.array(2.5, F32)]),
    "global_avgpool_over_empty": lambda: model("GlobalAveragePool", [((1, 2, 0, 3), F32)]),
}
