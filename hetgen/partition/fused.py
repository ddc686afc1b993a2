"""The kernel table's multi-operator units (hetgen/spec/patterns.py) as placement groups.

Each controller (a CPU: accelerators tile one operator at a time) is offered each pattern unit as
one candidate group, priced as its one kernel; the search weighs it against the same operators as
separate groups, and lowering emits the fused kernel exactly for a group that is a pattern unit. A
residual unit whose added tensor another place computes would wait for it there, so such a group is
cut back into its operators, on the same controller, before the placement is priced and assembled.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetgen.ir import Graph
from hetgen.partition.patterns import Match, Matches, _claims_everything, pattern_table
from hetgen.platform.model import Platform, Role
from hetgen.spec import KernelTable
from hetgen.spec.patterns import residual_waits


def with_fused(matches: Matches, graph: Graph, platform: Platform, kernels: KernelTable) -> Matches:
    """The pattern tables' matches and the kernel table's pattern units on every controller."""
    known = set(matches.matches)
    fused = [m for m in fused_matches(graph, platform, kernels) if m not in known]
    return Matches((*matches.matches, *fused), matches.rejections) if fused else matches


def fused_matches(graph: Graph, platform: Platform, kernels: KernelTable) -> list[Match]:
    """One match per controller and pattern unit, at the efficiency of the controller's own
    catch-all pattern (the one its operators are priced at one by one)."""
    if not kernels.patterns:
        return []
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    matches = []
    for target in platform.root.walk():
        if target.role is not Role.CONTROLLER:
            continue
        catch_all = next((p for p in pattern_table(target) if _claims_everything(p)), None)
        efficiency = float(catch_all.efficiency) if catch_all is not None else 1.0
        for pattern in kernels.patterns.values():
            nodes = tuple(sorted(index[name] for name in pattern.names))
            matches.append(Match(target.path_str, pattern.kind, nodes, efficiency))
    return matches


def legal_fusions(space, candidates, chosen: Sequence[int]) -> list[int]:
    """`chosen` with each residual group that would wait for another place's result replaced by its
    operators as single groups on the same controller."""
    by_id = {c.id: c for c in candidates}
    nodes = space.graph.nodes
    place_of_tensor = {
        name: space.paths[c.loc] for cid in chosen for c in (by_id[cid],) for n in c.nodes for name in nodes[n].outputs
    }
    kept: list[int] = []
    single: dict[tuple[int, int], int] | None = None
    for cid in chosen:
        c = by_id[cid]
        pattern = space.kernels.fused(nodes[n].name for n in c.nodes) if len(c.nodes) > 1 else None
        if pattern is None or not residual_waits(pattern, space.paths[c.loc], place_of_tensor):
            kept.append(cid)
            continue
        if single is None:
            single = {(o.nodes[0], o.loc): o.id for o in candidates if len(o.nodes) == 1}
        kept.extend(single[(n, c.loc)] for n in c.nodes)
    return kept
