"""Constant operands in the layouts the kernel choice stage took for them (hetgen/partition/prepack.py
decides which offer each unit on a CPU controller takes, and its GEMM blocks;
hetgen/partition/choices.py records the kernel with them): each taken offer's constant is added to
the graph under a name of its own, made once (the choice stage's layouts), and the unit reads it.
Nothing is decided here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from hetgen.ir import DType, Graph, TensorType
from hetgen.ops.base import Prepacked
from hetgen.partition.units import Unit


def packed_name(tensor: str, unit: Unit) -> str:
    """The name of `tensor` packed for `unit`: unique, and says where it comes from."""
    return f"{tensor}.packed_for_{unit.head.name}"


def apply_prepacked(
    graph: Graph,
    units: tuple[Unit, ...],
    unit_inputs: list[tuple[str, ...]],
    offers: Mapping[int, tuple[Prepacked, ...]],
    packed: Mapping[tuple[int, int], np.ndarray],
) -> tuple[Graph, list[tuple[str, ...]]]:
    """The graph with the packed constants added, and each unit's inputs reading them. `offers`:
    per unit index, the offers taken; `packed`: (unit index, input index) -> the packed value."""
    constants, types = dict(graph.constants), dict(graph.types)
    new_inputs = []
    for index, (unit, inputs) in enumerate(zip(units, unit_inputs)):
        inputs = list(inputs)
        for offer in offers.get(index, ()):
            value = packed[index, offer.index]
            name = packed_name(inputs[offer.index], unit)
            constants[name] = value
            types[name] = TensorType(DType.from_numpy(value.dtype), value.shape)
            inputs[offer.index] = name
        new_inputs.append(tuple(inputs))
    if len(constants) == len(graph.constants):
        return graph, new_inputs
    return dataclasses.replace(graph, constants=constants, types=types), new_inputs
