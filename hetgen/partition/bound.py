"""How fast any placement of a graph could possibly be: a lower bound on the makespan, at the
search's prices (the objective `place` reports as `searched_us`; kernel choices made after
placement can be faster). `placement_bound` is the one `hetgen place`/`explain` measure the gap
against (hetgen/partition/optimal.py); it is the least, over the sets of targets a placement may
use, of the largest of these, each true of every placement that uses exactly that set:

- **the critical path** (`critical_path_bound`): a group starts once every tensor it reads has
  reached its target and ends its price later; a tensor reaches a place only after its producing
  group ends and every copy on the route has run (the graph's inputs start on the root, its outputs
  end there). Over candidate groups, each at its cheapest producer and route: fused groups count at
  their price (not as free members), copies that cannot be avoided count, and a chain (one possible
  order) is the least sum of its groups and copies, not a max over devices.
- **the busiest target** (`makespan_bound`): every group is one step of its target's program
  (hetgen/spec/timeline.py; `makespan_floor` in assemble.py rests on the same rule), so no
  placement ends before its busiest target has done its work. Relax the rest (dependencies, and
  even a node split between devices at will) and what is left is a linear program: share each node
  among the targets to minimise the busiest load. Its dual gives the bound without solving it: for
  any weights `w` over the targets (non-negative, summing to one),

      makespan  >=  max over targets of (fixed[t] + load[t])  >=  sum over t of w[t] * (fixed[t] + load[t])
                >=  sum over t of w[t] * fixed[t]  +  sum over nodes n of  min over t of  w[t] * time[n][t]

  where `time[n][t]` is the least share of n in a candidate group of t that holds it (`node_times`:
  the shares of a group sum to its price) and `fixed[t]` what using t costs besides its groups:
  the root's copies into and out of each of its devices used, and for a target besides the root the
  least time before its first group can start plus the least time from its last group's end to the
  program's end (it runs its groups one after another in between). Any `w` gives a valid bound;
  the search below looks for the weights that give the highest one.
- **nodes a fast placement must put on a target** (`_forced`): with node n kept off target t, no
  placement beats the critical path of the other groups; so a placement faster than that runs n
  on t, and t's load then holds the price of such nodes.

Using a device behind a slow link therefore costs its copies, and the set that uses no device is the
root alone. With `makespan_bound` alone (every copy free, `fixed` zero), even a split of layers across
devices could not be faster. `benchmarks/bench_bound.py` prints, per model and shipped platform, the
bound and the fraction of its gain the search captures; tests/test_placement_bound.py checks it
never passes the brute-forced optimum of small random graphs.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np

from hetgen.partition.timeline import Lanes

ROUNDS = 4000  # exponentiated-gradient steps over the weights: enough for the few targets a platform has
STALL = 400  # steps without a rise of RISE after which the search for weights stops
RISE = 1e-4  # relative: less is not worth the steps
FORCED_WORK = 20_000  # nodes x candidates up to which placement_bound looks for nodes forced onto a target
SPLIT_TARGETS = 4  # targets besides the root up to which placement_bound tries every set of them (2**4 sets)


def node_times(space, candidates=None) -> np.ndarray:
    """time[n][t]: the least share of node n in a candidate group of target t (inf: no candidate).

    A group's price is shared among its nodes, the costliest alone first, each taking what it costs
    alone on that target while the price lasts (what a fused group saves falls on its cheap
    members, the activations and adds, not on its Conv); the rest, if any, in proportion. A member
    with no group of its own on t is weighed by the least it costs alone anywhere. The shares sum
    to the price, so a placement's load on t is never below the sum of its nodes' shares."""
    pool = space.candidates if candidates is None else candidates
    alone = np.full((len(space.graph.nodes), len(space.targets)), math.inf)
    for c in pool:
        if len(c.nodes) == 1:
            alone[c.nodes[0], c.loc] = min(alone[c.nodes[0], c.loc], c.compute_us)
    times = alone.copy()
    for c in pool:
        if len(c.nodes) == 1:
            continue
        members = list(c.nodes)
        # what each member costs alone here, or (where it has no group of its own here) the least
        # it costs alone anywhere: the share it could not escape by leaving the group
        own = np.where(np.isfinite(alone[members, c.loc]), alone[members, c.loc], alone[members].min(axis=1))
        for n, share in zip(c.nodes, _shares(c.compute_us, own)):
            times[n, c.loc] = min(times[n, c.loc], share)
    return times


def _shares(price: float, own: np.ndarray) -> np.ndarray:
    if not (np.isfinite(own).all() and own.sum() > 0):
        return np.full(len(own), price / len(own))
    shares = np.zeros(len(own))
    left = price
    for i in np.argsort(-own, kind="stable"):
        shares[i] = min(own[i], left)
        left -= shares[i]
    return shares + left * own / own.sum()  # a group dearer than its members alone: spread the excess


def critical_path_bound(space, candidates=None) -> float:
    """A lower bound on the makespan of every placement that runs each node whole on one target,
    in one of `candidates` (the space's, by default): its longest chain of groups and copies.

    A group starts once every tensor it reads from outside has reached its target, and ends its
    price later (one step of its target's program); a tensor reaches a place only after its
    producer's group ends and every copy on the route there has run, one after another (the
    graph's inputs start on the root; its outputs end there). So, over groups in the order of
    their last node, `ready(c)` = the latest of its inputs' arrivals, each at its cheapest
    producing group and route, and `finish(c) = ready(c) + price(c)`; no placement ends before
    every node's earliest finish or every output's earliest return to the root. A chain (one
    possible order) comes out as the least sum of groups and copies along it, not a max over
    targets; fused groups count at their price, not as free members."""
    longest = _chains(space, space.candidates if candidates is None else candidates)[0]
    return 0.0 if math.isinf(longest) else longest  # inf: a node no candidate holds, no placement


def _chains(space, pool) -> tuple[float, dict[int, float]]:
    """`critical_path_bound` over the groups of `pool`, and each group's earliest start (by id)."""
    groups = [c for c in pool if not space.aliases.issuperset(c.nodes)]  # a dropped reshape runs nowhere
    groups.sort(key=lambda c: (c.last, c.nodes[0]))
    count, places = len(space.graph.nodes), len(space.targets)
    done = [math.inf] * count  # the earliest any group holding the node ends
    ends = [[math.inf] * places for _ in range(count)]  # [n][s]: the earliest n's output exists at s
    inside: list[list] = [[] for _ in range(count)]  # the groups holding n before their last node
    for c in groups:
        for n in c.nodes[:-1]:
            inside[n].append(c)

    def arrival(tid: int, dst: int, reader: frozenset = frozenset()) -> float:
        producer = space.producer[tid]
        if producer < 0:  # a graph input: on the root from the start
            return space.transfer_us(space.root, dst, tid)
        early = ends[producer][:]
        # a group that would hand the reader a member's output from its middle (no pattern does:
        # a group writes its last node's outputs) might do so from its start: no later than 0
        for other in inside[producer]:
            if reader.isdisjoint(other.nodes):
                early[other.loc] = 0.0
        return min(early[s] + space.transfer_us(s, dst, tid) for s in range(places))

    starts: dict[int, float] = {}
    for c in groups:
        reader = frozenset(c.nodes)
        ready = starts[c.id] = max((arrival(tid, c.loc, reader) for tid in c.inputs), default=0.0)
        finish = ready + c.compute_us
        ends[c.last][c.loc] = min(ends[c.last][c.loc], finish)
        for n in c.nodes:
            done[n] = min(done[n], finish)
    longest = max((d for n, d in enumerate(done) if n not in space.aliases), default=0.0)
    if not math.isfinite(longest):  # a node no candidate holds: no placement
        return math.inf, starts
    returned = [arrival(tid, space.root) for tid in space.graph_outputs if space.producer[tid] >= 0]
    return max([longest, *returned]), starts


def makespan_bound(space, candidates=None, fixed=None, enough: float = math.inf) -> float:
    """A lower bound (us) on the makespan of every placement of `space`'s graph on its platform,
    in `candidates` (the space's, by default). `fixed[t]`: work every such placement gives target
    t besides its groups (the copies the root must make: `placement_bound`). The search for weights
    stops once the bound reaches `enough` (the caller needs no more)."""
    times = node_times(space, candidates)
    fixed = np.zeros(times.shape[1]) if fixed is None else np.asarray(fixed, dtype=float)
    usable = np.isfinite(times).any(axis=0) | (fixed > 0)
    times, fixed = times[:, usable], fixed[usable]
    if times.shape[0] == 0:
        return float(fixed.max(initial=0.0))
    if times.shape[1] == 1:  # one target does everything: its load
        return float(times.sum() + fixed.sum())
    scale = float(np.min(times, axis=1).sum()) or 1.0
    weights = np.full(times.shape[1], 1.0 / times.shape[1])
    best, since = 0.0, 0
    for step in range(ROUNDS):
        weighted = times * weights
        pick = np.argmin(weighted, axis=1)
        value = float(weighted[np.arange(len(pick)), pick].sum() + weights @ fixed)
        if value > best * (1 + RISE):
            since = 0
        since += 1
        best = max(best, value)
        if since > STALL or best >= enough:  # any weights give a bound: stopping early only forgoes a higher one
            break
        # the supergradient: each target's load under the nodes' current choices; weight moves
        # toward the loaded targets, which makes their nodes go elsewhere
        load = np.bincount(pick, weights=times[np.arange(len(pick)), pick], minlength=times.shape[1]) + fixed
        # in logs, less the largest: a slow target's load (a Cortex-M's, hundreds of times the
        # fastest) would overflow exp and turn the weights into inf / inf
        rate = 4.0 / math.sqrt(step + 1)
        logs = np.log(weights) + rate * load / scale
        weights = np.maximum(np.exp(logs - logs.max()), 1e-12)
        weights = weights / weights.sum()
    return best


def placement_bound(space, candidates=None) -> float:
    """A lower bound (us) on the makespan of every placement in `candidates` (the space's, by
    default): the least, over the sets of targets besides the root a placement may use, of the
    larger of `makespan_bound` and `critical_path_bound` over the candidates on the root and those
    targets, with the work using a target always costs added to its load.

    A placement uses some set of targets (those holding one of its groups; a dropped reshape runs
    nowhere), so its makespan is at least the bound of that set. What using a target costs:

    - the root's clock copies into and out of each of its devices used (hetgen/spec/timeline.py:
      a controller makes its devices' copies): the device's first group reads only tensors from
      elsewhere (the graph's inputs start on the root) and its last writes only tensors read
      elsewhere or the graph's outputs (which end on the root), each at least the cheapest such
      copy over the root's own link;
    - a target other than the root runs its groups one after another, the first no earlier than
      any of its groups could start (the critical path's `ready`), and the last one's outputs
      still have to leave it (at least the cheapest copy elsewhere): so makespan >= that head +
      its load + that tail.

    So a device behind a slow link must pay for itself, and the set that uses none is the root
    alone. With more than `SPLIT_TARGETS` targets besides the root, the sets are of the root's
    devices instead (a device's targets in or out together), and the head and tail are added only
    where a device is one target."""
    pool = tuple(space.candidates if candidates is None else candidates)
    lane_of = Lanes.of(space.platform).lane
    runs = [c for c in pool if not space.aliases.issuperset(c.nodes)]
    others = sorted({c.loc for c in runs} - {space.root})
    by_target = len(others) <= SPLIT_TARGETS
    units = others if by_target else sorted({lane_of[space.paths[loc]] for loc in others})
    best = math.inf
    # every target first: its bound is usually the least, and lets the others skip their LP
    for used in itertools.chain.from_iterable(itertools.combinations(units, k) for k in range(len(units), -1, -1)):
        places = (
            {space.root, *used}
            if by_target
            else {space.root, *(loc for loc in others if lane_of[space.paths[loc]] in used)}
        )
        kept = tuple(c for c in pool if c.loc in places or space.aliases.issuperset(c.nodes))
        if len({n for c in kept for n in c.nodes}) < len(space.graph.nodes):  # a node none of these can run
            continue
        floor, starts = _chains(space, kept)
        if floor >= best:  # this set's bound is no less than one already found: not the least
            continue
        fixed = np.zeros(len(space.targets))
        lanes = {lane_of[space.paths[loc]] for loc in places} - {-1}
        fixed[space.root] = sum(_root_copies(space, kept, lane_of, lane) for lane in lanes)
        alone = Counter(lane_of[space.paths[loc]] for loc in others)
        for loc in places - {space.root}:
            if by_target or alone[lane_of[space.paths[loc]]] == 1:
                fixed[loc] = _head_and_tail(space, kept, starts, places, loc)
        value = max(floor, makespan_bound(space, kept, fixed, enough=best))
        if by_target and value < best and len(space.graph.nodes) * len(kept) <= FORCED_WORK:
            for loc in places - {space.root}:
                value = max(value, _forced(space, kept, loc, fixed[loc], enough=best))
        best = min(best, value)
    # summed in another order than the timeline sums a placement: lowered by far more than that
    # rounding can differ (as `makespan_floor`), so a bound that is met is never above the makespan
    return 0.0 if math.isinf(best) else best * (1.0 - 1e-9)


def _forced(space, kept, loc: int, head_and_tail: float, enough: float = math.inf) -> float:
    """A bound from the nodes a fast placement must put on `loc` (which it uses).

    Without node n on `loc`, no placement is faster than the critical path `cp[n]` of the other
    groups. So a placement with makespan M < cp[n] runs n on `loc`; with F, the k nodes of the
    largest `cp` (the least of them cp_k), all there, its groups on `loc` cover F, and each of those
    groups' price is at least its part of F times the least price per F member of a group there
    holding that member: M >= min(cp_k, head and tail + the sum over F). For every k."""
    here = [c for c in kept if c.loc == loc and not space.aliases.issuperset(c.nodes)]
    holding: dict[int, list] = {}
    for c in here:
        for n in c.nodes:
            holding.setdefault(n, []).append(c)
    cps = sorted(
        ((_chains(space, [c for c in kept if c.loc != loc or n not in c.nodes])[0], n) for n in holding), reverse=True
    )  # inf: n runs only there
    best, forced = 0.0, set()
    for cp, n in cps:
        forced.add(n)
        load = head_and_tail + sum(
            min(c.compute_us / len(forced.intersection(c.nodes)) for c in holding[m]) for m in forced
        )
        best = max(best, min(cp, load))
        if best >= enough or load >= cp:  # further nodes only lower min(cp, load)
            break
    return best


def _head_and_tail(space, kept, starts: dict[int, float], places, loc: int) -> float:
    """The least time before target `loc`'s first group can start (`starts`: the critical path's
    earliest starts), plus the least time from the end of its last group to the program's end:
    that group's outputs are read by groups elsewhere (a reader on `loc` would run after it) or
    are graph outputs (`_remaining`, no reader's group on `loc`)."""
    groups = [c for c in kept if c.loc in places and not space.aliases.issuperset(c.nodes)]
    holding: dict[int, list] = {}
    for c in groups:
        for n in c.nodes:
            holding.setdefault(n, []).append(c)
    after: dict[int, float] = {}
    for c in sorted(groups, key=lambda c: (c.last, c.nodes[0]), reverse=True):
        after[c.id] = _remaining(space, c, holding, after)
    head = tail = math.inf
    for c in groups:
        if c.loc == loc:
            head = min(head, starts.get(c.id, math.inf))
            tail = min(tail, _remaining(space, c, holding, after, away_from=loc))
    return (0.0 if math.isinf(head) else head) + (0.0 if math.isinf(tail) else tail)


def _remaining(space, c, holding: dict[int, list], after: dict[int, float], away_from: int = -1) -> float:
    """The least time from group `c`'s end to the program's end (`after`: the same for the groups
    of later last nodes): each reader of its outputs runs in a group apart from it (not on
    `away_from`), after the copy there, and that group's own remaining time; a graph output
    returns to the root."""
    inside = set(c.nodes)
    longest = 0.0
    for tid in c.outputs:
        if tid in space.graph_outputs:
            longest = max(longest, space.transfer_us(c.loc, space.root, tid))
        for reader in space.consumers[tid]:
            if reader in inside:
                continue
            least = min(
                (
                    space.transfer_us(c.loc, other.loc, tid) + other.compute_us + after.get(other.id, 0.0)
                    for other in holding.get(reader, ())
                    if other.loc != away_from and inside.isdisjoint(other.nodes)
                ),
                default=math.inf,
            )
            if math.isfinite(least):
                longest = max(longest, least)
    return longest


def _root_copies(space, kept, lane_of, lane: int) -> float:
    """The least the root's clock spends copying into device `lane` and back out of it: the
    cheapest input of any of its groups over the root's own hop, and the cheapest output."""
    into, out = math.inf, math.inf
    for c in kept:
        if lane_of[space.paths[c.loc]] != lane or space.aliases.issuperset(c.nodes):
            continue
        into = min(into, min((_root_hop(space, space.hops[space.root][c.loc], tid) for tid in c.inputs), default=0.0))
        out = min(out, min((_root_hop(space, space.hops[c.loc][space.root], tid) for tid in c.outputs), default=0.0))
    return (0.0 if math.isinf(into) else into) + (0.0 if math.isinf(out) else out)


def _root_hop(space, hops, tid: int) -> float:
    """What the copies of `hops` that leave or reach the root cost tensor `tid` (the root makes them)."""
    nbytes = space.tensor_bytes[tid]
    return sum(lat + nbytes * per for left, reached, lat, per in hops if space.root in (left, reached))
