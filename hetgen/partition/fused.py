"""How placement prices and keeps the kernel table's fused units (hetgen/spec) it placed as groups.

Every candidate group is one of the table's units (`hetgen/partition/patterns.py`: each target's
pattern table admits some): a head with the activations its epilogue absorbs (Conv→Relu, Gemm→Clip,
Add→Relu), fused attention, a residual Add in a Conv. On a controller such a group is priced as its
one kernel (one launch, the fused kernel's own work: `group_work`), and lowering emits one kernel per
group, never one spanning two groups, so the search weighs the fused kernel against the same
operators as separate kernels and the program is the one it priced. A residual unit whose added
tensor another place computes would wait for it there, so such a group on a controller is cut back
into the Conv and the Add's unit, on the same controller, before the placement is priced and
assembled (`legal_fusions`). (A tiled accelerator's residual unit DMAs the residual in like any
input, priced by its tile plan.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hetgen.ir import Node
from hetgen.platform.model import Role, Target
from hetgen.spec import KernelTable
from hetgen.spec.patterns import residual_waits


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
