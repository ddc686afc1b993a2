"""Graph IR → ONNX model, for comparing a Graph with its source model in onnxruntime.

Each node is written in the form the frontend left it (see `normalize`), so the model imports the
largest `opset` of its nodes. Constant graph outputs become Constant nodes.
"""

from __future__ import annotations

import onnx
from onnx import helper, numpy_helper

from hetgen.frontend.work import WorkNode, to_node_proto
from hetgen.ir import Graph
from hetgen.ops.registry import op_def


def export_onnx(graph: Graph) -> onnx.ModelProto:
    opset = max([graph.opset, *(graph.opset if node.opset is None else node.opset for node in graph.nodes)])
    nodes = [
        to_node_proto(WorkNode(n.op, list(n.inputs), list(n.outputs), dict(n.attrs), _domain(n.op)), name=n.name)
        for n in graph.nodes
    ]
    initializers = []
    for name, array in sorted(graph.constants.items()):
        if name in graph.outputs:
            nodes.insert(0, helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array)))
        else:
            initializers.append(numpy_helper.from_array(array, name))

    def info(name: str) -> onnx.ValueInfoProto:
        t = graph.types[name]
        return helper.make_tensor_value_info(name, t.dtype.onnx_code, t.shape)

    produced = {o for n in graph.nodes for o in n.outputs if o}
    onnx_graph = helper.make_graph(
        nodes,
        graph.name,
        [info(n) for n in graph.inputs],
        [info(n) for n in graph.outputs],
        initializer=initializers,
        value_info=[info(n) for n in sorted(produced - set(graph.outputs))],
    )
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, 1) for d in sorted({_domain(n.op) for n in graph.nodes} - {""})]
    model = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="hetgen")
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)  # com.microsoft: unknown to onnx
    return model


def _domain(op: str) -> str:
    """The ONNX domain an operator of the IR is exported in (`OpDef.domain`: onnxruntime's contrib
    operators, which the QDQ rewrite makes, are "com.microsoft")."""
    definition = op_def(op)
    return definition.domain if definition is not None else ""
