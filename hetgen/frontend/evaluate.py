"""Run one node at compile time with onnx's reference evaluator.

Used to fold nodes whose inputs are all constants, and, with placeholder inputs, to learn the output
shapes of a node that neither onnx nor hetgen's rules can type. Nodes are evaluated in their
normalised form at `node.opset` (see `normalize`): the reference evaluator does not implement every
old operator version faithfully (Softmax before opset 13, for one), so old forms never reach it.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from hetgen.frontend.work import WorkNode, to_node_proto

# Operators whose result is not a function of their inputs: never folded.
NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def evaluate(node: WorkNode, values: list[np.ndarray | None]) -> list[np.ndarray] | None:
    """The node's outputs for these input values (None for omitted inputs), or None if it cannot run."""
    if node.op in NONDETERMINISTIC or not node.is_default_domain:
        return None
    if any(isinstance(v, onnx.GraphProto) for v in node.attrs.values()):
        return None  # subgraphs may read outer-scope values the one-node model does not have
    inputs = [f"i{k}" if name else "" for k, name in enumerate(node.inputs)]
    outputs = [f"o{k}" if name else "" for k, name in enumerate(node.outputs)]
    proto = to_node_proto(WorkNode(node.op, inputs, outputs, node.attrs, node.domain, node.opset))
    graph = helper.make_graph(
        [proto],
        "fold",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in zip(inputs, values)
            if n
        ],
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs if n],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", node.opset)])
    feeds = {n: np.asarray(v) for n, v in zip(inputs, values) if n}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # an operator the evaluator lacks, or rejects: leave the node in the graph
        return None
    if any(not isinstance(r, np.ndarray | np.generic) for r in results):
        return None  # a sequence, map or optional: not a tensor hetgen can hold
    arrays = iter(np.asarray(r) for r in results)
    return [next(arrays) if name else None for name in outputs]
