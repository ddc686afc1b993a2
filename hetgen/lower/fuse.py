"""Kernel units: the nodes that become one generated C function.

A unit is one node, or a node followed by activations it absorbs as an epilogue (Conv→Relu,
Gemm→Clip, Add→Relu). Which activation may be absorbed is decided once, by the kernel table's
fusion rule (hetgen/spec/fusion.py); lowering adds only that a unit never spans two targets.

On the targets named in `fusing` (CPU controllers: accelerators tile one operator at a time), two
multi-operator patterns become one unit each:

- attention, MatMul → scale → mask → Softmax → MatMul with the Transposes around it
  (`fuse_attention.py`, kernel `hetgen/ops/attention.py`);
- a residual Add after a Conv: Conv → Add(other) (→ activations), where the Add is the Conv's only
  reader, `other` has exactly the Conv's output shape and is computed on the same controller (a
  device's result would make the Conv wait for that device instead of overlapping it). The unit
  runs where the Conv ran when `other` is ready by then, else where the Add ran if nothing in
  between waits for a device. The Conv's kernel reads `other` as an extra input (its fourth, after
  an omitted bias if need be) and adds it in its epilogue, before the activations, so the sum is
  written once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from hetgen.ir import DType, Graph, Node
from hetgen.lower.fuse_attention import match_attention
from hetgen.ops import attention
from hetgen.ops.base import Epilogue, Kernel, OpInstance
from hetgen.ops.registry import op_def
from hetgen.spec import KernelTable
from hetgen.spec.fusion import cut_units


@dataclass(frozen=True)
class Unit:
    nodes: tuple[Node, ...]  # the producer first, then the fused activations
    epilogue: tuple[Epilogue, ...]
    # A multi-operator pattern's kernel inputs (attention, residual Add); None: the head's inputs.
    fused_inputs: tuple[str, ...] | None = None
    attention: attention.AttentionSpec | None = None  # set on a fused attention unit

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.head.inputs if self.fused_inputs is None else self.fused_inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.nodes[-1].outputs

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    @property
    def is_pattern(self) -> bool:
        """A multi-operator pattern, lowered here rather than taken from the kernel table."""
        return self.fused_inputs is not None


def kernel_units(
    graph: Graph, assignment: Mapping[str, str], kernels: KernelTable, fusing: Collection[str] = ()
) -> tuple[Unit, ...]:
    """The placed graph (nodes in execution order) cut into units, none spanning two targets;
    multi-operator patterns only on `fusing` targets."""
    patterns = attention_units(graph, assignment, fusing)
    pattern_of = {n.name: unit for unit in patterns for n in unit.nodes}

    def same_target(head: Node, activation: Node) -> bool:
        return assignment[activation.name] == assignment[head.name] and activation.name not in pattern_of

    plain = [n for n in graph.nodes if n.name not in pattern_of]
    cut = cut_units(plain, kernels.chains, same_target)
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    position = {name: index for index, node in enumerate(graph.nodes) for name in node.outputs if name}
    order = {node.name: index for index, node in enumerate(graph.nodes)}
    producer_target = {name: assignment[node.name] for node in graph.nodes for name in node.outputs if name}
    unit_of_head = {members[0].name: index for index, (members, _) in enumerate(cut)}
    merged: set[int] = set()  # cut units absorbed into a Conv's residual epilogue
    by_head: dict[str, Unit] = {}
    for index, (members, epilogue) in enumerate(cut):
        if index in merged:
            continue
        node = members[0]
        target = assignment[node.name]
        residual = add = None
        if len(members) == 1 and target in fusing and len(node.outputs) == 1:
            readers = consumers.get(node.outputs[0], [])
            claimable = readers and readers[0].name in unit_of_head and unit_of_head[readers[0].name] not in merged
            if node.outputs[0] not in outputs and len(readers) == 1 and claimable:
                add = readers[0]  # (when both of an Add's inputs are Convs, the first claims it)
                if assignment[add.name] == target:
                    residual = residual_input(node, add, graph)
        if residual is not None and producer_target.get(residual, target) != target:
            residual = None  # another device's result: the Conv would wait for it and not overlap
        emit_at = node.name
        if residual is not None and position.get(residual, -1) > order[node.name]:
            # `other` comes after the Conv in the program: the unit runs where the Add ran, which
            # is the same program when nothing in between waits for another device
            between = graph.nodes[order[node.name] + 1 : order[add.name]]
            if all(_local(n, target, assignment, producer_target) for n in between):
                emit_at = add.name
            else:
                residual = None
        if residual is None:
            by_head[node.name] = Unit(members, epilogue)
            continue
        add_index = unit_of_head[add.name]
        add_members, add_epilogue = cut[add_index]
        merged.add(add_index)
        bias = node.inputs[2] if len(node.inputs) > 2 else ""
        by_head[emit_at] = Unit((node, *add_members), add_epilogue, (*node.inputs[:2], bias, residual))
    units, done = [], set()
    for node in graph.nodes:
        if node.name in pattern_of:
            unit = pattern_of[node.name]
            # emitted where its last node was: every input of every node in it exists by then
            if id(unit) not in done and node is max(unit.nodes, key=lambda n: order[n.name]):
                done.add(id(unit))
                units.append(unit)
        elif node.name in by_head:
            units.append(by_head[node.name])
    return tuple(units)


def residual_input(conv: Node, add: Node, graph: Graph) -> str | None:
    """The tensor a Conv's reader `add` adds to the Conv's output, when the Conv can add it itself."""
    if conv.op != "Conv" or add.op != "Add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    other = add.inputs[1] if add.inputs[0] == conv.outputs[0] else add.inputs[0]
    shapes = {graph.types[name].shape for name in (other, conv.outputs[0], add.outputs[0])}
    dtypes = {graph.types[name].dtype for name in (other, conv.outputs[0], add.outputs[0])}
    if len(shapes) != 1 or dtypes != {DType.FLOAT32} or other in graph.constants:
        return None
    return other


def _local(node: Node, target: str, assignment: Mapping[str, str], producer_target: Mapping[str, str]) -> bool:
    """`node` runs on `target` and reads nothing another device computes (so it never waits)."""
    return assignment[node.name] == target and all(producer_target.get(t, target) == target for t in node.inputs if t)


def attention_units(graph: Graph, assignment: Mapping[str, str], fusing: Collection[str]) -> list[Unit]:
    """The attention patterns (hetgen/lower/fuse_attention.py) on `fusing` targets, one unit each."""
    units, claimed = [], set()
    for node in graph.nodes:
        if node.op != "Softmax" or assignment.get(node.name) not in fusing:
            continue
        match = match_attention(graph, assignment, node)
        if match is None or claimed & {n.name for n in match.nodes}:
            continue
        claimed |= {n.name for n in match.nodes}
        units.append(Unit(match.nodes, (), match.inputs, match.spec))
    return units


def unit_lowering(unit: Unit) -> Callable[[OpInstance], Kernel] | None:
    """The function lowering `unit`: the pattern's kernel, else the head operator's lowering."""
    if unit.attention is not None:
        spec = unit.attention
        return lambda op: attention.lower(spec, op)
    definition = op_def(unit.head.op)
    return definition.lower if definition is not None else None


def op_instance(unit: Unit, graph: Graph) -> OpInstance:
    """The operator instance `unit` lowers: a pattern as one node reading the kernel's inputs."""
    if unit.fused_inputs is None:
        return OpInstance.of(unit.head, graph, unit.epilogue, outputs=unit.nodes[-1].outputs)
    head = replace(unit.head, inputs=unit.fused_inputs, outputs=unit.outputs)
    return OpInstance.of(head, graph, unit.epilogue, outputs=unit.nodes[-1].outputs)
