"""Match every target's pattern table over the graph: what each device *could* run.

A pattern is a chain of steps; it matches a node sequence where each next node is the single
consumer of everything the previous node produces (and that node's outputs are not graph outputs),
so a fused group only ever exposes its last node's outputs. That makes every group convex and every
partition of the graph into matches executable in order of the groups' last nodes.

Controllers claim every operator through the implicit "*" pattern, plus their own fused patterns.
Matching never decides anything: the search in `hetgen.partition.search` does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hetgen.ir import Graph
from hetgen.partition.predicates import MatchView, rejection
from hetgen.platform.model import Pattern, PatternStep, Platform, Role, Target
from hetgen.platform.predicates import validate_where
from hetgen.spec import KernelTable

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
    return not rest and ANY_OP in step.ops and not step.optional and not pattern.where


def pattern_table(target: Target) -> tuple[Pattern, ...]:
    """A target's patterns; a controller claims every operator, through its own "*" pattern
    (keeping its label and efficiency) or else the implicit FALLBACK."""
    table = target.kind.patterns
    if target.role is Role.CONTROLLER and not any(_claims_everything(p) for p in table):
        return (FALLBACK, *table)
    return table


def chain_successors(graph: Graph) -> tuple[int | None, ...]:
    """For each node, the node a chain may continue with: the single consumer of all its outputs."""
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    readers: dict[str, set[int]] = {}
    for node in graph.nodes:
        for name in node.inputs:
            if name:
                readers.setdefault(name, set()).add(index[node.name])
    graph_outputs = set(graph.outputs)
    successors: list[int | None] = []
    for node in graph.nodes:
        outputs = [name for name in node.outputs if name]
        consumers: set[int] = set()
        for name in outputs:
            consumers |= readers.get(name, set())
        exposed = any(name in graph_outputs for name in outputs)
        successors.append(next(iter(consumers)) if len(consumers) == 1 and not exposed else None)
    return tuple(successors)


def _accepts(step: PatternStep, op: str) -> bool:
    return ANY_OP in step.ops or op in step.ops


def chains(steps: Sequence[PatternStep], start: int, ops: Sequence[str], successors) -> Iterator[tuple[int, ...]]:
    """Every node chain starting at `start` that the steps match (optional steps may be skipped)."""

    def extend(k: int, last: int | None, acc: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if k == len(steps):
            if acc:
                yield acc
            return
        step = steps[k]
        if step.optional:
            yield from extend(k + 1, last, acc)
        following = start if last is None else successors[last]
        if following is not None and _accepts(step, ops[following]):
            yield from extend(k + 1, following, (*acc, following))

    yield from dict.fromkeys(extend(0, None, ()))


def match_patterns(graph: Graph, platform: Platform, kernels: KernelTable) -> Matches:
    """Run every runnable target's pattern table over the graph (its kernel table: `kernels`)."""
    successors = chain_successors(graph)
    ops = [node.op for node in graph.nodes]
    matches: dict[Match, None] = {}
    rejections: list[Rejection] = []
    for target in runnable_targets(platform):
        table = pattern_table(target)
        validate_where(table, target.kind)
        path = target.path_str
        for pattern in table:
            first_ops = _leading_ops(pattern.chain)
            for start, op in enumerate(ops):
                if first_ops is not None and op not in first_ops:
                    continue
                for nodes in chains(pattern.chain, start, ops, successors):
                    reason = None  # a pattern without predicates takes every match
                    if pattern.where:
                        view = MatchView(tuple(graph.nodes[i] for i in nodes), graph, target, kernels)
                        reason = rejection(pattern, view)
                    if reason is None:
                        matches[Match(path, pattern.label, nodes, float(pattern.efficiency))] = None
                    else:
                        rejections.append(Rejection(path, pattern.label, nodes, reason))
    return Matches(tuple(matches), tuple(rejections))


def _leading_ops(chain: Sequence[PatternStep]) -> frozenset[str] | None:
    """Operators a match of `chain` can start with; None when any operator can."""
    ops: set[str] = set()
    for step in chain:
        if ANY_OP in step.ops:
            return None
        ops.update(step.ops)
        if not step.optional:
            return frozenset(ops)
    return frozenset(ops)
