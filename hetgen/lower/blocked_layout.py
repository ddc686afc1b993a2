"""The blocked channel layout (NCHW[V]c) as the kernel choice stage recorded it
(hetgen/partition/blocked_layout.py decides which units run blocked and where the reorders go;
hetgen/partition/choices.py records it with each kernel): the graph gets the blocked tensors and
packed weights, each blocked unit its recorded kernel, and each recorded reorder a unit of its own.

Every tensor a blocked Conv, pool or Add writes is blocked, named `<tensor>.nchw<V>c`; a reorder
NCHW -> NCHW[V]c runs before the first blocked reader of a tensor no blocked unit writes, and one
back runs right after the producer of a blocked tensor something reads as NCHW, under the tensor's
own name. Nothing is decided here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from hetgen.ir import DType, Graph, Node, TensorType
from hetgen.ops import conv_nchwc
from hetgen.ops.base import Kernel
from hetgen.partition.blocked_layout import BLOCKED_INPUTS, BlockedUnit, Reorder, blocked_name
from hetgen.partition.units import Unit


@dataclasses.dataclass(frozen=True)
class Blocked:
    """The result: the graph (with packed weights and blocked tensors), units, kernels, each unit's
    inputs, and the assignment extended to the reorder units."""

    graph: Graph
    units: tuple[Unit, ...]
    kernels: tuple[Kernel, ...]
    unit_inputs: list[tuple[str, ...]]
    assignment: dict[str, str]


def block_layout(
    graph: Graph,
    units: tuple[Unit, ...],
    kernels: tuple[Kernel, ...],
    unit_inputs: list[tuple[str, ...]],
    assignment: Mapping[str, str],
    blocked: Mapping[int, BlockedUnit],
) -> Blocked:
    """Run the recorded units blocked, with the recorded reorders (module doc)."""
    if not blocked:
        return Blocked(graph, units, kernels, unit_inputs, dict(assignment))
    assignment = dict(assignment)
    constants, types = dict(graph.constants), dict(graph.types)
    taken_names = {node.name for node in graph.nodes}
    new_units, new_kernels, new_inputs = [], [], []

    def add_reorder(reorder: Reorder, target: str) -> None:
        tensor, v = reorder.tensor, reorder.v
        node_name = _fresh(f"{tensor}_to_{f'nchw{v}c' if reorder.to_blocked else 'nchw'}", taken_names)
        src, dst = (tensor, blocked_name(tensor, v)) if reorder.to_blocked else (blocked_name(tensor, v), tensor)
        node = Node(node_name, "ReorderNCHWc" if reorder.to_blocked else "ReorderNCHW", (src,), (dst,))
        assignment[node_name] = target  # where the blocked Conv runs: the blocked tensor lives there
        new_units.append(Unit((node,), ()))
        new_kernels.append(reorder.kernel)
        new_inputs.append((src,))
        if reorder.to_blocked:
            types[blocked_name(tensor, v)] = TensorType(
                DType.FLOAT32, conv_nchwc.blocked_shape(_shape(graph, tensor), v)
            )

    for index, (unit, kernel, inputs) in enumerate(zip(units, kernels, unit_inputs)):
        unit_target = assignment[unit.head.name]
        choice = blocked.get(index)
        if choice is None:
            new_units.append(unit)
            new_kernels.append(kernel)
            new_inputs.append(inputs)
            continue
        v, kind = choice.v, choice.kind
        for reorder in choice.reorders_in:
            add_reorder(reorder, unit_target)
        renamed = list(inputs)
        for position in BLOCKED_INPUTS[kind]:  # read blocked (reordered in where recorded)
            if position < len(renamed) and renamed[position]:
                renamed[position] = blocked_name(renamed[position], v)
        if kind == "global":  # reads blocked, writes NCHW
            new_units.append(unit)
            new_kernels.append(choice.kernel)
            new_inputs.append(tuple(renamed))
            continue
        if kind == "conv":
            _pack_conv(unit, renamed, constants, types, graph, v)
        output = unit.outputs[0]
        types[blocked_name(output, v)] = TensorType(DType.FLOAT32, conv_nchwc.blocked_shape(_shape(graph, output), v))
        last = dataclasses.replace(unit.nodes[-1], outputs=(blocked_name(output, v),))
        new_units.append(dataclasses.replace(unit, nodes=(*unit.nodes[:-1], last)))
        new_kernels.append(choice.kernel)
        new_inputs.append(tuple(renamed))
        for reorder in choice.reorders_out:
            add_reorder(reorder, unit_target)
    new_graph = dataclasses.replace(graph, constants=constants, types=types)
    return Blocked(new_graph, tuple(new_units), tuple(new_kernels), new_inputs, assignment)


def _pack_conv(unit: Unit, renamed: list[str], constants: dict, types: dict, graph: Graph, v: int) -> None:
    """A blocked Conv's weights and bias packed for it, `renamed` naming them."""
    model_inputs = unit.inputs  # the model's weights and bias (`inputs` may name prepacked ones)
    weights = f"{model_inputs[1]}.nchw{v}c_for_{unit.head.name}"
    constants[weights] = conv_nchwc.pack_weights(graph.constants[model_inputs[1]], v)
    types[weights] = TensorType(DType.FLOAT32, constants[weights].shape)
    renamed[1] = weights
    if len(model_inputs) > 2 and model_inputs[2]:
        bias = f"{model_inputs[2]}.nchw{v}c_for_{unit.head.name}"
        constants[bias] = conv_nchwc.pack_bias(graph.constants[model_inputs[2]], v)
        types[bias] = TensorType(DType.FLOAT32, constants[bias].shape)
        renamed[2] = bias


def _shape(graph: Graph, tensor: str) -> tuple[int, ...]:
    return tuple(graph.types[tensor].shape)


def _fresh(name: str, taken: set[str]) -> str:
    """A node name (a C identifier suffix) not yet used."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    candidate, count = base, 1
    while candidate in taken:
        count += 1
        candidate = f"{base}_{count}"
    taken.add(candidate)
    return candidate
