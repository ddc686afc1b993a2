"""Is the placement the search returns the fastest there is, under the makespan it reports?

The search (hetgen/partition/exact.py) minimises the serial sum of group and copy times; the
placement is priced at its makespan, with devices running concurrently (hetgen/spec/timeline.py).
An optimum of the one need not be an optimum of the other, so "exact" is claimed only where it is
proven for the makespan:

- **one device**: where every candidate group runs on one target, nothing runs at once, and the
  makespan is the serial sum the search minimised exactly;
- **every placement priced**: where the graph's candidate groups cover it in at most
  `EXHAUSTIVE_PLACEMENTS` ways, each is priced at its makespan and the least is kept;
- **nothing can overlap**: where every tensor is read only by the next node (a strict chain),
  every placement runs one step at a time and its makespan is its serial sum, which the search
  minimised exactly;
- **the bound is met**: the makespan equals the lower bound of hetgen/partition/bound.py.

Otherwise the placement carries that bound, and `explain` prints how far it may be from the
optimum ("within 12.3 % of the bound").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from hetgen.partition.assemble import assemble, chosen_makespan, makespan_floor
from hetgen.partition.bound import placement_bound
from hetgen.partition.placement import Placement
from hetgen.partition.space import Candidate, SearchSpace

EXHAUSTIVE_PLACEMENTS = 256  # each priced at its makespan (about 0.3 ms each for a small graph)
EXHAUSTIVE_NODES = 24  # larger graphs have more placements than that whenever two devices can run them


def judged(space: SearchSpace, candidates: tuple[Candidate, ...], pins: Mapping, placement: Placement) -> Placement:
    """`placement` with `optimal` and `bound_us` set, or replaced by a faster one where every
    placement can be priced."""
    if placement.exact and len({c.loc for c in candidates}) == 1:  # one device: nothing runs at once
        return replace(placement, searched_us=placement.total_us, optimal=True, bound_us=placement.total_us)
    covers = (
        every_cover(space, candidates, EXHAUSTIVE_PLACEMENTS) if len(space.graph.nodes) <= EXHAUSTIVE_NODES else None
    )
    if covers is not None:
        best_us, best = _least(space, candidates, covers, placement.total_us)
        note = f"every one of {len(covers)} placements priced at its makespan"
        if best_us < placement.total_us * (1 - 1e-9):
            faster = assemble(space, candidates, best, mode=placement.mode, exact=placement.exact, pins=pins)
            note = f"{note}; the least is used"
            placement = replace(faster, search_note="; ".join(filter(None, (placement.search_note, note))))
        else:
            placement = replace(placement, search_note="; ".join(filter(None, (placement.search_note, note))))
        return replace(placement, searched_us=placement.total_us, optimal=True, bound_us=placement.total_us)
    if placement.exact and _strict_chain(space):
        return replace(placement, searched_us=placement.total_us, optimal=True, bound_us=placement.total_us)
    bound = min(placement_bound(space, candidates), placement.total_us)
    met = placement.total_us <= bound * (1 + 1e-9)
    return replace(placement, searched_us=placement.total_us, optimal=met, bound_us=bound)


def _least(space, candidates, covers: list[list[int]], known_us: float) -> tuple[float, list[int]]:
    """The least makespan among `covers` (and one cover that has it; known_us, the placement's
    own, where none is less). A cover whose busiest target alone works longer than the best so far
    cannot beat it and is not priced (`makespan_floor`)."""
    best_us, best = known_us, []
    for floor, cover in sorted(((makespan_floor(candidates, cover), cover) for cover in covers), key=lambda fc: fc[0]):
        if floor >= best_us:
            break
        us = chosen_makespan(space, candidates, cover)
        if us < best_us:
            best_us, best = us, cover
    return best_us, best


def every_cover(space: SearchSpace, candidates: tuple[Candidate, ...], limit: int) -> list[list[int]] | None:
    """Every way the candidates cover the graph's nodes, each node in one group, as candidate ids;
    None where there are more than `limit`."""
    starts: dict[int, list[Candidate]] = {}
    for c in candidates:
        starts.setdefault(c.nodes[0], []).append(c)
    count = len(space.graph.nodes)
    found: list[list[int]] = []
    # depth first over the first uncovered node, with an explicit stack: (covered, chosen)
    stack: list[tuple[frozenset, tuple[int, ...]]] = [(frozenset(), ())]
    while stack:
        covered, chosen = stack.pop()
        free = next((n for n in range(count) if n not in covered), None)
        if free is None:
            found.append(list(chosen))
            if len(found) > limit:
                return None
            continue
        for c in starts.get(free, ()):
            if covered.isdisjoint(c.nodes):
                stack.append((covered | set(c.nodes), (*chosen, c.id)))
    return found


def _strict_chain(space: SearchSpace) -> bool:
    """Whether every node reads only its predecessor's output (and constants), and that output
    only it reads: then no two steps of any placement can run at once."""
    nodes = space.graph.nodes
    producer = {out: i for i, node in enumerate(nodes) for out in node.outputs if out}
    readers: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in set(node.inputs):
            if not name or space.graph.is_constant(name):
                continue
            readers[name] = readers.get(name, 0) + 1
            if producer.get(name, -1) != i - 1:
                return False
    return all(readers.get(out, 0) <= 1 for node in nodes for out in node.outputs if out)
