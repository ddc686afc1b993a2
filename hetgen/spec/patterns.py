"""Multi-operator units, decided once with the kernel table: the patterns a CPU controller runs as one
kernel when placement puts all of their nodes there together, as one group.

- attention, MatMul → scale → mask → Softmax → MatMul with the Transposes around it
  (`attention.py` matches it; `hetgen/ops/attention.py` is its kernel);
- a residual Add after a Conv: Conv → Add(other) (→ the Add's activations), where the Add is the
  Conv's only reader and `other` has exactly the Conv's output shape, is float32 and is not a
  constant. The Conv's kernel reads `other` as an extra input (its fourth, after an omitted bias if
  need be) and adds it in its epilogue, before the activations, so the sum is written once. An Add
  whose two inputs are both such Convs is claimed once, by the first in graph order.
  Its int8 form is QLinearConv → QLinearAdd(other): `other` and the Conv's output of one int8 or
  uint8 type, and every scale and zero point of the Add (and the Conv's output ones) constant
  scalars; the kernel reads `other`, its scale and zero point and the sum's after its 9 inputs and
  does what the QLinearAdd does to the Conv's requantized output (the operator's `residual` trait
  says which Add and where: hetgen/ops/base.py `ResidualAdd`).

Each pattern gets its `KernelSpec` like any unit (`pattern_specs`), so the cost model prices a group
that is exactly a pattern's nodes as that one kernel (one launch, its own work and scratch), and
lowering emits that kernel for such a group and the separate operators otherwise. What the table
cannot know, where `other` is computed, placement checks (`residual_waits`): a device's result
would make the fused Conv wait for that device instead of overlapping it, so such a group is cut
back into its operators before it is priced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from hetgen.errors import InternalError
from hetgen.ir import DType, Graph, Node
from hetgen.ops import attention
from hetgen.ops.base import Epilogue, Kernel, OpInstance
from hetgen.ops.registry import op_def
from hetgen.platform.units import NAMED_UNITS
from hetgen.spec.attention import PatternGraph, match_attention

ATTENTION, RESIDUAL = "attention", "conv_residual"  # the placement group labels of the two patterns
EPILOGUE = "epilogue"  # the third kind of multi-operator unit: a head and its activations (fusion.py)
UNIT_KINDS = (EPILOGUE, ATTENTION, RESIDUAL)  # every multi-operator unit the kernel table forms is one of these
if {ATTENTION, RESIDUAL} != set(NAMED_UNITS):  # the names a pattern table may give (`unit:`), one list
    raise InternalError(f"unit kinds named but not formed, or the reverse: {set(NAMED_UNITS) ^ {ATTENTION, RESIDUAL}}")


@dataclass(frozen=True)
class FusedPattern:
    """One multi-operator unit the table offers: its nodes, as one kernel reading `inputs`."""

    kind: str  # ATTENTION or RESIDUAL: the group label placement gives it
    nodes: tuple[Node, ...]  # the kernel's head first (its function is named after it)
    epilogue: tuple[Epilogue, ...]  # activations applied after the pattern (a residual Add's)
    inputs: tuple[str, ...]  # the kernel's inputs
    attention: attention.AttentionSpec | None = None
    residual: str | None = None  # the tensor a residual unit adds (its Add's other input)
    # A controller may run it as its one kernel. Not a quantized residual unit: its kernel adds in a
    # second pass over the stored outputs (hetgen/ops/qlinear.py), which on a CPU saves nothing the
    # separate, vectorised QLinearAdd kernel does not; on a tiled accelerator it saves the Add's
    # launch and a round trip of the Conv's output, and keeps the block's layers in one cascade.
    controllers: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def residual_operand(self) -> int | None:
        """The kernel input a residual unit reads its residual from (by position: it may also be x)."""
        if self.residual is None:
            return None
        return op_def(self.head.op, self.head.opset).residual.input

    @property
    def outputs(self) -> tuple[str, ...]:
        """A pattern writes only what its last node writes: the sink of its nodes."""
        return self.nodes[-1].outputs

    def instance(self, graph: Graph) -> OpInstance:
        """The operator instance its kernel lowers: the head reading the kernel's inputs."""
        head = replace(self.head, inputs=self.inputs, outputs=self.outputs)
        return OpInstance.of(head, graph, self.epilogue, outputs=self.outputs)

    def lower(self, instance: OpInstance) -> Kernel:
        if self.attention is not None:
            return attention.lower(self.attention, instance)
        return op_def(self.head.op, self.head.opset).lower(instance)


def fused_patterns(graph: Graph, chains: Mapping[str, tuple[tuple[str, Epilogue], ...]]) -> tuple[FusedPattern, ...]:
    """Every pattern unit of `graph`, none sharing a node with another; in the order of their heads
    in the graph."""
    patterns = attention_patterns(graph)
    claimed = {name for pattern in patterns for name in pattern.names}
    for pattern in residual_patterns(graph, chains):
        if claimed.isdisjoint(pattern.names):
            claimed.update(pattern.names)
            patterns.append(pattern)
    order = {node.name: index for index, node in enumerate(graph.nodes)}
    return tuple(sorted(patterns, key=lambda p: order[p.head.name]))


def attention_patterns(graph: Graph) -> list[FusedPattern]:
    """The attention patterns (`attention.py`), one unit each."""
    softmaxes = [node for node in graph.nodes if node.op == "Softmax"]
    if not softmaxes:
        return []
    together = {node.name: "" for node in graph.nodes}  # the pattern as if all of it ran in one place
    questions = PatternGraph(graph, together)
    patterns, claimed = [], set()
    for node in softmaxes:
        match = match_attention(graph, together, node, questions)
        if match is None or claimed & {n.name for n in match.nodes}:
            continue
        claimed |= {n.name for n in match.nodes}
        patterns.append(FusedPattern(ATTENTION, match.nodes, (), match.inputs, attention=match.spec))
    return patterns


def residual_patterns(graph: Graph, chains: Mapping[str, tuple[tuple[str, Epilogue], ...]]) -> list[FusedPattern]:
    """Conv → Add(other) → the Add's activations (its fusion chain), each Add claimed once; and
    their int8 form, QLinearConv → QLinearAdd."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    by_name = {node.name: node for node in graph.nodes}
    patterns, claimed = [], set()
    for conv in graph.nodes:
        definition = op_def(conv.op, conv.opset)
        fused = definition.residual if definition is not None else None
        if fused is None or len(conv.outputs) != 1 or conv.outputs[0] in outputs:
            continue
        readers = consumers.get(conv.outputs[0], [])
        if len(readers) != 1 or readers[0].name in claimed:
            continue
        add = readers[0]
        operands = residual_operands(conv, add, graph)
        if operands is None:
            continue
        claimed.add(add.name)
        chain = chains.get(add.name, ())
        nodes = (conv, add, *(by_name[name] for name, _ in chain))
        own = (*conv.inputs[: fused.input], *("",) * (fused.input - len(conv.inputs)))  # omitted ones as ""
        inputs = (*own, *operands)
        epilogue = tuple(e for _, e in chain)
        controllers = not fused.quantized
        patterns.append(FusedPattern(RESIDUAL, nodes, epilogue, inputs, residual=operands[0], controllers=controllers))
    return patterns


def residual_operands(conv: Node, add: Node, graph: Graph) -> tuple[str, ...] | None:
    """The inputs a Conv's kernel reads (after its own) to do its reader `add` itself, the residual
    first: the Add's other operand; for a QLinearAdd also that operand's scale and zero point and
    the sum's. None when the kernel cannot do that Add."""
    definition = op_def(conv.op, conv.opset)
    fused = definition.residual if definition is not None else None
    if fused is None or add.op != fused.add:
        return None
    if not fused.quantized:
        other = residual_input(conv, add, graph)
        return None if other is None else (other,)
    return _quantized_residual(conv, add, graph)


def residual_input(conv: Node, add: Node, graph: Graph) -> str | None:
    """The tensor a Conv's reader `add` adds to the Conv's output, when the Conv can add it itself."""
    if conv.op != "Conv" or add.op != "Add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    other = add.inputs[1] if add.inputs[0] == conv.outputs[0] else add.inputs[0]
    names = (other, conv.outputs[0], add.outputs[0])
    if any(name not in graph.types for name in names) or other in graph.constants:
        return None
    shapes = {graph.types[name].shape for name in names}
    dtypes = {graph.types[name].dtype for name in names}
    if len(shapes) != 1 or dtypes != {DType.FLOAT32}:
        return None
    return other


QLINEAR_ADD_OPERANDS = ((0, 1, 2), (3, 4, 5))  # QLinearAdd's (value, scale, zero point) of A and B
QLINEAR_ADD_SUM = (6, 7)  # and the sum's scale and zero point
QLINEAR_CONV_OUTPUT = (6, 7)  # QLinearConv's output scale and zero point


def _quantized_residual(conv: Node, add: Node, graph: Graph) -> tuple[str, ...] | None:
    """QLinearAdd's other operand with its scale and zero point, and the sum's scale and zero point,
    where the QLinearConv's kernel can requantize and add in place: one int8 or uint8 type and one
    shape for the operand, the Conv's output and the sum, and every scale and zero point involved
    a constant scalar (the kernel's sum is baked with them, as the QLinearAdd kernel's is)."""
    if len(add.inputs) != 8 or len(conv.inputs) < 8:
        return None
    sides = [side for side in QLINEAR_ADD_OPERANDS if add.inputs[side[0]] == conv.outputs[0]]
    if len(sides) != 1:  # the Conv's output on both sides: an x + x, no residual to read
        return None
    (other,) = [side for side in QLINEAR_ADD_OPERANDS if side != sides[0]]
    operands = (*(add.inputs[i] for i in other), *(add.inputs[i] for i in QLINEAR_ADD_SUM))
    names = (operands[0], conv.outputs[0], add.outputs[0])
    if any(name not in graph.types for name in names) or operands[0] in graph.constants:
        return None
    if len({graph.types[name].shape for name in names}) != 1:
        return None
    if {graph.types[name].dtype for name in names} not in ({DType.INT8}, {DType.UINT8}):
        return None
    scalars = (*operands[1:], *(conv.inputs[i] for i in QLINEAR_CONV_OUTPUT))
    if not all(name in graph.constants and graph.constants[name].size == 1 for name in scalars):
        return None
    return operands


def residual_waits(pattern: FusedPattern, place: str, place_of_tensor: Mapping[str, str]) -> bool:
    """Whether a residual unit placed at `place` would wait for another place's result: its residual
    is computed elsewhere (`place_of_tensor`: where each computed tensor is produced; the model's
    inputs and constants are everywhere)."""
    return pattern.residual is not None and place_of_tensor.get(pattern.residual, place) != place
