"""How work is cut into invocations of an accelerator: one rule that lowering follows and the cost
model prices, so the program that runs is the program that was priced.

An accelerator with a bounded local memory runs each kernel unit (a placement group: an operator
and the activations fused into it) as its own invocation: its inputs are DMA'd in from its
controller's memory, its weights are loaded, it computes, and its outputs are DMA'd back. Its
controller (the co-processor, or the root where there is none) keeps what passes between two
invocations. Whether consecutive work would fit together is never asked after placement, so no
fallback changes the program behind the placement's back.
"""

from __future__ import annotations

from collections.abc import Iterable

from hetgen.ir import Graph, Node
from hetgen.platform.model import Role, Target


def one_unit_per_invocation(target: Target) -> bool:
    return target.role is Role.ACCELERATOR and target.memory_bytes is not None


def invocation_bytes(graph: Graph, nodes: Iterable[Node]) -> tuple[int, int]:
    """(weight bytes loaded, bytes copied between controller and device) of one invocation running `nodes`."""
    nodes = list(nodes)
    produced = {name for node in nodes for name in node.outputs if name}
    weights: dict[str, int] = {}
    copied: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            if not name or name in produced:
                continue
            into = weights if name in graph.constants else copied
            into[name] = graph.types[name].nbytes
    for name in nodes[-1].outputs:
        if name:
            copied[name] = graph.types[name].nbytes
    return sum(weights.values()), sum(copied.values())
