"""Fold a channel permutation into the convolutions that read it.

ShuffleNet's channel shuffle, Reshape [N, G, C/G, H, W] -> Transpose (0, 2, 1, 3, 4) -> Reshape
[N, C, H, W], moves whole channel planes: y[:, r] = x[:, perm[r]]. In NCHW that is a true
permutation, not a view, so it costs a copy of the map. But a convolution with constant weights W
that reads y computes the same as one reading x with W's input channels permuted once, here:

    conv(y, W) = conv(x, W')    with  W'[:, perm[r]] = W[:, r]

(the same products, summed in another order). So where every reader of such a chain's output is an
ungrouped float32 Conv with constant weights, each reads x with its own W', and the chain goes.
Any chain of reshapes and Transposes (`OpDef.alias`, `OpDef.moved`) qualifies when it maps x onto a tensor of x's shape by moving
channel planes (checked on the element indices, not on the spelling); each link's output must have
no other reader and no link be a model output. Elsewhere (a grouped or depthwise reader, a Split,
a model output) the chain stays and copies.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from hetgen.ir import DType, Graph, Node, TensorType
from hetgen.ops.base import OpInstance, Unsupported
from hetgen.ops.registry import op_def

# the index arithmetic checks every element once (int32 indices: 64 MiB a copy at the most);
# larger maps keep the copy
MAX_ELEMENTS = 1 << 24


def fold_channel_permutations(graph: Graph) -> Graph:
    """`graph` with each channel permutation whose readers are all convolutions with constant
    weights folded into their weights (module doc)."""
    producers, consumers = graph.producers(), graph.consumers()
    outputs = set(graph.outputs)
    constants, types = dict(graph.constants), dict(graph.types)
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    for tail in graph.nodes:
        if not _moves(tail) or tail.name in dropped or not tail.outputs or tail.outputs[0] in outputs:
            continue
        readers = consumers.get(tail.outputs[0], [])
        if not readers or not all(
            _absorbs(node, tail.outputs[0], graph) and node.name not in replaced for node in readers
        ):
            continue
        chain = _chain(tail, producers, consumers, outputs)
        if chain is None:
            continue
        source = chain[0].inputs[0]
        perm = _channel_permutation(chain, types[source].shape, graph)
        if perm is None:
            continue
        for reader in readers:
            weight = graph.constants[reader.inputs[1]]
            permuted = np.empty_like(weight)
            permuted[:, perm] = weight
            name = f"{reader.name}__permuted_weight"
            constants[name], types[name] = permuted, TensorType(DType.FLOAT32, tuple(permuted.shape))
            replaced[reader.name] = dataclasses.replace(reader, inputs=(source, name, *reader.inputs[2:]))
        dropped.update(node.name for node in chain)
    if not replaced:
        return graph
    nodes = tuple(replaced.get(node.name, node) for node in graph.nodes if node.name not in dropped)
    used = {name for node in nodes for name in node.inputs if name} | outputs
    produced = {name for node in nodes for name in node.outputs if name}
    keep = used | produced | set(graph.inputs)
    constants = {name: value for name, value in constants.items() if name in used}
    types = {name: t for name, t in types.items() if name in keep}
    removed = graph.removed_sources | {
        node.source_name for node in graph.nodes if node.name in dropped and node.source_name
    }
    return dataclasses.replace(graph, nodes=nodes, types=types, constants=constants, removed_sources=removed)


def _moves(node: Node) -> bool:
    """A data movement with one input and output: a reshape (`OpDef.alias`) or an operator whose
    output is its input's elements moved (`OpDef.moved`: Transpose)."""
    definition = op_def(node.op, node.opset)
    one = len([name for name in node.outputs if name]) == 1 and bool(node.inputs) and bool(node.inputs[0])
    return definition is not None and one and (definition.alias or definition.moved is not None)


def _absorbs(node: Node, tensor: str, graph: Graph) -> bool:
    """An ungrouped float32 Conv reading `tensor` as its input (only), with constant weights."""
    if node.op != "Conv" or len(node.inputs) < 2 or int(node.attr("group", 1)) != 1:
        return False
    weight = graph.constants.get(node.inputs[1])
    return (
        node.inputs[0] == tensor and tensor not in node.inputs[1:] and weight is not None and weight.dtype == np.float32
    )


def _chain(tail: Node, producers, consumers, outputs) -> list[Node] | None:
    """The data movements (`_moves`) ending in `tail`, first to last, each link's output read by the
    next link only and not a model output; None where all of them are reshapes."""
    chain = [tail]
    while True:
        before = producers.get(chain[0].inputs[0])
        if (
            before is None
            or not _moves(before)
            or before.outputs[0] in outputs
            or len(consumers.get(before.outputs[0], [])) != 1
        ):
            break
        chain.insert(0, before)
    return chain if any(not op_def(node.op, node.opset).alias for node in chain) else None


def _channel_permutation(chain: list[Node], shape: tuple[int, ...], graph: Graph) -> np.ndarray | None:
    """perm, where the chain maps a tensor x of `shape` [N, C, ...] onto y of the same shape with
    y[:, r] = x[:, perm[r]]; None where it does anything else."""
    out_shape = graph.types[chain[-1].outputs[0]].shape
    if len(shape) < 3 or out_shape != shape or math.prod(shape) > MAX_ELEMENTS:
        return None
    index = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    for node in chain:
        moved = op_def(node.op, node.opset).moved
        out = graph.types[node.outputs[0]].shape
        try:
            index = index.reshape(out) if moved is None else moved(OpInstance.of(node, graph), index)
        except (Unsupported, ValueError):
            return None  # the operator's lowering reports it
        if index.shape != out:
            return None
    n, c, plane = shape[0], shape[1], math.prod(shape[2:])
    mapped = index.reshape(n, c, plane)
    perm = (mapped[0, :, 0] // plane) % c
    expected = (np.arange(n, dtype=np.int32)[:, None, None] * c + perm[None, :, None]) * plane + np.arange(
        plane, dtype=np.int32
    )[None, None, :]
    if not np.array_equal(mapped, expected) or np.array_equal(perm, np.arange(c)):
        return None
    return perm
