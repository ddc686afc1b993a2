"""A layered drawing of a DAG for the explain page, left to right (a deep model is long and narrow:
its layers run along the page's width, its branches stack down it).

`layered_layout` is the whole decision, in Python; the template only draws its boxes and paths:

- layers by longest path from the sources, so every edge runs rightwards;
- an edge that skips layers gets a dummy slot in each layer it passes, so it is routed between the
  boxes there (a skip connection is a visible curve beside the chain, never drawn through a box);
- within a layer, slots are ordered by barycentric sweeps (a few down and up passes, each slot at the
  mean order of its neighbours in the layer before), which removes most crossings;
- each slot is placed at the mean height of its neighbours where that leaves room, packed otherwise;
- a deep graph's layers wrap into bands (`band_layers` side by side, as many as fit the page's
  width), stacked down the page: an edge into the next band runs back left in a lane of its own
  between the two bands.

Deterministic (ties fall back to graph order) and bounded: dummy slots are capped at
`MAX_DUMMIES`; an edge past the cap is drawn as one direct curve (it may then cross boxes) and is
counted in `direct_edges`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_DUMMIES = 20_000
SWEEPS = 4  # down-and-up pairs of barycentric ordering
PLACE_PASSES = 4


@dataclass(frozen=True)
class Geometry:
    box_w: float = 132.0
    box_h: float = 34.0
    dummy_h: float = 6.0  # the room a routed edge takes in a layer it passes
    layer_gap: float = 46.0  # between layers (the edges' curves run here)
    slot_gap: float = 10.0  # between slots of one layer
    margin: float = 12.0
    wrap_room: float = 16.0  # left of the first column, where wrapped edges come down
    wrap_pad: float = 14.0  # above and below a band's wrap lanes
    wrap_step: float = 5.0  # between two wrap lanes


@dataclass(frozen=True)
class Layout:
    boxes: tuple[tuple[float, float], ...]  # per node: its box's top-left corner (w, h from geometry)
    edges: tuple[tuple[int, int, tuple[tuple, ...]], ...]  # (from, to, its segments: see `path`)
    layer: tuple[int, ...]
    width: float
    height: float
    direct_edges: int  # long edges drawn without routing (past MAX_DUMMIES)
    geometry: Geometry

    @staticmethod
    def path(segments: Sequence[tuple]) -> str:
        """SVG path data of an edge's segments: ("C", x1, y1, control 1, control 2, x2, y2) a curve
        through a gap between layer columns (or round a band's end), ("L", x1, y1, x2, y2) a straight
        run (through a layer column at a dummy slot's height, or along a wrap lane)."""
        first = segments[0]
        d = [f"M{first[1]:.1f},{first[2]:.1f}"]
        for seg in segments:
            if seg[0] == "C":
                d.append("C{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}".format(*seg[3:]))
            else:
                d.append(f"L{seg[3]:.1f},{seg[4]:.1f}")
        return " ".join(d)


def _mean(values: list[float], default: float) -> float:
    return sum(values) / len(values) if values else default


def layered_layout(
    n: int, edges: Sequence[tuple[int, int]], geometry: Geometry = Geometry(), band_layers: int | None = None
) -> Layout:
    """Nodes 0..n-1 given in a topological order; `edges` (from, to) with from < to in that order.
    `band_layers`: at most this many layers side by side (the rest wrap into bands below)."""
    g = geometry
    edges = sorted(set(edges))
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        if not a < b:
            raise ValueError(f"edge {a}->{b} is not in topological order")
        preds[b].append(a)
    layer = [0] * n
    for v in range(n):
        layer[v] = max((layer[p] + 1 for p in preds[v]), default=0)
    depth = max(layer, default=-1) + 1

    # slots: nodes, then dummies; each edge becomes a chain of slots one layer apart
    slot_layer = list(layer)
    up: list[list[int]] = [[] for _ in range(n)]  # slot -> neighbour slots in the layer before
    down: list[list[int]] = [[] for _ in range(n)]
    chains: list[tuple[int, int, list[int]]] = []
    dummies = direct = 0
    for a, b in edges:
        span = layer[b] - layer[a]
        chain = [a]
        if span > 1 and dummies + span - 1 <= MAX_DUMMIES:
            for k in range(layer[a] + 1, layer[b]):
                slot_layer.append(k)
                up.append([])
                down.append([])
                chain.append(len(slot_layer) - 1)
            dummies += span - 1
        elif span > 1:
            direct += 1
        chain.append(b)
        for s, t in zip(chain, chain[1:]):
            down[s].append(t)
            up[t].append(s)
        chains.append((a, b, chain))
    slots = len(slot_layer)
    layers: list[list[int]] = [[] for _ in range(depth)]
    for s in range(slots):
        layers[slot_layer[s]].append(s)

    # order within layers: barycentric sweeps, ties by the current order
    order = [0.0] * slots
    for members in layers:
        for k, s in enumerate(members):
            order[s] = k
    for _ in range(SWEEPS):
        for sweep, neighbours in ((range(1, depth), up), (range(depth - 2, -1, -1), down)):
            for k in sweep:
                members = layers[k]
                members.sort(key=lambda s: (_mean([order[t] for t in neighbours[s]], order[s]), order[s]))
                for position, s in enumerate(members):
                    order[s] = position

    # heights: each slot near the mean centre of its neighbours, in order, without overlap
    size = [g.box_h if s < n else g.dummy_h for s in range(slots)]
    centre = [0.0] * slots
    for members in layers:
        y = 0.0
        for s in members:
            centre[s] = y + size[s] / 2
            y += size[s] + g.slot_gap
    for p in range(PLACE_PASSES):
        sweep, neighbours = (range(1, depth), up) if p % 2 == 0 else (range(depth - 2, -1, -1), down)
        for k in sweep:
            members = layers[k]
            wanted = [_mean([centre[t] for t in neighbours[s]], centre[s]) for s in members]
            # packed down from the wanted tops, and packed up to them: both keep the order without
            # overlap, and so does their mean, which splits the push either way
            tops = [w - size[s] / 2 for s, w in zip(members, wanted)]
            down_packed, floor = [], -1e18
            for s, top in zip(members, tops):
                down_packed.append(max(top, floor))
                floor = down_packed[-1] + size[s] + g.slot_gap
            up_packed, ceiling = [0.0] * len(members), 1e18
            for i in range(len(members) - 1, -1, -1):
                s = members[i]
                up_packed[i] = min(tops[i], ceiling - size[s] - g.slot_gap)
                ceiling = up_packed[i]
            placed = [(a + b) / 2 for a, b in zip(down_packed, up_packed)]
            for s, top in zip(members, placed):
                centre[s] = top + size[s] / 2
    # bands: the layers cut into rows of `band_layers`, stacked down the page; an edge from one band
    # to the next leaves its band on the right, runs back left in a lane of its own below the band
    # and enters the next band from the left
    per_band = max(1, band_layers or depth)
    bands = (depth + per_band - 1) // per_band
    band_of = [k // per_band for k in range(depth)]
    low = [1e18] * bands
    high = [-1e18] * bands
    for s in range(slots):
        b = band_of[slot_layer[s]]
        low[b] = min(low[b], centre[s] - size[s] / 2)
        high[b] = max(high[b], centre[s] + size[s] / 2)
    wraps = [0] * bands  # edges leaving each band for the next
    for _, _, chain in chains:
        for s, t in zip(chain, chain[1:]):
            if band_of[slot_layer[s]] != band_of[slot_layer[t]]:
                wraps[band_of[slot_layer[s]]] += 1
    top, y = [0.0] * bands, g.margin
    for b in range(bands):
        top[b] = y
        y += high[b] - low[b] + 2 * g.wrap_pad + wraps[b] * g.wrap_step
    height = y - 2 * g.wrap_pad + g.margin if bands else 2 * g.margin
    x0 = g.margin + g.wrap_room
    x = [x0 + (k % per_band) * (g.box_w + g.layer_gap) for k in range(depth)]
    cy = [centre[s] - low[band_of[slot_layer[s]]] + top[band_of[slot_layer[s]]] for s in range(slots)]
    boxes = tuple((x[layer[v]], cy[v] - g.box_h / 2) for v in range(n))
    drawn = []
    lane_used = [0] * bands
    for a, b, chain in chains:
        segments: list[tuple] = []
        for s, t in zip(chain, chain[1:]):
            (x1, y1), (x2, y2) = (x[slot_layer[s]] + g.box_w, cy[s]), (x[slot_layer[t]], cy[t])
            band = band_of[slot_layer[s]]
            if band == band_of[slot_layer[t]]:
                mid = (x1 + x2) / 2
                segments.append(("C", x1, y1, mid, y1, mid, y2, x2, y2))
            else:  # wrap to the next band
                lane = top[band] + high[band] - low[band] + g.wrap_pad + lane_used[band] * g.wrap_step
                lane_used[band] += 1
                turn, enter = x1 + g.layer_gap / 2, g.margin + g.wrap_room / 2
                segments.append(("C", x1, y1, turn, y1, turn, y1, turn, lane))
                segments.append(("L", turn, lane, enter, lane))
                segments.append(("C", enter, lane, enter, y2, enter, y2, x2, y2))
            if t >= n:  # through a dummy slot's layer column
                segments.append(("L", x2, y2, x2 + g.box_w, y2))
        drawn.append((a, b, tuple(segments)))
    width = x0 + g.margin + min(per_band, depth) * g.box_w + max(min(per_band, depth) - 1, 0) * g.layer_gap
    return Layout(boxes, tuple(drawn), tuple(layer), width, height, direct, g)
