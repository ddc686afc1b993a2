"""Operators that only rename a buffer: lowering drops them (hetgen/lower/__init__.py: drop_aliases)
and the cost model prices them as nothing, so a tensor read through one is the tensor itself, where
it already is (one rule for both)."""

from __future__ import annotations

from hetgen.ir import Graph, Node

# Operators whose output is their input's bytes unchanged: they become a second name for the same
# buffer instead of a copy (the kernels downstream were lowered with the right shapes already).
ALIAS_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def alias_source(node: Node, graph: Graph) -> str | None:
    """The tensor `node`'s output is another name for, or None when `node` computes something.

    A reshape is an alias when its input is computed (not a model input or a constant) and its
    output is not a model output, so every buffer involved lives in an arena the planner owns.
    """
    source = node.inputs[0] if node.inputs else ""
    if (
        node.op in ALIAS_OPS
        and source
        and source not in graph.constants
        and source not in graph.inputs
        and node.outputs
        and node.outputs[0] not in graph.outputs
        and source in graph.types
        and node.outputs[0] in graph.types
        and graph.types[source].nbytes == graph.types[node.outputs[0]].nbytes
    ):
        return source
    return None
