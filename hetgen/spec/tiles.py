"""The tilings a placement may ask for, planned once with the kernel table: for each accelerator that
runs one unit per invocation (its SRAM is bounded: hetgen/spec/invocation.py), each unit whose head
operator its pattern table can start a group with or carry in one (hetgen/spec/tiling.py decides
the tiling), and each residual unit (a Conv with its residual Add, `patterns.py`) on each such
accelerator whose pattern table names that unit (`unit: conv_residual`). The `fits_memory` predicate, the cost model
and lowering all read these plans.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hetgen.ir import Graph
from hetgen.platform.model import Platform, Target
from hetgen.spec.invocation import one_unit_per_invocation, tile_rates
from hetgen.spec.patterns import RESIDUAL, FusedPattern
from hetgen.spec.signature import UnitKeys
from hetgen.spec.table import KernelSpec
from hetgen.spec.tile_shapes import scalar_of
from hetgen.spec.tiling import TilePlan, Unfit, unit_plan

ANY_OP = "*"


def pattern_ops(target: Target) -> frozenset[str] | None:
    """Operators the target's pattern table names in chains (None: any operator)."""
    ops: set[str] = set()
    for pattern in target.kind.patterns:
        for step in pattern.chain:
            if ANY_OP in step.ops:
                return None
            ops.update(step.ops)
    return frozenset(ops)


def tile_plans(
    graph: Graph, platform: Platform, units: Mapping[tuple[str, ...], KernelSpec], keys: UnitKeys | None = None
) -> dict[tuple[str, tuple[str, ...]], TilePlan | Unfit]:
    """(target path, unit node names) -> the unit's tiling on that target, or why none fits.

    A unit's tiling is a function of its shape key (signature.py) and the target, so units with
    one key share one plan, planned once."""
    keys = keys if keys is not None else UnitKeys(graph)
    by_name = {node.name: node for node in graph.nodes}
    plans: dict[tuple[str, tuple[str, ...]], TilePlan | Unfit] = {}
    for target in platform.targets():
        if not one_unit_per_invocation(target):
            continue
        ops = pattern_ops(target)
        planned: dict[tuple, TilePlan | Unfit] = {}  # shape key -> the plan on this target
        for names, spec in units.items():
            if ops is not None and spec.op not in ops:
                continue
            nodes = [by_name[name] for name in names]
            if not _typed(nodes, graph):
                continue
            key = keys.shape_key(nodes, spec.epilogue)
            if key is not None:  # and the one-value constants its tiles carry (a quantized Add's scales)
                key = (key, tuple(scalar_of(graph, name) for name in nodes[0].inputs))
            plan = planned.get(key) if key is not None else None
            if plan is None:
                rates = tile_rates(target, 1.0, nodes)  # plans are chosen at efficiency 1: a device property
                plan = unit_plan(nodes, graph, spec.epilogue, target.memory_bytes, rates)
                if key is not None:
                    planned[key] = plan
            plans[(target.path_str, names)] = plan
    return plans


def residual_plans(
    graph: Graph, platform: Platform, patterns: Iterable[FusedPattern]
) -> dict[tuple[str, tuple[str, ...]], TilePlan | Unfit]:
    """(target path, residual unit's node names) -> its tiling on each tiled accelerator whose
    pattern table names the unit (`unit: conv_residual`): the Conv's tiles, each also loading the
    residual's block of its output rows and channels (no halo) and adding it before the store."""
    residuals = [p for p in patterns if p.residual is not None and _typed(p.nodes, graph)]
    plans: dict[tuple[str, tuple[str, ...]], TilePlan | Unfit] = {}
    for target in platform.targets() if residuals else ():
        if not one_unit_per_invocation(target) or not any(p.unit == RESIDUAL for p in target.kind.patterns):
            continue
        for pattern in residuals:
            rates = tile_rates(target, 1.0, pattern.nodes)
            plan = unit_plan(pattern.nodes, graph, pattern.epilogue, target.memory_bytes, rates, pattern.inputs)
            plans[(target.path_str, pattern.names)] = plan
    return plans


def _typed(nodes, graph: Graph) -> bool:
    """Tiles are blocks of tensors: a unit that reads or writes a sequence has none."""
    names = [n for n in (*nodes[0].inputs, *nodes[-1].outputs) if n]
    return all(name in graph.types for name in names)
