"""Which Concats of a placed program are views: decided once, by the kernel choice stage
(hetgen/partition/choices.py), which then prices each as nothing (its group's time 0) and leaves it
out of the program's units; lowering plans one buffer for its output, with each input a range of
it (hetgen/lower/views.py), so the inputs' producers write there and nothing copies.

The layout half of the rule is the kernel table's (hetgen/spec/concat_view.py: every input a
contiguous, aligned range of the output, computed by the graph, the output not the caller's). The
placement half is here: the Concat runs on a CPU controller whose arena is one plain plan (not a
bare-metal core, whose arena may be shared with an accelerator, hetgen/lower/shared_arena.py; not
a root with memory banks, hetgen/lower/banks.py), and each input's buffer (a dropped reshape's
source, hetgen/spec/alias.py) is written by a kernel unit on that same controller and is not the
caller's. A buffer lives at one place only, so one that two Concats read is a range of the first
one's output (in program order); the second copies it. Nested Concats (DenseNet's dense blocks:
each layer's Concat reads the previous one's output) nest: the innermost buffers are ranges of
ranges, and a whole block is one buffer.

The search priced each Concat as a copy (where its producers go decides whether it can be a view);
the placement it returns is priced with the views, as the program runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hetgen.ir import Graph
from hetgen.ops.base import Kernel
from hetgen.partition.liveness import live_bytes
from hetgen.partition.units import Unit
from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.model import Platform, Role
from hetgen.platform.tuning import memory_mode
from hetgen.spec.concat_view import concat_slabs


@dataclass(frozen=True)
class View:
    """An operator that runs nothing: each of `parts` (a buffer, the byte offset of its range in
    `holder`) lives in `holder`'s bytes; `target`: the controller it runs on. A Concat's holder is
    its output, its parts its inputs, each written there by its producer; a Split's or a Slice's
    holder is its input, its parts its outputs, each read there by its readers
    (hetgen/partition/split_views.py)."""

    node: str  # the operator's node name
    target: str
    holder: str
    parts: tuple[tuple[str, int], ...]
    kind: str = "concat view"  # how explain names its variant
    # a Split some of whose outputs are not views (a Concat view's input, a reader on another
    # device): the kernel it still runs, copying those only; None: it runs nothing
    kernel: Kernel | None = None


class PlacedProgram:
    """What the view rules (`concat_views` here, hetgen/partition/split_views.py) ask of a placed
    program: its units in execution order (`units`, reading `unit_inputs`, run as `kernels`, each
    unit's node on the target `assignment` names), the targets by path, the buffers that are the
    caller's, the target whose unit writes each buffer and those whose units read it, and, under
    `memory: lean`, whether taking more views lifts a target's activation peak (`Liveness`)."""

    def __init__(
        self,
        graph: Graph,
        units: Sequence[Unit],
        unit_inputs: Sequence[tuple[str, ...]],
        assignment: Mapping[str, str],
        platform: Platform,
        kernels: Sequence[Kernel],
    ):
        self.graph, self.units, self.unit_inputs, self.assignment = graph, units, unit_inputs, assignment
        self.kernels = kernels
        self.targets = {t.path_str: t for t in platform.targets()}
        self.caller = set(graph.inputs) | set(graph.outputs) | set(graph.constants)
        self.producer: dict[str, str] = {}  # buffer -> the target of the unit writing it
        self.readers: dict[str, set[str]] = {}  # buffer -> the targets of the units reading it
        for unit, inputs in zip(units, unit_inputs):
            where = assignment[unit.head.name]
            for name in unit.outputs:
                if name:
                    self.producer[name] = where
            for name in inputs:
                if name:
                    self.readers.setdefault(name, set()).add(where)
        self.lean = memory_mode(platform) == "lean"
        self.root = platform.root.controller().path_str
        self._liveness: dict[str, Liveness] = {}  # per target, built when first asked

    def lifts_peak(self, target: str, before: Mapping[str, str], after: Mapping[str, str]) -> bool:
        """Whether, under `memory: lean`, the views `after` (buffer -> the output it is a range of)
        hold more bytes live at once on `target` than the views `before`; never under `fast`,
        which takes every view the layout and placement allow."""
        if not self.lean:
            return False
        liveness = self._liveness.get(target)
        if liveness is None:
            liveness = self._liveness[target] = Liveness(
                self.graph, self.units, self.unit_inputs, self.kernels, self.assignment, target, target == self.root
            )
        return liveness.peak(after) > liveness.peak(before)


def concat_views(program: PlacedProgram) -> tuple[View, ...]:
    """The Concat units of `program` that are views (module doc)."""
    graph = program.graph
    inside: dict[str, str] = {}  # buffer -> the output of the view it is a range of
    views = []
    for unit, inputs in zip(program.units, program.unit_inputs):
        if len(unit.nodes) != 1 or unit.head.op != "Concat":
            continue
        slabs = concat_slabs(unit.head, graph)
        where = program.assignment[unit.head.name]
        if slabs is None or not plain_arena(program.targets[where]):
            continue
        parts = tuple((buffer, offset) for buffer, (_, offset) in zip(inputs, slabs))
        buffers = [buffer for buffer, _ in parts]
        if (
            len(set(buffers)) != len(buffers)
            or any(b in program.caller or b in inside or program.producer.get(b) != where for b in buffers)
            or any(graph.types[b].nbytes != graph.types[name].nbytes for b, (name, _) in zip(buffers, slabs))
        ):
            continue
        taken = {**inside, **dict.fromkeys(buffers, unit.outputs[0])}
        if program.lifts_peak(where, inside, taken):
            continue  # its output's buffer, live from its first input on, would lift the target's peak
        inside = taken
        views.append(View(unit.head.name, where, unit.outputs[0], parts))
    return tuple(views)


class Liveness:
    """The activations of one target's units (in program order), each live from the unit that first
    touches it to the one that last does (hetgen/partition/prepack.py measures its memory budget
    so), and each unit's workspace at its step; on the root, not the caller's inputs and outputs.
    `peak(inside)`: the most bytes live at one unit when each buffer of `inside` (buffer -> the
    output it is a range of) is its outermost holder's bytes, that holder live over all of them (as
    hetgen/lower/views.py plans them). Each state's peak is computed once (a state is the views
    taken so far, with or without one more)."""

    def __init__(self, graph, units, unit_inputs, kernels, assignment, target: str, is_root: bool):
        caller = set(graph.inputs) | set(graph.outputs) if is_root else set()
        self.nbytes = {name: t.nbytes for name, t in graph.types.items()}
        self.touches: list[tuple[str, ...]] = []
        self.scratch: list[int] = []  # each unit's workspace, live at its step only
        for unit, inputs, kernel in zip(units, unit_inputs, kernels):
            if assignment[unit.head.name] == target:
                self.scratch.append(kernel.scratch_bytes)
                names = (*inputs, *unit.outputs)
                kept = (n for n in names if n and n not in graph.constants and n in self.nbytes and n not in caller)
                self.touches.append(tuple(dict.fromkeys(kept)))
        self._peaks: dict[frozenset, int] = {}

    def peak(self, inside: Mapping[str, str]) -> int:
        key = frozenset(inside.items())
        found = self._peaks.get(key)
        if found is None:
            found = self._peaks[key] = self._peak(inside)
        return found

    def _peak(self, inside: Mapping[str, str]) -> int:
        def holder(name: str) -> str:
            while name in inside:
                name = inside[name]
            return name

        live = live_bytes([{holder(name): None for name in names} for names in self.touches], self.nbytes)
        return max(map(sum, zip(live, self.scratch)), default=0)


def plain_arena(target) -> bool:
    """A CPU controller whose arena is planned as one plain liveness plan."""
    return target.role is Role.CONTROLLER and not target.memories and not is_bare_metal(target)
