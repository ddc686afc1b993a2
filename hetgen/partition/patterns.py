"""Every target's candidate groups: the kernel table's units its pattern table admits.

The kernel table (hetgen/spec) is the only source of units: each node alone, each head with the
activations its epilogue absorbs (every prefix of its fusion chain), and the multi-operator units
(fused attention, a Conv with its residual Add). A unit only ever exposes its last node's outputs,
so every group is convex and every partition of the graph into units runs in order of their last
nodes. One path for every target: a pattern admits the units whose operators its chain's steps
match in order (`unit:` patterns: the units of that kind), and its `where` predicates accept or
reject each (a rejection is kept for `hetgen explain`). A controller claims every operator through
its "*" pattern (its own or the implicit one) and, as that pattern, every multi-operator unit whose
C kernel the table lowered that none of its other patterns admits: it runs the table's kernels.
Matching never decides anything: the search in `hetgen.partition.search` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hetgen.ir import Graph
from hetgen.partition.predicates import MatchView, rejection
from hetgen.platform.model import Pattern, PatternStep, Platform, Role, Target
from hetgen.platform.predicates import validate_where
from hetgen.spec import KernelTable
from hetgen.spec.patterns import EPILOGUE

ANY_OP = "*"
FALLBACK = Pattern(label=ANY_OP, chain=(PatternStep((ANY_OP,)),))


@dataclass(frozen=True)
class Match:
    """A candidate group: `target` could run `nodes` (indices, graph order) as pattern `label`."""

    target: str
    label: str
    nodes: tuple[int, ...]
    efficiency: float = 1.0


@dataclass(frozen=True)
class TableUnit:
    """One of the kernel table's units, as matching sees it."""

    nodes: tuple[int, ...]  # graph order
    ops: tuple[str, ...]  # its operators, head first (what a chain's steps match)
    kind: str | None  # None: one operator; else the table's unit kind (EPILOGUE, attention, conv_residual)
    lowered: bool  # a controller can run it: its C kernel lowered (and a pattern unit's `controllers`)


@dataclass(frozen=True)
class Rejection:
    """A chain that matched a pattern's operators but that the pattern's predicates refused."""

    target: str
    label: str
    nodes: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Matches:
    matches: tuple[Match, ...]
    rejections: tuple[Rejection, ...]


def runnable_targets(platform: Platform) -> tuple[Target, ...]:
    """Targets that run operators: controllers (a composite's host included) and accelerators."""
    return tuple(t for t in platform.root.walk() if t.role in (Role.CONTROLLER, Role.ACCELERATOR))


def _claims_everything(pattern: Pattern) -> bool:
    (step, *rest) = pattern.chain or (PatternStep(()),)
    return not rest and ANY_OP in step.ops and not step.optional and not pattern.where and pattern.unit is None


def pattern_table(target: Target) -> tuple[Pattern, ...]:
    """A target's patterns; a controller claims every operator, through its own "*" pattern
    (keeping its label and efficiency) or else the implicit FALLBACK."""
    table = target.kind.patterns
    if target.role is Role.CONTROLLER and not any(_claims_everything(p) for p in table):
        return (FALLBACK, *table)
    return table


def table_units(graph: Graph, kernels: KernelTable) -> tuple[tuple[TableUnit, ...], tuple[TableUnit, ...]]:
    """(every node alone, every multi-operator unit of `kernels`), each in the table's order."""
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    ops = [node.op for node in graph.nodes]
    single = tuple(TableUnit((i,), (op,), None, True) for i, op in enumerate(ops))
    multi = []
    for names, kind, lowered in kernels.multi_units():
        in_order = tuple(index[name] for name in names)  # head first: a chain's steps match these
        multi.append(TableUnit(tuple(sorted(in_order)), tuple(ops[i] for i in in_order), kind, lowered))
    return single, tuple(multi)


def steps_match(steps: Sequence[PatternStep], ops: Sequence[str]) -> bool:
    """Whether the steps match the operators in order, each step one operator (an optional step may
    match none)."""
    reach = {0}  # how many operators the steps so far can have matched
    for step in steps:
        after = {k + 1 for k in reach if k < len(ops) and _accepts(step, ops[k])}
        reach = after | reach if step.optional else after
    return len(ops) in reach


def admits(pattern: Pattern, unit: TableUnit) -> bool:
    """Whether `pattern` names `unit`: a `unit:` pattern, the units of its kind (whose operators its
    chain matches, where it has one); a chain, the single operators and epilogue units it matches."""
    if pattern.unit is not None:
        return unit.kind == pattern.unit and (not pattern.chain or steps_match(pattern.chain, unit.ops))
    return unit.kind in (None, EPILOGUE) and steps_match(pattern.chain, unit.ops)


def _accepts(step: PatternStep, op: str) -> bool:
    return ANY_OP in step.ops or op in step.ops


def match_patterns(graph: Graph, platform: Platform, kernels: KernelTable) -> Matches:
    """Every runnable target's candidate groups: the table's units (`kernels`) its patterns admit."""
    single, multi = table_units(graph, kernels)
    units = sorted((*single, *multi), key=lambda unit: (unit.nodes[0], len(unit.nodes)))
    matches: dict[Match, None] = {}
    rejections: list[Rejection] = []
    targets = runnable_targets(platform)
    for target in targets:
        table = pattern_table(target)
        validate_where(table, target.kind)
        path = target.path_str
        for pattern in table:
            for unit in units:
                if not admits(pattern, unit):
                    continue
                reason = None  # a pattern without predicates takes every unit it admits
                if pattern.where:
                    view = MatchView(tuple(graph.nodes[i] for i in unit.nodes), graph, target, kernels)
                    reason = rejection(pattern, view)
                if reason is None:
                    matches[Match(path, pattern.label, unit.nodes, float(pattern.efficiency))] = None
                else:
                    rejections.append(Rejection(path, pattern.label, unit.nodes, reason))
    offered = {(m.target, m.nodes) for m in matches}
    for target in targets:  # a controller runs every lowered unit, as its catch-all pattern
        catch_all = next((p for p in pattern_table(target) if _claims_everything(p)), None)
        if target.role is not Role.CONTROLLER or catch_all is None:
            continue
        for unit in multi:
            if unit.lowered and (target.path_str, unit.nodes) not in offered:
                label = catch_all.label if unit.kind == EPILOGUE else unit.kind  # a pattern unit by its kind
                matches[Match(target.path_str, label, unit.nodes, float(catch_all.efficiency))] = None
    return Matches(tuple(matches), tuple(rejections))
