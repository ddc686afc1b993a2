"""Which Splits and Slices of a placed program are views: decided once, by the kernel choice stage
(hetgen/partition/choices.py), after the Concat views (hetgen/partition/concat_views.py), which it
then prices as nothing and leaves out of the program's units; lowering plans each output as a range
of the input's buffer (hetgen/lower/views.py), so the readers read the input where it is and
nothing copies.

The layout half of the rule is the kernel table's (hetgen/spec/split_view.py: every output a
contiguous, aligned range of the input, the input computed by the graph, no output the caller's).
The placement half is here, as for a Concat: the Split runs on a CPU controller with a plain arena,
its input's buffer (a dropped reshape's source) is written by a kernel unit on that controller and
is not the caller's, and every reader of its outputs runs there too (a reader on another device
gets the output copied over its link, so that output stays a copy). An output that a Concat view
holds as an input stays a copy too: it has to be in the Concat's buffer, and the Split is the
kernel that writes it there (the Concat views are decided first, where a producer's write is what
saves the copy). A Split with some outputs views and others copies runs a kernel that copies only
the latter (`View.kernel`, `kept_copies`): ShuffleNetV2's Split copies
the passed-through half into the Concat's buffer, and the branch reads its half in place. Under
`memory: lean` a view is taken only
where the target's activation peak does not grow (the input's buffer then lives until its outputs'
last reader: `Liveness`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from hetgen.ir import Graph, Node
from hetgen.ops._copy import Copy, copy_kernel
from hetgen.ops.base import Kernel
from hetgen.partition.concat_views import PlacedProgram, View, plain_arena
from hetgen.spec.split_view import split_slabs


def split_views(program: PlacedProgram, concats: Sequence[View] = ()) -> tuple[View, ...]:
    """The Split and Slice units of `program` that are views, given the Concat views `concats`
    already taken (module doc)."""
    graph = program.graph
    inside = {part: view.holder for view in concats for part, _ in view.parts}
    views = []
    for unit, inputs in zip(program.units, program.unit_inputs):
        slabs = split_slabs(unit.head, graph) if len(unit.nodes) == 1 else None
        where = program.assignment[unit.head.name]
        if slabs is None or not plain_arena(program.targets[where]):
            continue
        source = inputs[0]
        if (
            source in program.caller
            or program.producer.get(source) != where
            or graph.types[source].nbytes != graph.types[unit.head.inputs[0]].nbytes
        ):
            continue
        # an output a Concat view holds, or one read on another device, stays a copy the Split writes
        kept = {name for name, _ in slabs if name in inside or program.readers.get(name, {where}) != {where}}
        parts = tuple((name, offset) for name, offset in slabs if name not in kept)
        if not parts:
            continue
        taken = {**inside, **{name: source for name, _ in parts}}
        if program.lifts_peak(where, inside, taken):
            continue  # its input's buffer, live until its outputs' last reader, would lift the target's peak
        inside = taken
        kernel = kept_copies(unit.head, graph, slabs, kept) if kept else None
        views.append(View(unit.head.name, where, source, parts, f"{unit.head.op.lower()} view", kernel))
    return tuple(views)


def kept_copies(node: Node, graph: Graph, slabs: tuple[tuple[str, int], ...], kept: Collection[str]) -> Kernel:
    """The kernel of Split `node` (its outputs' ranges `slabs`) where only the outputs `kept` are
    copied and the others are views: each kept output its contiguous range of the input, copied as
    one run (the Split's own kernel would also write the views' ranges onto themselves)."""
    itemsize = graph.types[node.inputs[0]].dtype.itemsize
    first_out = len(node.inputs)
    copies = [
        Copy(0, first_out + k, (graph.types[name].nbytes // itemsize,), (1,), (1,), src_offset=offset // itemsize)
        for k, (name, offset) in enumerate(slabs)
        if name in kept
    ]
    return copy_kernel(copies, itemsize)
