"""Splits and Slices that can be views: where each output of a Split (or a Slice) is one contiguous
range of its input's bytes, its readers can read that range where the input already is, and the
Split runs nothing (hetgen/partition/split_views.py decides, once the placement is known, which do;
the cost model prices those as nothing and lowering plans each output as a range of the input's
buffer, hetgen/lower/views.py).

This module holds the placement-independent half of that rule, the layout, as the operator states
it (`OpDef.ranges`: Split's and Slice's own views of their input, hetgen/ops/split.py, slice.py):
an output is a contiguous range exactly when every dimension after the sliced one is whole and
every one before it has one element in the output (a channel split at batch 1, NCHW, a Slice with
step 1 along it). A Split or Slice reads the layout every non-blocked kernel reads: a blocked
NCHW[V]c producer is reordered back to NCHW under the tensor's own name
(hetgen/partition/blocked_layout.py), so the ranges are of that NCHW buffer, wherever the block
boundaries fall. Each range must start on the memory planner's alignment, which every planned
buffer keeps (hetgen/lower/verify.py checks it), so its readers see a buffer like any other.
"""

from __future__ import annotations

from hetgen.ir import Graph, Node
from hetgen.ops.base import OpInstance, Unsupported
from hetgen.ops.registry import op_def
from hetgen.spec.concat_view import concat_slabs
from hetgen.spec.tiling import ALIGNMENT  # the arena's alignment (hetgen/lower/memory.py plans to it)


def split_slabs(node: Node, graph: Graph) -> tuple[tuple[str, int], ...] | None:
    """Each output of Split or Slice `node` with the byte offset of its range in input 0, when every
    output is a contiguous, aligned, non-empty range of it, distinct from the others, and not a
    model output (the caller's buffer), and the input is computed by the graph (not a model input
    or a constant); else None: the node copies."""
    definition = op_def(node.op, node.opset)
    if definition is None or definition.ranges is None or not node.inputs or not node.outputs:
        return None
    source = node.inputs[0]
    if not source or source in graph.inputs or source in graph.outputs or source in graph.constants:
        return None
    outputs = node.outputs
    if any(not name or name in graph.outputs for name in outputs) or len(set(outputs)) != len(outputs):
        return None
    try:
        offsets = definition.ranges(OpInstance.of(node, graph))
    except Unsupported:
        return None
    itemsize = graph.types[source].dtype.itemsize
    slabs = []
    for name, offset in zip(outputs, offsets):
        if offset is None or graph.types[name].nbytes == 0 or offset * itemsize % ALIGNMENT:
            return None
        slabs.append((name, offset * itemsize))
    return tuple(slabs) if len(slabs) == len(outputs) else None


def may_be_view(node: Node, graph: Graph) -> bool:
    """Whether the layout lets `node` be a view (a Concat's or a Split's), so that the kernel
    choice stage may price it as nothing: what the search's floors and re-pricing must allow for."""
    return concat_slabs(node, graph) is not None or split_slabs(node, graph) is not None
