"""Fold inference-mode BatchNormalization into the convolution that feeds it.

Conv → BatchNormalization is how every exported CNN spells a convolution with a per-channel affine
transform. Folding it into the convolution's weights and bias saves a pass over the activation and,
more importantly, lets the activation after it fuse into the convolution kernel and lets the
convolution go to an accelerator whose pattern table knows Conv but not BatchNormalization.

    W' = W * s[:, None, ...]    b' = (b - mean) * s + beta    with  s = gamma / sqrt(var + eps)

computed in float64 and rounded once to float32. Folded only when the convolution's output has no
other reader and is not a graph output, and every parameter is a compile-time constant.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hetgen.ir import DType, Graph, Node, TensorType


def _constant(graph: Graph, name: str) -> np.ndarray | None:
    return graph.constants.get(name) if name else None


def fold_batchnorm(graph: Graph) -> Graph:
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    constants = dict(graph.constants)
    types = dict(graph.types)
    replaced: dict[str, Node] = {}  # conv node name -> folded conv
    dropped: set[str] = set()
    for bn in graph.nodes:
        if bn.op != "BatchNormalization" or len([o for o in bn.outputs if o]) != 1:
            continue
        conv = producers.get(bn.inputs[0])
        if conv is None or conv.op != "Conv" or conv.name in replaced:
            continue
        if bn.inputs[0] in outputs or len(consumers.get(bn.inputs[0], [])) != 1:
            continue
        weight = _constant(graph, conv.inputs[1])
        params = [_constant(graph, name) for name in bn.inputs[1:5]]
        if weight is None or any(p is None for p in params) or types[bn.outputs[0]].dtype is not DType.FLOAT32:
            continue
        bias = _constant(graph, conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
        if weight.ndim < 1 or any(p.size != weight.shape[0] for p in (*params, *([bias] if bias is not None else []))):
            continue  # not one value per output channel: the unfolded operators report it
        gamma, beta, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
        scale = gamma / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
        bias = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64).reshape(-1)
        new_weight = (weight.astype(np.float64) * scale.reshape((-1,) + (1,) * (weight.ndim - 1))).astype(np.float32)
        new_bias = ((bias - mean) * scale + beta).astype(np.float32)
        weight_name, bias_name = f"{conv.name}__bn_weight", f"{conv.name}__bn_bias"
        constants[weight_name], constants[bias_name] = new_weight, new_bias
        types[weight_name] = TensorType(DType.FLOAT32, tuple(new_weight.shape))
        types[bias_name] = TensorType(DType.FLOAT32, tuple(new_bias.shape))
        replaced[conv.name] = Node(
            conv.name,
            conv.op,
            (conv.inputs[0], weight_name, bias_name),
            (bn.outputs[0],),
            conv.attrs,
            conv.source_name,
            conv.opset,
        )
        dropped.add(bn.name)
    if not replaced:
        return graph
    nodes = tuple(replaced.get(node.name, node) for node in graph.nodes if node.name not in dropped)
    used = {name for node in nodes for name in node.inputs if name} | set(graph.outputs)
    constants = {name: value for name, value in constants.items() if name in used}
    produced = {name for node in nodes for name in node.outputs if name}
    keep = used | produced | set(graph.inputs)
    types = {name: t for name, t in types.items() if name in keep}
    removed = graph.removed_sources | {
        node.source_name for node in graph.nodes if node.name in dropped and node.source_name
    }
    return dataclasses.replace(graph, nodes=nodes, types=types, constants=constants, removed_sources=removed)
