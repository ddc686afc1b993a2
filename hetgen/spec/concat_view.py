"""Concatenations that can be views: where each input of a Concat is one contiguous range of its
output's bytes, the input's producer can write straight into that range and the Concat runs
nothing (hetgen/partition/concat_views.py decides, once the placement is known, which Concats do;
the cost model prices those as nothing and lowering plans one buffer for the whole output).

This module holds the placement-independent half of that rule, the layout: a Concat's inputs are
contiguous ranges of its output exactly when the product of the output's dimensions before the
axis is 1 (a channel Concat at batch 1, NCHW; the layout every Concat reads: a blocked NCHW[V]c
producer is reordered back to NCHW under the tensor's own name, hetgen/partition/blocked_layout.py,
and that reorder writes the range). Each range must start on the memory planner's alignment,
which every planned buffer keeps (hetgen/lower/verify.py checks it), so the producer's kernel sees
a buffer like any other.
"""

from __future__ import annotations

import math

from hetgen.ir import Graph, Node
from hetgen.spec.tiling import ALIGNMENT  # the arena's alignment (hetgen/lower/memory.py plans to it)


def concat_slabs(node: Node, graph: Graph) -> tuple[tuple[str, int], ...] | None:
    """Each input of Concat `node` with the byte offset of its range in the output, when every input
    is a contiguous, aligned, non-empty range of it, distinct from the others, computed by the graph
    (not a model input, a constant or a model output) and the output is not a model output (the
    caller's buffer); else None: the Concat copies."""
    if node.op != "Concat" or len(node.outputs) != 1 or not node.inputs:
        return None
    output = node.outputs[0]
    out_type = graph.types.get(output)
    if out_type is None or output in graph.outputs or out_type.rank == 0:
        return None
    axis = int(node.attr("axis", 0))
    axis = axis + out_type.rank if axis < 0 else axis
    if math.prod(out_type.shape[:axis]) != 1:
        return None
    fixed = set(graph.inputs) | set(graph.outputs) | set(graph.constants)
    if len(set(node.inputs)) != len(node.inputs) or any(not name or name in fixed for name in node.inputs):
        return None
    slabs, offset = [], 0
    for name in node.inputs:
        nbytes = graph.types[name].nbytes
        if nbytes == 0 or offset % ALIGNMENT:
            return None
        slabs.append((name, offset))
        offset += nbytes
    return tuple(slabs) if offset == out_type.nbytes else None
