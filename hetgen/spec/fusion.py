"""Which activation a kernel may absorb as its epilogue: the one rule, read by placement (to cut a
group into the units the cost model prices) and by lowering (to cut the placed graph into units).

A unit is a head operator whose lowering accepts an epilogue (Conv, Gemm, MatMul, Add, ...) and the
chain of activations that follow it: each reads, as its first input, the single output of the node
before it, which nothing else reads and which is not a graph output, and its parameters are known
at compile time. Where the chain is cut is the caller's: a unit never spans two placement groups
(lowering and the cost model alike; hetgen/partition/fused.py offers each unit on a controller as a
group of its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hetgen.ir import DType, Graph, Node
from hetgen.ops._activation import epilogue_from_attributes
from hetgen.ops.base import FUSABLE_ACTIVATIONS, Epilogue
from hetgen.ops.registry import op_def

FLOAT_MAX = 3.4028234663852886e38


def epilogue_of(node: Node, graph: Graph) -> Epilogue | None:
    """The epilogue equivalent to activation `node`, or None when it cannot be fused."""
    if node.op not in FUSABLE_ACTIVATIONS:
        return None
    dtype = graph.types[node.outputs[0]].dtype
    # On int8/uint8 (after QLinearConv/QLinearMatMul) a Relu or Clip is a clamp of the stored integer.
    integer_clamp = node.op in ("Relu", "Clip") and dtype in (DType.INT8, DType.UINT8)
    if dtype is not DType.FLOAT32 and not integer_clamp:
        return None
    if node.op == "Clip":
        low, high = float(node.attr("min", -FLOAT_MAX)), float(node.attr("max", FLOAT_MAX))
        for index, name in enumerate(node.inputs[1:3], start=1):
            if not name:
                continue
            if name not in graph.constants:
                return None
            value = float(graph.constants[name].reshape(-1)[0])
            low, high = (value, high) if index == 1 else (low, value)
        return Epilogue("Clip", alpha=low, beta=high)
    return epilogue_from_attributes(node)


def followers(graph: Graph) -> dict[str, tuple[str, Epilogue]]:
    """Node name -> (the activation that may follow it in a unit, that activation's epilogue)."""
    consumers = graph.consumers()
    graph_outputs = set(graph.outputs)
    found: dict[str, tuple[str, Epilogue]] = {}
    for node in graph.nodes:
        if len(node.outputs) != 1 or not node.outputs[0]:
            continue
        produced = node.outputs[0]
        readers = consumers.get(produced, [])
        if produced in graph_outputs or len(readers) != 1 or readers[0].inputs[:1] != (produced,):
            continue
        epilogue = epilogue_of(readers[0], graph)
        if epilogue is not None:
            found[node.name] = (readers[0].name, epilogue)
    return found


def fusion_chains(graph: Graph) -> dict[str, tuple[tuple[str, Epilogue], ...]]:
    """Head node name -> the activations its unit absorbs when all of them run where it runs (in
    order; empty for a head whose lowering takes no epilogue)."""
    after = followers(graph)
    chains: dict[str, tuple[tuple[str, Epilogue], ...]] = {}
    for node in graph.nodes:
        definition = op_def(node.op)
        chain: list[tuple[str, Epilogue]] = []
        if definition is not None and definition.fusable_epilogue:
            name = node.name
            while name in after:
                chain.append(after[name])
                name = after[name][0]
        chains[node.name] = tuple(chain)
    return chains


def cut_units(
    nodes: Sequence[Node], chains: Mapping[str, tuple[tuple[str, Epilogue], ...]], together
) -> list[tuple[tuple[Node, ...], tuple[Epilogue, ...]]]:
    """`nodes` (in order) cut into units: a head absorbs each next activation of its chain that
    comes later in `nodes` and that `together(head, activation)` allows."""
    by_name = {node.name: node for node in nodes}
    absorbed: set[str] = set()
    units = []
    for node in nodes:
        if node.name in absorbed:
            continue
        members, epilogue = [node], []
        for name, fused in chains.get(node.name, ()):
            reader = by_name.get(name)
            if reader is None or not together(node, reader):
                break
            members.append(reader)
            epilogue.append(fused)
            absorbed.add(name)
        units.append((tuple(members), tuple(epilogue)))
    return units


_last: list = [None, None]  # (graph, its chains): placement asks about one graph many times


def unit_chains(graph: Graph) -> dict[str, tuple[tuple[str, Epilogue], ...]]:
    """`fusion_chains(graph)`, kept for the graph last asked about."""
    if _last[0] is not graph:
        _last[:] = [graph, fusion_chains(graph)]
    return _last[1]
