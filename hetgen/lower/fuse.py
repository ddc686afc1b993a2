"""Kernel units: the nodes that become one generated C function.

A unit is one node, or a node followed by activations it absorbs as an epilogue (Conv→Relu,
Gemm→Clip, Add→Relu). Fusion happens only between nodes placed on the same target, only when the
producer's output has no other reader and is not a graph output, and only for activations whose
parameters are known at compile time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetgen.ir import DType, Graph, Node
from hetgen.ops._activation import epilogue_from_attributes
from hetgen.ops.base import FUSABLE_ACTIVATIONS, Epilogue, OpInstance
from hetgen.ops.registry import op_def


@dataclass(frozen=True)
class Unit:
    nodes: tuple[Node, ...]  # the producer first, then the fused activations
    epilogue: tuple[Epilogue, ...]

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.head.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.nodes[-1].outputs


def epilogue_of(node: Node, graph: Graph) -> Epilogue | None:
    """The epilogue equivalent to activation `node`, or None when it cannot be fused."""
    dtype = graph.types[node.outputs[0]].dtype
    # On int8/uint8 (after QLinearConv/QLinearMatMul) a Relu or Clip is a clamp of the stored integer.
    integer_clamp = node.op in ("Relu", "Clip") and dtype in (DType.INT8, DType.UINT8)
    if node.op not in FUSABLE_ACTIVATIONS or (dtype is not DType.FLOAT32 and not integer_clamp):
        return None
    if node.op == "Clip":
        low, high = float(node.attr("min", -3.4028234663852886e38)), float(node.attr("max", 3.4028234663852886e38))
        for index, name in enumerate(node.inputs[1:3], start=1):
            if not name:
                continue
            if name not in graph.constants:
                return None
            value = float(graph.constants[name].reshape(-1)[0])
            low, high = (value, high) if index == 1 else (low, value)
        return Epilogue("Clip", alpha=low, beta=high)
    return epilogue_from_attributes(node)


def kernel_units(graph: Graph, assignment: Mapping[str, str]) -> tuple[Unit, ...]:
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    absorbed: set[str] = set()
    units = []
    for node in graph.nodes:
        if node.name in absorbed:
            continue
        chain, epilogue = [node], []
        definition = op_def(node.op)
        while definition is not None and definition.fusable_epilogue and len(chain[-1].outputs) == 1:
            produced = chain[-1].outputs[0]
            readers = consumers.get(produced, [])
            if produced in outputs or len(readers) != 1:
                break
            reader = readers[0]
            if reader.inputs[0] != produced or assignment[reader.name] != assignment[node.name]:
                break
            fused = epilogue_of(reader, graph)
            if fused is None:
                break
            chain.append(reader)
            epilogue.append(fused)
            absorbed.add(reader.name)
        units.append(Unit(tuple(chain), tuple(epilogue)))
    return tuple(units)


def op_instance(unit: Unit, graph: Graph) -> OpInstance:
    return OpInstance.of(unit.head, graph, unit.epilogue, outputs=unit.nodes[-1].outputs)
