"""Kernel units: the nodes that become one generated C function.

A unit is one node, or a node followed by activations it absorbs as an epilogue (Conv→Relu,
Gemm→Clip, Add→Relu). Which activation may be absorbed is decided once, by the kernel table's
fusion rule (hetgen/spec/fusion.py); lowering adds only that a unit never spans two targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetgen.ir import Graph, Node
from hetgen.ops.base import Epilogue
from hetgen.spec import KernelTable
from hetgen.spec.fusion import cut_units


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

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)


def kernel_units(graph: Graph, assignment: Mapping[str, str], kernels: KernelTable) -> tuple[Unit, ...]:
    """The placed graph (nodes in execution order) cut into units, none spanning two targets."""

    def same_target(head: Node, activation: Node) -> bool:
        return assignment[activation.name] == assignment[head.name]

    return tuple(Unit(nodes, epilogue) for nodes, epilogue in cut_units(graph.nodes, kernels.chains, same_target))
