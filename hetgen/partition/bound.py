"""How fast any placement of a graph could possibly be: a lower bound on the makespan.

Every group is one step of its target's program (hetgen/spec/timeline.py; `makespan_floor`
in assemble.py rests on the same rule), so no placement finishes before its busiest target has done
its work. Relax everything else — copies are free, dependencies never make a device wait, and a
node's work may even be split between devices at will — and what is left is a linear program:
share each node among the targets to minimise the busiest target's load. Its dual gives the bound
without solving it: for any weights `w` over the targets (non-negative, summing to one),

    makespan  >=  max over targets of load  >=  sum over targets of w[t] * load[t]
              >=  sum over nodes n of  min over targets t of  w[t] * time[n][t]

where `time[n][t]` is the least share of n in a candidate group of target t that holds it (the
shares of a group sum to its price, `node_times`: a placement's load on t, the sum of its groups'
prices, is never less than the sum of its nodes' shares). Any `w` gives a valid bound; the search
below looks for the weights that give the highest one, and whatever it finds is still a bound.

A placement that runs each node whole on one target (what the search chooses among) also waits
for its longest dependency chain: `critical_path_bound`, each node at its least share anywhere.

So `best single device time / bound` is the most a placement can gain over the best single
device; with `makespan_bound` alone, even a split of layers across devices could not gain more.
"""

from __future__ import annotations

import math

import numpy as np

ROUNDS = 4000  # exponentiated-gradient steps over the weights: enough for the few targets a platform has
STALL = 400  # steps without a 1e-6 rise after which the search for weights stops


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
    pool = space.candidates if candidates is None else candidates
    groups = [c for c in pool if not space.aliases.issuperset(c.nodes)]  # a dropped reshape runs nowhere
    groups.sort(key=lambda c: (c.last, c.nodes[0]))
    count, places = len(space.graph.nodes), len(space.targets)
    done = [math.inf] * count  # the earliest any group holding the node ends
    ends = [[math.inf] * places for _ in range(count)]  # [n][s]: the earliest n's output exists at s
    inside = [set() for _ in range(count)]  # places where n is a member that is not its group's last
    for c in groups:
        for n in c.nodes[:-1]:
            inside[n].add(c.loc)

    def arrival(tid: int, dst: int) -> float:
        producer = space.producer[tid]
        if producer < 0:  # a graph input: on the root from the start
            return space.transfer_us(space.root, dst, tid)
        # a producer in the middle of a group: no earlier than the start (not known here: 0)
        early = [0.0 if s in inside[producer] else ends[producer][s] for s in range(places)]
        return min(early[s] + space.transfer_us(s, dst, tid) for s in range(places))

    for c in groups:
        ready = max((arrival(tid, c.loc) for tid in c.inputs), default=0.0)
        finish = ready + c.compute_us
        ends[c.last][c.loc] = min(ends[c.last][c.loc], finish)
        for n in c.nodes:
            done[n] = min(done[n], finish)
    longest = max((d for n, d in enumerate(done) if n not in space.aliases), default=0.0)
    if not math.isfinite(longest):  # a node no candidate holds: no placement to bound
        return 0.0
    returned = [arrival(tid, space.root) for tid in space.graph_outputs if space.producer[tid] >= 0]
    return max([longest, *returned])


def makespan_bound(space, candidates=None) -> float:
    """A lower bound (us) on the makespan of every placement of `space`'s graph on its platform,
    in `candidates` (the space's, by default)."""
    times = node_times(space, candidates)
    usable = np.isfinite(times).any(axis=0)
    times = times[:, usable]
    if times.shape[0] == 0:
        return 0.0
    scale = float(np.min(times, axis=1).sum()) or 1.0
    weights = np.full(times.shape[1], 1.0 / times.shape[1])
    best, since = 0.0, 0
    for step in range(ROUNDS):
        weighted = times * weights
        pick = np.argmin(weighted, axis=1)
        value = float(weighted[np.arange(len(pick)), pick].sum())
        if value > best * (1 + 1e-6):
            since = 0
        since += 1
        best = max(best, value)
        if since > STALL:  # any weights give a bound: stopping early only forgoes a higher one
            break
        # the supergradient: each target's load under the nodes' current choices; weight moves
        # toward the loaded targets, which makes their nodes go elsewhere
        load = np.bincount(pick, weights=times[np.arange(len(pick)), pick], minlength=times.shape[1])
        # in logs, less the largest: a slow target's load (a Cortex-M's, hundreds of times the
        # fastest) would overflow exp and turn the weights into inf / inf
        rate = 4.0 / math.sqrt(step + 1)
        logs = np.log(weights) + rate * load / scale
        weights = np.maximum(np.exp(logs - logs.max()), 1e-12)
        weights = weights / weights.sum()
    return best
