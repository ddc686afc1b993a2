"""The kernel table's fused units (hetgen/spec) as placement groups on CPU controllers.

Each controller (a CPU: accelerators tile one operator at a time and have their own patterns) is
offered, besides its pattern table's one-operator groups, every unit the kernel table fuses into one
kernel: each head with the activations its epilogue absorbs (Conv→Relu, Gemm→Clip, Add→Relu; every
prefix of its fusion chain, `hetgen/spec/fusion.py`) and each multi-operator unit (fused attention,
a residual Add in a Conv: `hetgen/spec/patterns.py`). Such a group is priced as its one kernel (one
launch, the fused kernel's own work: `group_work`), and lowering emits one kernel per group, never
one spanning two groups, so the search weighs the fused kernel against the same operators as
separate kernels and the program is the one it priced. A residual unit whose added tensor another
place computes would wait for it there, so such a group is cut back into the Conv and the Add's
unit, on the same controller, before the placement is priced and assembled. (A tiled accelerator
offers the residual unit through its own pattern table: `residual: true`, priced by its tile plan.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hetgen.ir import Graph, Node
from hetgen.partition.patterns import Match, Matches, _claims_everything, pattern_table
from hetgen.platform.model import Platform, Role, Target
from hetgen.spec import KernelTable
from hetgen.spec.patterns import residual_waits


def with_fused(matches: Matches, graph: Graph, platform: Platform, kernels: KernelTable) -> Matches:
    """The pattern tables' matches and the kernel table's fused units on every controller (a unit a
    controller's own pattern already offers keeps that pattern's label and efficiency)."""
    known = {(m.target, m.nodes) for m in matches.matches}
    fused = [m for m in fused_matches(graph, platform, kernels) if (m.target, m.nodes) not in known]
    return Matches((*matches.matches, *fused), matches.rejections) if fused else matches


def fused_matches(graph: Graph, platform: Platform, kernels: KernelTable) -> list[Match]:
    """One match per controller and fused unit, at the label and efficiency of the controller's
    catch-all pattern (the one its operators are priced at one by one); a multi-operator unit is
    labelled with its kind."""
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    chains = epilogue_units(graph, kernels)
    if not chains and not kernels.patterns:
        return []
    matches = []
    for target in platform.root.walk():
        if target.role is not Role.CONTROLLER:
            continue
        catch_all = next((p for p in pattern_table(target) if _claims_everything(p)), None)
        efficiency = float(catch_all.efficiency) if catch_all is not None else 1.0
        label = catch_all.label if catch_all is not None else "*"
        for names in chains:
            matches.append(Match(target.path_str, label, tuple(index[name] for name in names), efficiency))
        for pattern in kernels.patterns.values():
            nodes = tuple(sorted(index[name] for name in pattern.names))
            matches.append(Match(target.path_str, pattern.kind, nodes, efficiency))
    return matches


def epilogue_units(graph: Graph, kernels: KernelTable) -> list[tuple[str, ...]]:
    """Every unit of a head and at least one activation its epilogue absorbs, in graph order, that
    the table lowered (one it refuses stays separate operators)."""
    units = []
    for node in graph.nodes:
        names = [node.name]
        for name, _ in kernels.chains.get(node.name, ()):
            names.append(name)
            spec = kernels.units.get(tuple(names))
            if spec is None or spec.kernel is None:
                break
            units.append(tuple(names))
    return units


def group_work(kernels: KernelTable, target: Target, nodes: Iterable[Node]) -> tuple[float, float]:
    """A group's (flops, bytes): on a controller, a group that is one fused unit of the table does
    the fused kernel's work (lowering emits exactly that kernel); elsewhere the table's group work."""
    nodes = tuple(nodes)
    if target.role is Role.CONTROLLER and len(nodes) > 1:
        spec = kernels.units.get(tuple(node.name for node in nodes))
        if spec is not None and spec.kernel is not None:
            return spec.flops, spec.bytes
    return kernels.group_work(nodes)


def legal_fusions(space, candidates, chosen: Sequence[int]) -> list[int]:
    """`chosen` with each residual group that would wait for another place's result replaced by the
    Conv and the Add's unit (the Add and its activations, where that is a group) on the same
    controller."""
    by_id = {c.id: c for c in candidates}
    nodes = space.graph.nodes
    place_of_tensor = {
        name: space.paths[c.loc] for cid in chosen for c in (by_id[cid],) for n in c.nodes for name in nodes[n].outputs
    }
    kept: list[int] = []
    group_at: dict[tuple[tuple[int, ...], int], int] | None = None
    for cid in chosen:
        c = by_id[cid]
        pattern = space.kernels.fused(nodes[n].name for n in c.nodes) if len(c.nodes) > 1 else None
        # An accelerator's residual unit DMAs its residual in like any input, once it is there: the
        # timeline prices that wait, and its operators alone may have no group there to fall back to.
        on_controller = space.targets[c.loc].role is Role.CONTROLLER
        if pattern is None or not on_controller or not residual_waits(pattern, space.paths[c.loc], place_of_tensor):
            kept.append(cid)
            continue
        if group_at is None:
            group_at = {(o.nodes, o.loc): o.id for o in candidates}
        conv, *add = c.nodes  # graph order: the Conv, its Add, the Add's activations
        kept.append(group_at[((conv,), c.loc)])
        add_unit = group_at.get((tuple(add), c.loc))
        kept.extend([add_unit] if add_unit is not None else [group_at[((n,), c.loc)] for n in add])
    return kept
