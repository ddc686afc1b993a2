"""Multi-operator units, decided once with the kernel table: the patterns a CPU controller runs as one
kernel when placement puts all of their nodes there together, as one group.

- attention, MatMul → scale → mask → Softmax → MatMul with the Transposes around it
  (`attention.py` matches it; `hetgen/ops/attention.py` is its kernel);
- a residual Add after a Conv: Conv → Add(other) (→ the Add's activations), where the Add is the
  Conv's only reader and `other` has exactly the Conv's output shape, is float32 and is not a
  constant. The Conv's kernel reads `other` as an extra input (its fourth, after an omitted bias if
  need be) and adds it in its epilogue, before the activations, so the sum is written once. An Add
  whose two inputs are both such Convs is claimed once, by the first in graph order.

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

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    @property
    def head(self) -> Node:
        return self.nodes[0]

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
    """Conv → Add(other) → the Add's activations (its fusion chain), each Add claimed once."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    by_name = {node.name: node for node in graph.nodes}
    patterns, claimed = [], set()
    for conv in graph.nodes:
        if conv.op != "Conv" or len(conv.outputs) != 1 or conv.outputs[0] in outputs:
            continue
        readers = consumers.get(conv.outputs[0], [])
        if len(readers) != 1 or readers[0].name in claimed:
            continue
        add = readers[0]
        other = residual_input(conv, add, graph)
        if other is None:
            continue
        claimed.add(add.name)
        chain = chains.get(add.name, ())
        nodes = (conv, add, *(by_name[name] for name, _ in chain))
        bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
        inputs = (*conv.inputs[:2], bias, other)
        patterns.append(FusedPattern(RESIDUAL, nodes, tuple(e for _, e in chain), inputs, residual=other))
    return patterns


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


def residual_waits(pattern: FusedPattern, place: str, place_of_tensor: Mapping[str, str]) -> bool:
    """Whether a residual unit placed at `place` would wait for another place's result: its residual
    is computed elsewhere (`place_of_tensor`: where each computed tensor is produced; the model's
    inputs and constants are everywhere)."""
    return pattern.residual is not None and place_of_tensor.get(pattern.residual, place) != place
