"""What a kernel unit's spec and tiling are computed from, as keys, so that the repeated layers of a
big graph are lowered and tiled once (a 5,000-node graph repeats a few dozen distinct units).

A unit's **shape key** holds, for each of its nodes, everything of it but its name and its tensors'
names: the operator, the attributes (by `repr`, which tells 1 from 1.0 and 0.0 from -0.0, where `==`
does not), which inputs and outputs are omitted, each tensor's type and whether an input is a
constant; and the unit's epilogue (by `repr`, as the attributes). A unit's tiling is a function of
it: `tiling.unit_op` names the tensors by position and keeps constants as flags (but for the
values of one-element constants, a quantized operator's scales: tiles.py adds them to the key).

A unit's spec also reads its constants' values (a Clip's bounds, a Pow's exponent, a Reshape's
shape), so its **spec key** adds, per constant, its dtype, shape and first bytes; units with equal
spec keys share a spec only when their constants are also equal byte for byte (`same_constants`).
Distinct weights differ in their first bytes, so that check runs only between copies of one value.

What is left out is names: lowerings do not put node or tensor names into a kernel, only into the
message of a refusal (hetgen/ops/layernorm.py names its input), so only specs with a kernel are
shared, and a refusal is lowered for each unit in its own words. The tiling stage relies on the
same property (it lowers each tile's instance as a node named "unit").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetgen.ir import Graph, Node
from hetgen.ops.base import Epilogue

OMITTED = ""  # an omitted optional input or output
PREFIX_ELEMENTS = 16  # a constant's first elements, in its spec key


class UnitKeys:
    """The keys of one graph's units, each node's part computed once."""

    def __init__(self, graph: Graph):
        self.graph = graph
        # Each node's part of a key, as a small number: equal parts, equal numbers (-1: no key).
        self._shape: dict[str, int] = {}
        self._values: dict[str, int] = {}
        self._numbers: dict[tuple, int] = {}

    def shape_key(self, members: Sequence[Node], epilogue: Sequence[Epilogue]) -> tuple | None:
        """The unit's shape key; None when an attribute holds an array (whose repr is abridged)."""
        parts = []
        for node in members:
            part = self._shape.get(node.name)
            if part is None:
                shape = self._node_shape(node)
                part = self._shape[node.name] = -1 if shape is None else self._number(shape)
            if part < 0:
                return None
            parts.append(part)
        return (tuple(parts), repr(tuple(epilogue)) if epilogue else "")

    def spec_key(self, members: Sequence[Node], epilogue: Sequence[Epilogue]) -> tuple | None:
        shape = self.shape_key(members, epilogue)
        if shape is None:
            return None
        return (shape, tuple(self._node_values(node) for node in members))

    def constants(self, members: Sequence[Node]) -> tuple[np.ndarray, ...]:
        """The unit's constant inputs, in order: what `same_constants` compares."""
        constants = self.graph.constants
        return tuple(constants[name] for node in members for name in node.inputs if name in constants)

    def _node_shape(self, node: Node) -> tuple | None:
        if any(isinstance(value, np.ndarray) for _, value in node.attrs):
            return None
        types, constants = self.graph.types, self.graph.constants
        inputs = tuple((types.get(name), name in constants) if name else OMITTED for name in node.inputs)
        outputs = tuple(types.get(name) if name else OMITTED for name in node.outputs)
        return (node.op, node.opset, repr(node.attrs), inputs, outputs)

    def _node_values(self, node: Node) -> int:
        part = self._values.get(node.name)
        if part is None:
            constants = self.graph.constants
            values = tuple(_fingerprint(constants[name]) for name in node.inputs if name in constants)
            part = self._values[node.name] = self._number(values)
        return part

    def _number(self, part: tuple) -> int:
        return self._numbers.setdefault(part, len(self._numbers))


def _fingerprint(value: np.ndarray) -> tuple:
    return (value.dtype.str, value.shape, value.flat[:PREFIX_ELEMENTS].tobytes())


def same_constants(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    """Byte for byte (dtypes and shapes are in the spec key already)."""
    return len(a) == len(b) and all(x is y or x.tobytes() == y.tobytes() for x, y in zip(a, b))
