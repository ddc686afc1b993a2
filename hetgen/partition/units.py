"""Kernel units: the nodes that become one generated C function (the kernel choice stage,
hetgen/partition/choices.py, cuts the placed graph into them once; lowering reads its units).

A unit is one node, or a node followed by activations it absorbs as an epilogue (Conv→Relu,
Gemm→Clip, Add→Relu). Which activation may be absorbed is decided once, by the kernel table's
fusion rule (hetgen/spec/fusion.py); placement decides where the chain is cut: a unit never spans
two placement groups, so each group is the kernels the cost model priced it as (on a controller,
hetgen/partition/fused.py offers every fused unit as a group of its own).

Multi-operator units (fused attention, a residual Add in a Conv's epilogue) are decided by the
kernel table too (hetgen/spec/patterns.py) and chosen by placement: a placement group on a
controller whose nodes are exactly a pattern unit's is that unit's one kernel, as the cost model
priced it; anywhere else the same operators are separate kernels. Lowering follows; it matches
nothing itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from hetgen.ir import Graph, Node
from hetgen.ops.base import Epilogue, Kernel, OpInstance
from hetgen.ops.registry import op_def
from hetgen.partition.placement import Placement
from hetgen.spec import KernelTable
from hetgen.spec.alias import alias_source
from hetgen.spec.fusion import cut_units
from hetgen.spec.patterns import FusedPattern


@dataclass(frozen=True)
class Unit:
    nodes: tuple[Node, ...]  # the producer first, then the fused activations
    epilogue: tuple[Epilogue, ...]
    pattern: FusedPattern | None = None  # a multi-operator unit of the kernel table

    @classmethod
    def of_pattern(cls, pattern: FusedPattern) -> Unit:
        return cls(pattern.nodes, pattern.epilogue, pattern)

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.head.inputs if self.pattern is None else self.pattern.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.nodes[-1].outputs

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    @property
    def is_pattern(self) -> bool:
        """A multi-operator pattern unit (hetgen/spec/patterns.py)."""
        return self.pattern is not None


def placed_patterns(
    placement: Placement, kernels: KernelTable, controllers: Collection[str]
) -> tuple[FusedPattern, ...]:
    """The pattern units `placement` formed: its groups on controllers that are exactly a pattern
    unit's nodes, and its groups elsewhere that are exactly a residual unit's (an accelerator's
    pattern table offers those: npu.yaml's conv_residual; the cost model priced them as that one
    unit, hetgen/spec/invocation.py)."""
    found = (
        (group.target in controllers, kernels.fused(group.nodes)) for group in placement.groups if len(group.nodes) > 1
    )
    return tuple(
        p
        for on_controller, p in found
        if p is not None and (p.controllers if on_controller else p.residual is not None)
    )


def placement_groups(placement: Placement) -> dict[str, int]:
    """Node name -> the index of its placement group."""
    return {name: index for index, group in enumerate(placement.groups) for name in group.nodes}


def kernel_units(
    graph: Graph, group_of: Mapping[str, int], kernels: KernelTable, patterns: Iterable[FusedPattern] = ()
) -> tuple[Unit, ...]:
    """The placed graph (nodes in execution order) cut into units, none spanning two placement
    groups (`group_of`: node -> its group, `placement_groups`); the
    `patterns` placement formed (`placed_patterns`) each one unit, emitted where its last node is
    (every input of every node in it exists by then)."""
    pattern_units = [Unit.of_pattern(p) for p in patterns]
    pattern_of = {n.name: unit for unit in pattern_units for n in unit.nodes}

    def same_group(head: Node, activation: Node) -> bool:
        together = group_of[activation.name] == group_of[head.name]
        return together and activation.name not in pattern_of

    plain = [n for n in graph.nodes if n.name not in pattern_of]
    by_head = {
        members[0].name: Unit(members, epilogue) for members, epilogue in cut_units(plain, kernels.chains, same_group)
    }
    order = {node.name: index for index, node in enumerate(graph.nodes)}
    last_of = {id(unit): max(unit.nodes, key=lambda n: order[n.name]).name for unit in pattern_units}
    units = []
    for node in graph.nodes:
        if node.name in pattern_of:
            unit = pattern_of[node.name]
            if last_of[id(unit)] == node.name:
                units.append(unit)
        elif node.name in by_head:
            units.append(by_head[node.name])
    return tuple(units)


def unit_lowering(unit: Unit) -> Callable[[OpInstance], Kernel] | None:
    """The function lowering `unit`: the pattern's kernel, else the head operator's lowering."""
    if unit.pattern is not None:
        return unit.pattern.lower
    definition = op_def(unit.head.op, unit.head.opset)
    return definition.lower if definition is not None else None


def op_instance(unit: Unit, graph: Graph) -> OpInstance:
    """The operator instance `unit` lowers: a pattern as one node reading the kernel's inputs."""
    if unit.pattern is not None:
        return unit.pattern.instance(graph)
    return OpInstance.of(unit.head, graph, unit.epilogue, outputs=unit.nodes[-1].outputs)


def ordered_nodes(graph: Graph, placement: Placement) -> tuple[list, dict[str, str]]:
    """Nodes in the placement's execution order (groups stay contiguous), and node -> target."""
    position = {node.name: index for index, node in enumerate(graph.nodes)}
    order = [name for group in placement.groups for name in sorted(group.nodes, key=position.__getitem__)]
    by_name = {node.name: node for node in graph.nodes}
    assignment = {name: group.target for group in placement.groups for name in group.nodes}
    return [by_name[name] for name in order], assignment


def placed_units(graph: Graph, placement: Placement, kernels: KernelTable, controllers) -> tuple[Unit, ...]:
    """The placed graph cut into units, in execution order, as placement priced them."""
    nodes, _ = ordered_nodes(graph, placement)
    ordered = dataclasses.replace(graph, nodes=tuple(nodes))
    patterns = placed_patterns(placement, kernels, controllers)  # the fused groups placement priced
    return kernel_units(ordered, placement_groups(placement), kernels, patterns)


def drop_aliases(units: tuple[Unit, ...], graph: Graph) -> tuple[tuple[Unit, ...], list[tuple[str, ...]]]:
    """Remove pure reshapes (hetgen/spec/alias.py); return the remaining units and each unit's
    buffer names (a dropped reshape's output read as its input)."""
    rename: dict[str, str] = {}
    kept, buffers = [], []
    for unit in units:
        head = unit.head
        source = alias_source(head, graph) if len(unit.nodes) == 1 else None
        if source is not None:
            rename[head.outputs[0]] = rename.get(source, source)
            continue
        kept.append(unit)
        buffers.append(tuple(rename.get(name, name) for name in unit.inputs))
    return tuple(kept), buffers
