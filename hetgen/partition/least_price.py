"""The least price each candidate group on a CPU controller can take under any kernel choice
(hetgen/partition/choices.py): never more than its reported price in any placement, so the least
makespan at these prices is a floor under every placement's reported total.

Which kernel a unit runs depends on the rest of the placement (the target's memory budget decides
Winograd's weights, the activations live at its step its GEMM blocks: hetgen/partition/prepack.py),
so no one placement's choice bounds another's. But every kernel a unit may be given is known
(prepack.py `every_choice`): each is priced here as `choices.group_price` prices the group, the
table's price too (a group whose kernels stay the table's keeps it), and the least is kept.

On one CPU the placement's makespan is the serial sum of its groups, which the search minimises
exactly; at these prices its optimum is such a floor, and a placement whose reported total meets it
is the least there is (hetgen/partition/reported.py). A blocked layout is a choice of runs across
groups, with reorders at their edges: it is not enumerated, so a CPU that takes one has no floor.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from hetgen.partition.blocked_layout import DEFAULT_LAYOUT, block_width
from hetgen.partition.choices import Choices, UnitChoice, group_price
from hetgen.partition.concat_views import View
from hetgen.partition.placement import Group
from hetgen.partition.prepack import UnitLowerings, every_choice
from hetgen.partition.space import Candidate, SearchSpace
from hetgen.partition.units import Unit
from hetgen.platform.model import Role
from hetgen.spec.alias import alias_source
from hetgen.spec.fusion import cut_units
from hetgen.spec.split_view import may_be_view

# No floor where a group's units have more combinations of kernels than this (each is priced).
MAX_COMBINATIONS = 512


def least_priced(space: SearchSpace, candidates: tuple[Candidate, ...], lowerings: UnitLowerings):
    """`candidates` with each CPU controller group at the least price any kernel choice gives it, or
    None where one has no such price (a blocked layout, too many combinations)."""
    layout = space.platform.options.get("layout") or DEFAULT_LAYOUT
    priced = []
    for c in candidates:
        target = space.targets[c.loc]
        if target.role is Role.CONTROLLER:
            if block_width(target, layout) is not None:
                return None
            least = _least_us(space, c, lowerings)
            if least is None:
                return None
            if least < c.compute_us:
                c = replace(c, compute_us=least)
        priced.append(c)
    return tuple(priced)


def _least_us(space: SearchSpace, c: Candidate, lowerings: UnitLowerings) -> float | None:
    """The least price of candidate `c` (on a CPU controller) under any kernel choice."""
    kernels, platform = space.kernels, space.platform
    target, nodes = space.targets[c.loc], [space.graph.nodes[n] for n in c.nodes]
    # a Concat, Split or Slice that may be a view (hetgen/partition/concat_views.py, split_views.py)
    # may run nothing: its least price
    viewable = {node.name for node in nodes if may_be_view(node, space.graph)}
    views = tuple(View(name, target.path_str, "", ()) for name in sorted(viewable))
    units = [u for u in _group_units(nodes, space) if u.names[0] not in viewable or len(u.nodes) > 1]
    if any(kernels.unit(unit.names).kernel is None for unit in units):
        return c.compute_us  # the program cannot be generated: choose() re-prices nothing
    options = [every_choice(unit, kernels.unit(unit.names).kernel, target, platform, lowerings) for unit in units]
    if math.prod(len(found) for found in options) > MAX_COMBINATIONS:
        return None
    group = Group("least", target.path_str, tuple(node.name for node in nodes), c.label, c.compute_us)
    group = replace(group, efficiency=c.efficiency)
    scale = space.calibration.scale_for(target)
    least = c.compute_us
    for chosen in itertools.product(*options):
        choices = Choices(
            tuple(UnitChoice(unit, target.path_str, unit.inputs, kernel, "") for unit, kernel in zip(units, chosen)),
            views=views,
        )
        price = group_price(group, choices, platform, kernels, scale)
        if price is not None:
            least = min(least, price)
    return least


def _group_units(nodes, space: SearchSpace) -> list[Unit]:
    """The kernel units `choose` cuts a group on a controller into (hetgen/partition/units.py
    `kernel_units`: a pattern unit where the group is exactly one, else the fusion rule within the
    group), less the pure reshapes it drops."""
    kernels = space.kernels
    pattern = kernels.fused(node.name for node in nodes) if len(nodes) > 1 else None
    if pattern is not None:
        return [Unit.of_pattern(pattern)]
    cut = cut_units(nodes, kernels.chains, lambda head, activation: True)
    units = [Unit(members, epilogue) for members, epilogue in cut]
    return [u for u in units if len(u.nodes) > 1 or alias_source(u.head, space.graph) is None]
