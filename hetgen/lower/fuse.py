"""Kernel units: the nodes that become one generated C function.

A unit is one node, or a node followed by activations it absorbs as an epilogue (Conv→Relu,
Gemm→Clip, Add→Relu). Fusion happens only between nodes placed on the same target, only when the
producer's output has no other reader and is not a graph output, and only for activations whose
parameters are known at compile time.

On the targets named in `fusing` (CPU controllers: accelerators tile one operator at a time), two
multi-operator patterns become one unit each:

- attention, MatMul → scale → mask → Softmax → MatMul with the Transposes around it
  (`fuse_attention.py`, kernel `hetgen/ops/attention.py`);
- a residual Add after a Conv: Conv → Add(other) (→ activations), where `other` is computed before
  the Conv runs and has exactly the Conv's output shape. The Conv's kernel then reads `other` as an
  extra input (its fourth, after an omitted bias if need be) and adds it in its epilogue, before the
  activations, so the sum is written once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from hetgen.ir import DType, Graph, Node
from hetgen.lower.fuse_attention import match_attention
from hetgen.ops import attention
from hetgen.ops._activation import epilogue_from_attributes
from hetgen.ops.base import FUSABLE_ACTIVATIONS, Epilogue, Kernel, OpInstance
from hetgen.ops.registry import op_def


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


def kernel_units(graph: Graph, assignment: Mapping[str, str], fusing: Collection[str] = ()) -> tuple[Unit, ...]:
    """The graph's kernel units in execution order; multi-operator patterns only on `fusing` targets."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    absorbed: set[str] = set()
    patterns = attention_units(graph, assignment, fusing)
    pattern_of = {n.name: unit for unit in patterns for n in unit.nodes}
    done: set[int] = set()
    position = {name: index for index, node in enumerate(graph.nodes) for name in node.outputs if name}
    order = {node.name: index for index, node in enumerate(graph.nodes)}
    units = []
    for index, node in enumerate(graph.nodes):
        if node.name in pattern_of:
            unit = pattern_of[node.name]
            # emitted where its last node was: every input of every node in it exists by then
            if id(unit) not in done and node is max(unit.nodes, key=lambda n: order[n.name]):
                done.add(id(unit))
                units.append(unit)
            continue
        if node.name in absorbed:
            continue
        chain, epilogue = [node], []
        residual = None
        definition = op_def(node.op)
        while definition is not None and definition.fusable_epilogue and len(chain[-1].outputs) == 1:
            produced = chain[-1].outputs[0]
            readers = consumers.get(produced, [])
            if produced in outputs or len(readers) != 1:
                break
            reader = readers[0]
            if assignment[reader.name] != assignment[node.name] or reader.name in pattern_of:
                break
            if len(chain) == 1 and residual is None and assignment[node.name] in fusing:
                residual = residual_input(node, reader, graph, position, index)
                if residual is not None:
                    chain.append(reader)
                    absorbed.add(reader.name)
                    continue
            if reader.inputs[0] != produced:
                break
            fused = epilogue_of(reader, graph)
            if fused is None:
                break
            chain.append(reader)
            epilogue.append(fused)
            absorbed.add(reader.name)
        if residual is None:
            units.append(Unit(tuple(chain), tuple(epilogue)))
        else:
            bias = node.inputs[2] if len(node.inputs) > 2 else ""
            units.append(Unit(tuple(chain), tuple(epilogue), (*node.inputs[:2], bias, residual)))
    return tuple(units)


def residual_input(conv: Node, add: Node, graph: Graph, position: Mapping[str, int], at: int) -> str | None:
    """The tensor a Conv's reader `add` adds to the Conv's output, when the Conv can add it itself."""
    if conv.op != "Conv" or add.op != "Add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    other = add.inputs[1] if add.inputs[0] == conv.outputs[0] else add.inputs[0]
    shapes = {graph.types[name].shape for name in (other, conv.outputs[0], add.outputs[0])}
    dtypes = {graph.types[name].dtype for name in (other, conv.outputs[0], add.outputs[0])}
    if len(shapes) != 1 or dtypes != {DType.FLOAT32} or other in graph.constants:
        return None
    # computed before the Conv runs (a graph input has no producer)
    return other if position.get(other, -1) < at else None


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
    if unit.fused_inputs is None:
        return OpInstance.of(unit.head, graph, unit.epilogue, outputs=unit.nodes[-1].outputs)
    # the pattern as one node reading the kernel's inputs and writing the unit's outputs
    head = replace(unit.head, inputs=unit.fused_inputs, outputs=unit.outputs)
    return OpInstance.of(head, graph, unit.epilogue, outputs=unit.nodes[-1].outputs)
