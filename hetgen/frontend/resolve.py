"""The node-by-node pass: normalise each node, fold it if it is constant, else give its outputs types.

Nodes are visited in topological order, so each node's inputs are typed (or known to be untypable)
when it is reached. A node is folded — evaluated now and replaced by constants — when all its inputs
are constants, and also when it is Shape or Size of a statically shaped tensor. Output types that
onnx's whole-model inference left unknown are filled, in this order, by onnx inference of the one
node with its small constant inputs known, by the operator's own rule in the registry
(`OpDef.infer`), and by evaluating the node on placeholder inputs.

Large folded constants: folding ConstantOfShape, Expand, Tile or Range can turn a few bytes into
megabytes of weights. Folding still happens (later folds and shape arithmetic may need the value),
but such a constant's producing node is remembered in `work.recipes`; `cleanup` puts the node back
when the big value would otherwise end up in the compiled model.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hetgen.frontend import control_flow, rules
from hetgen.frontend.convert import constant_node_value, value_type
from hetgen.frontend.evaluate import evaluate
from hetgen.frontend.normalize import normalize
from hetgen.frontend.qdq_match import keeps_quantized
from hetgen.frontend.work import ValueType, Work, WorkNode, to_node_proto
from hetgen.ir import DType, Node, TensorType
from hetgen.ops.base import OpInstance
from hetgen.ops.registry import op_def

# A folded value this large, and this much larger than the node's inputs, is kept as a recipe.
LARGE_CONSTANT_BYTES = 1 << 20
EXPANSION_FACTOR = 16
# Constants up to this size are shown to onnx's one-node inference (shape tensors, scalars).
INFERENCE_CONSTANT_LIMIT = 4096
# Placeholder evaluation for typing runs only on inputs up to this many elements in all.
PLACEHOLDER_LIMIT = 1 << 22
# Folding evaluates in hetgen's own memory: a node whose outputs would be larger stays in the graph
# (a 1 x 2^20 x 2^20 ConstantOfShape is 4 TiB; the target's limits judge it later, with numbers).
FOLD_LIMIT_BYTES = 256 << 20


def resolve(work: Work) -> None:
    pending, work.nodes = collections.deque(work.nodes), []
    while pending:
        original = pending.popleft()
        rules.check_node(original, work)  # as the model wrote it, before it is inlined or rewritten
        replaced = control_flow.replacement(original, work)  # If/Loop decided at compile time
        if replaced is not None:
            pending.extendleft(reversed(replaced))
            continue
        for node in normalize(original, work):
            if not fold(node, work):
                infer_types(node, work)
                work.nodes.append(node)


# -- folding ------------------------------------------------------------------------------------


def fold(node: WorkNode, work: Work) -> bool:
    """Evaluate the node now if its outputs are compile-time constants; True when it was folded."""
    if keeps_quantized(node, work):
        return False  # the QDQ rewrite needs the integer weights; qdq.fold_dequantize folds the rest
    values = _static_shape_value(node, work)
    if values is None and all(not name or name in work.constants for name in node.inputs):
        if node.op == "Constant" and node.is_default_domain:
            values = [constant_node_value(node.attrs)]
        if (values is None or values[0] is None) and _output_bytes(node, work) <= FOLD_LIMIT_BYTES:
            values = evaluate(node, [work.constants[n] if n else None for n in node.inputs])
    if values is None:
        return False
    for name, value in zip(node.outputs, values):
        if not name:
            continue
        known = work.types.get(name)
        if known is not None and known.elem != ValueType.of(value).elem:
            value = value.astype(known.numpy)  # the evaluator widened or narrowed a type
        work.constants[name] = value
        work.types[name] = ValueType.of(value)
    _remember_recipe(node, work)
    return True


def _output_bytes(node: WorkNode, work: Work) -> int:
    """The bytes the node's outputs will take, as far as types tell before evaluating (0 if unknown)."""
    types = {name: work.types[name] for name in node.outputs if name in work.types}
    if len(types) < len([name for name in node.outputs if name]):
        types.update(_onnx_node_types(node, work))
    try:
        return sum(types[name].nbytes for name in node.outputs if types.get(name) is not None)  # None: a sequence
    except (TypeError, ValueError):  # an element type numpy lacks: typing will say so
        return 0


def _static_shape_value(node: WorkNode, work: Work) -> list[np.ndarray] | None:
    if node.op not in ("Shape", "Size") or not node.is_default_domain or node.inputs[0] not in work.types:
        return None
    shape = work.types[node.inputs[0]].shape
    if node.op == "Size":
        return [np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
    start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
    return [np.asarray(shape[slice(start, end)], dtype=np.int64)]


def _remember_recipe(node: WorkNode, work: Work) -> None:
    if len(node.outputs) != 1 or any(n and n not in work.constants for n in node.inputs):
        return  # Shape and Size: their values are tiny
    out_bytes = work.constants[node.outputs[0]].nbytes
    in_bytes = sum(work.constants[n].nbytes for n in node.inputs if n)
    if out_bytes > LARGE_CONSTANT_BYTES and out_bytes > EXPANSION_FACTOR * max(in_bytes, 1):
        work.recipes[node.outputs[0]] = (node, {n: work.constants[n] for n in node.inputs if n})


# -- types --------------------------------------------------------------------------------------


def infer_types(node: WorkNode, work: Work) -> None:
    """Give the node's untyped outputs types; leave them untyped when nothing can tell (check.py)."""
    missing = [name for name in node.outputs if name and name not in work.types]
    if not missing or any(name and name not in work.types for name in node.inputs):
        return
    for rule in (_onnx_node_types, _registry_types, _placeholder_types):
        found = rule(node, work)
        if found and all(found.get(name) is not None for name in missing):
            for name in missing:
                work.types[name] = found[name]
            return


def _onnx_node_types(node: WorkNode, work: Work) -> dict[str, ValueType]:
    inputs = sorted({n for n in node.inputs if n})
    initializers = [
        numpy_helper.from_array(work.constants[n], n)
        for n in inputs
        if n in work.constants and work.constants[n].size <= INFERENCE_CONSTANT_LIMIT
    ]
    graph = helper.make_graph(
        [to_node_proto(node)],
        "infer",
        [helper.make_tensor_value_info(n, work.types[n].elem, work.types[n].shape) for n in inputs],
        [],
        initializer=initializers,
    )
    opsets = [helper.make_opsetid(node.domain, node.opset)]
    if node.domain:
        opsets.append(helper.make_opsetid("", work.opset))
    model = helper.make_model(graph, opset_imports=opsets)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        return {}
    return {vi.name: t for vi in inferred.graph.value_info if (t := value_type(vi)) is not None}


def _registry_types(node: WorkNode, work: Work) -> dict[str, ValueType]:
    definition = op_def(node.op, node.opset) if node.is_default_domain else None
    if definition is None or definition.infer is None:
        return {}
    input_types = []
    for name in node.inputs:
        dtype = DType.from_onnx(work.types[name].elem) if name else None
        if name and dtype is None:
            return {}
        input_types.append(TensorType(dtype, work.types[name].shape) if name else None)
    attrs = tuple(sorted(node.attrs.items()))
    ir_node = Node("infer", node.op, tuple(node.inputs), tuple(node.outputs), attrs, opset=node.opset)
    instance = OpInstance(
        ir_node, tuple(input_types), (), tuple(work.constants.get(n) if n else None for n in node.inputs)
    )
    try:
        types = definition.infer(instance)
    except Exception:  # a rule that cannot handle this instance: try the next way
        return {}
    return {name: ValueType(t.dtype.onnx_code, tuple(t.shape)) for name, t in zip(node.outputs, types) if name}


def _placeholder_types(node: WorkNode, work: Work) -> dict[str, ValueType]:
    if sum(work.types[n].size for n in node.inputs if n and n not in work.constants) > PLACEHOLDER_LIMIT:
        return {}
    try:
        values = [
            (work.constants[n] if n in work.constants else np.ones(work.types[n].shape, work.types[n].numpy))
            if n
            else None
            for n in node.inputs
        ]
    except (ValueError, MemoryError):  # numpy refuses a shape like (0, 2**62) outright
        return {}
    results = evaluate(node, values)
    if results is None:
        return {}
    return {name: ValueType.of(value) for name, value in zip(node.outputs, results) if name}
