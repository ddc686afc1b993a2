"""How work is cut into invocations of an accelerator: one rule that lowering follows and the cost
model prices, so the program that runs is the program that was priced.

An accelerator with a bounded local memory runs each kernel unit (a placement group: an operator
and the activations fused into it) as its own invocation, which loads that unit's weights into
local memory and computes. Activations stay in the device's memory from the first use to the last,
as they would in one invocation: copied in once, and out only for a reader elsewhere (those copies
are the placement's transfers). Only weights are loaded per invocation, so an accelerator never
holds more than one unit's weights. Whether consecutive work would fit together is never asked
after placement, so no fallback changes the program behind the placement's back.
"""

from __future__ import annotations

from collections.abc import Iterable

from hetgen.ir import Graph, Node
from hetgen.platform.model import Role, Target


def one_unit_per_invocation(target: Target) -> bool:
    return target.role is Role.ACCELERATOR and target.memory_bytes is not None


def weight_bytes(graph: Graph, nodes: Iterable[Node]) -> int:
    """Bytes of constants one invocation running `nodes` loads into local memory (each once)."""
    loaded = {name for node in nodes for name in node.inputs if name and name in graph.constants}
    return sum(graph.types[name].nbytes for name in loaded)
