"""Exact placement search: dynamic programming over the topological order.

A state is what the future can still depend on:

- the frontier: each live tensor (produced, read again later) with the place it lives and the
  places it has already been copied to (a tensor moves once per destination), and
- the open groups: fused candidates chosen at their first node, executing at their last node.

A candidate is chosen when its first node comes up and executes (inputs copied in, outputs
produced) when its last node comes up; patterns only expose their last node's outputs, so all its
inputs exist by then. States with equal keys merge, keeping the cheaper.

Any topological order works (a chain's nodes come in chain order in all of them); the search
takes the graph's own, or a chain-following one when that keeps fewer tensors live. Then two
things keep the state count small without giving up optimality:

- canonical entries: copies to places no remaining reader can run at are forgotten, and a tensor
  every possible reader already has becomes DONE;
- dominance: with the same open groups, state A makes state B useless when A's cost plus the most
  B's tensor locations could save (each possible reader place priced once) is still no more than
  B's cost, since A can then follow B's best continuation for at most that much more.

Only when a step still holds more states than the beam allows are the costliest dropped, which
the result reports as not exact. The beam is `max_states`, narrowed on very wide frontiers so
that states * live tensors stays under STATE_WORK: each step's work stays bounded.

Wide DAGs (many branches alive at once, in every order) are the exception: the states that differ
only in where some not-yet-read tensor lives multiply with the frontier's width, and dominance
removes few of them. So the whole search also has a budget, KEPT_BUDGET frontier entries (states
kept x live tensors) over all its steps: a step of width w keeps at most KEPT_BUDGET / steps / w
states (never fewer than MIN_BUDGET_BEAM), and a budget-bound step wider than WIDE_STEP skips the
dominance pass when it holds more than PRE_CUT * beam states (there that pass costs more than all
the rest). A graph whose steps stay narrow never meets the budget and is searched exactly; one
that meets it is searched by a beam, and the result says so (`exact` False; `widest`, the most
live tensors at a cut step). `place` then also prices the greedy placement and keeps the cheaper,
so a beam result is never worse than greedy. `expanded` counts the states offered in all: the search's work, not its time.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from operator import itemgetter

import numpy as np

from hetgen.errors import PlacementError
from hetgen.partition.space import Candidate, SearchSpace

DONE = (-1, -1)  # a tensor entry every remaining reader already has: nothing left to pay for it
DOMINANCE_WINDOW = 8  # how many cheaper states each state is checked against
PRE_CUT = 4  # more than PRE_CUT * beam states: cut to the beam at once, no dominance pass
STATE_WORK = 4096  # the beam keeps states * live tensors under this, so a step's work stays bounded
MIN_BEAM = 16
KEPT_BUDGET = 300_000  # states kept x live tensors over all steps: bounds a whole search's work (see run)
MIN_BUDGET_BEAM = 4  # ... but a step may keep at least this many states
WIDE_STEP = 8  # live tensors beyond which a budget-bound step skips dominance when over PRE_CUT * beam
CACHE_LIMIT = 1 << 16  # entries a cache kept across steps may hold before it starts again


class ExactSearch:
    def __init__(
        self,
        space: SearchSpace,
        candidates: tuple[Candidate, ...],
        *,
        prune: bool = True,
        like: ExactSearch | None = None,
    ):
        """`prune=False` turns off dominance, reordering and beam narrowing: the plain DP, for tests.
        `like`: a search over the same space and with the same `prune`, whose order (and the tables
        that depend on the order alone) this one takes instead of computing them again."""
        self.prune = prune
        self.space = space
        node_locs = [0] * len(space.graph.nodes)
        for c in candidates:
            for n in c.nodes:
                node_locs[n] |= 1 << c.loc
        if like is not None:
            self.node_reads, self.order, self.position = like.node_reads, like.order, like.position
            self.readers, self.last_use = like.readers, like.last_use
        else:
            self.node_reads = [
                tuple(sorted({space.tensor_id[name] for name in node.inputs if name in space.tensor_id}))
                for node in space.graph.nodes
            ]
            self.order = search_order(space) if prune else list(range(len(space.graph.nodes)))
            self.position = [0] * len(self.order)
            for step, node in enumerate(self.order):
                self.position[node] = step
            # per tensor: its readers' steps, sorted
            self.readers = [sorted(self.position[n] for n in readers) for readers in space.consumers]
            self.last_use = [steps[-1] if steps else -1 for steps in self.readers]
        position = self.position
        # a group is chosen at its first node in the search's order (a fused attention's branches
        # may come in any order) and executes at its last, the node every other one feeds
        self.starts: list[list[Candidate]] = [[] for _ in space.graph.nodes]
        self.later: dict[int, frozenset[int]] = {}
        for c in candidates:
            first = min(c.nodes, key=position.__getitem__)
            self.starts[first].append(c)
            self.later[c.id] = frozenset(c.nodes) - {first}
        self.by_id = {c.id: c for c in candidates}
        # per tensor: reader_locs[t][k], the places its readers from the k-th one on could run at
        self.reader_locs: list[list[int]] = []
        for readers in space.consumers:
            ordered = sorted(readers, key=position.__getitem__)
            masks = [0] * (len(ordered) + 1)
            for k in range(len(ordered) - 1, -1, -1):
                masks[k] = masks[k + 1] | node_locs[ordered[k]]
            self.reader_locs.append(masks)
        self.step = -1
        self.expanded = 0  # states offered over the whole search: its work, independent of the clock
        self.widest = 0  # the most live tensors at a step the beam cut (0: none was cut)
        self.best_cost = float("inf")
        self._after: dict[int, int] = {}
        # Functions of their keys alone (open groups; a frontier entry and the places that may read
        # it), so kept from step to step: a live tensor's entry recurs at every step until it is read.
        self._pending: dict[tuple[int, ...], dict[int, int]] = {}
        self._owed_cache: dict[tuple, tuple[float, ...]] = {}
        self._kept_cache: dict[tuple[int, int], int] = {}  # a function of the platform's places alone

    # -- caches -----------------------------------------------------------------------------

    def _begin(self, step: int) -> None:
        self.step = step
        self._after.clear()  # readers after the step: changes with the step
        if len(self._owed_cache) > CACHE_LIMIT:
            self._owed_cache.clear()
        if len(self._pending) > CACHE_LIMIT:
            self._pending.clear()

    def _readers_after(self, t: int) -> int:
        mask = self._after.get(t)
        if mask is None:
            mask = self.reader_locs[t][bisect.bisect_right(self.readers[t], self.step)]
            self._after[t] = mask
        return mask

    def _pending_readers(self, open_groups: tuple[int, ...]) -> dict[int, int]:
        """Tensor -> places of open groups that will still read it."""
        pending = self._pending.get(open_groups)
        if pending is None:
            pending = {}
            for g in open_groups:
                c = self.by_id[g]
                for t in c.inputs:
                    pending[t] = pending.get(t, 0) | (1 << c.loc)
            self._pending[open_groups] = pending
        return pending

    def _relevant(self, t: int, pending: dict[int, int]) -> int:
        return self._readers_after(t) | pending.get(t, 0)

    # -- transitions ------------------------------------------------------------------------

    def _execute(self, c: Candidate, entries: dict, cost: float) -> float:
        space = self.space
        loc, bit, root = c.loc, 1 << c.loc, space.root
        for t in c.inputs:
            src, mask = entries[t]
            if not mask & bit:
                paid, mask = space.copy_us(src, loc, mask, t)
                cost += paid
                entries[t] = (src, mask)
        for t in c.outputs:
            mask = bit
            if t in space.graph_outputs and loc != root:
                paid, mask = space.copy_us(loc, root, mask, t)
                cost += paid
            if space.consumers[t]:
                entries[t] = (loc, mask)
        return cost

    def _kept(self, src: int, relevant: int) -> int:
        """The places worth remembering a tensor from `src` is in: those on its way to a place that
        may still read it (a copy leaves it where it passed, and a later copy starts there)."""
        kept = self._kept_cache.get((src, relevant))
        if kept is None:
            relay, kept, bits = self.space.relay[src], 1 << src, relevant
            while bits:
                low = bits & -bits
                kept |= relay[low.bit_length() - 1]
                bits ^= low
            self._kept_cache[src, relevant] = kept
        return kept

    def _canonical(self, entries: dict, open_groups: tuple[int, ...], touched) -> tuple:
        """Drop dead tensors and trim copies nobody can read any more, then freeze the frontier.

        Only `touched` tensors can have changed since the previous step (read by this step's node,
        or read or written by the group that opened or executed), so only they are revisited: an
        entry left as it was is still true, at worst a missed merge.
        """
        pending = self._pending_readers(open_groups)
        last_use, step, readers_after, kept = self.last_use, self.step, self._readers_after, self._kept
        for t in touched:
            entry = entries.get(t)
            if entry is None:
                continue
            if last_use[t] <= step and t not in pending:
                del entries[t]  # dead: every reader has executed
                continue
            src, mask = entry
            if src >= 0:
                relevant = readers_after(t) | pending.get(t, 0)
                mask &= kept(src, relevant)
                entries[t] = DONE if not relevant & ~mask & ~(1 << src) else (src, mask)
        return tuple(sorted(entries.items()))

    # -- dominance --------------------------------------------------------------------------

    def _owed(self, item: tuple[int, tuple[int, int]], relevant: int) -> tuple[float, ...]:
        """What each place would still pay to get a frontier tensor (0 where nobody will read it)."""
        key = (item, relevant)
        owed = self._owed_cache.get(key)
        if owed is None:
            t, (src, mask) = item
            owed = tuple(
                0.0
                if src < 0 or not (relevant >> d) & 1 or (mask >> d) & 1 or d == src
                else self.space.copy_us(src, d, mask, t)[0]
                for d in range(len(self.space.paths))
            )
            self._owed_cache[key] = owed
        return owed

    def _undominated(self, states: dict) -> dict:
        """Drop states some cheaper state with the same open groups dominates.

        B is dominated by A when cost(A) + sum over tensors and places of max(0, owed_A - owed_B)
        <= cost(B): following B's best continuation from A costs at most that much more. In order
        of cost, each state is checked against the first DOMINANCE_WINDOW states kept before it.

        A kept state's penalties against every later state come from one array operation when it
        joins the window (each a row sum of the same numbers, so the same floats as one state at a
        time), and the checks compare them in plain floats.
        """
        classes: dict[tuple[int, ...], list] = {}
        for key, value in states.items():
            classes.setdefault(key[1], []).append((value[0], key, value))
        kept: dict = {}
        places = len(self.space.paths)
        owed_of, chain, first = self._owed, itertools.chain.from_iterable, itemgetter(0)
        for open_groups, members in classes.items():
            if len(members) == 1:
                kept[members[0][1]] = members[0][2]
                continue
            pending = self._pending_readers(open_groups)
            members.sort(key=first)
            tensors = tuple(map(first, members[0][1][0]))
            relevant = [self._relevant(t, pending) for t in tensors]
            # rows of `owed`: the members with these live tensors (same open groups: nearly all)
            matching = [k for k, (_, key, _) in enumerate(members) if tuple(map(first, key[0])) == tensors]
            row_of = {k: row for row, k in enumerate(matching)}
            size = len(tensors) * places
            owed = np.fromiter(
                chain(chain(map(owed_of, members[k][1][0], relevant)) for k in row_of),
                dtype=float,
                count=len(row_of) * size,
            ).reshape(len(row_of), size)
            window: list[tuple[float, int, list[float]]] = []  # (cost, its row, penalties of the rows after)
            for k, (cost, key, value) in enumerate(members):
                row = row_of.get(k)
                if row is None:
                    kept[key] = value
                    continue
                if any(window_cost + penalties[row - after] <= cost for window_cost, after, penalties in window):
                    continue
                kept[key] = value
                if len(window) < DOMINANCE_WINDOW:
                    penalties = np.maximum(owed[row] - owed[row + 1 :], 0.0).sum(axis=1).tolist()
                    window.append((cost, row + 1, penalties))
        return kept

    # -- the search -------------------------------------------------------------------------

    def run(self, max_states: int) -> tuple[list[int], bool]:
        """The ids of the chosen candidates of least total cost, and whether no beam cut was needed."""
        space = self.space
        root = space.root
        initial = tuple(sorted((t, (root, 1 << root)) for t in space.graph_inputs if space.consumers[t]))
        states: dict[tuple, tuple[float, tuple | None]] = {(initial, ()): (0.0, None)}
        exact = True
        step_work = KEPT_BUDGET // max(1, len(self.order))  # frontier entries a step may keep
        for step, node in enumerate(self.order):
            self._begin(step)
            new = self._advance(states, node)
            if not new:
                raise PlacementError(f"no placement satisfies the pins around {space.graph.nodes[node].label}")
            width = len(next(iter(new))[0])
            beam = min(max_states, max(MIN_BEAM, STATE_WORK // max(1, width))) if self.prune else max_states
            # where the whole-search budget binds on a wide step, the dominance pass runs only when it
            # could bring the step under the beam by itself: there it costs more than all the rest
            budget = max(MIN_BUDGET_BEAM, step_work // max(1, width))
            if self.prune and budget < beam:
                beam, pre_cut = budget, 1 if width > WIDE_STEP else PRE_CUT
            else:
                pre_cut = PRE_CUT
            if len(new) > pre_cut * beam:  # pathological width: the beam cuts, dominance would not help
                exact = False
                self.widest = max(self.widest, width)
                new = dict(heapq.nsmallest(beam, new.items(), key=lambda item: item[1][0]))
            elif len(new) > 1 and self.prune:
                new = self._undominated(new)
            if len(new) > beam:
                exact = False
                self.widest = max(self.widest, width)
                new = dict(heapq.nsmallest(beam, new.items(), key=lambda item: item[1][0]))
            states = new
        self.best_cost, record = min(states.values(), key=lambda value: value[0])
        chosen = []
        while record is not None:
            chosen.append(record[0])
            record = record[1]
        return chosen[::-1], exact

    def _advance(self, states: dict, i: int) -> dict:
        new: dict[tuple, tuple[float, tuple | None]] = {}

        def offer(key: tuple, cost: float, record: tuple | None) -> None:
            best = new.get(key)
            if best is None or cost < best[0]:
                new[key] = (cost, record)

        later, read_here, canonical = self.later, self.node_reads[i], self._canonical
        offered = 0
        for (frontier, open_groups), (cost, record) in states.items():
            owner = next((g for g in open_groups if i in later[g]), None) if open_groups else None
            if owner is not None:
                group = self.by_id[owner]
                offered += 1
                if i != group.last:
                    offer((frontier, open_groups), cost, record)
                    continue
                entries = dict(frontier)
                cost = self._execute(group, entries, cost)
                remaining = tuple(g for g in open_groups if g != owner)
                touched = (*read_here, *group.inputs, *group.outputs)
                offer((canonical(entries, remaining, touched), remaining), cost, record)
                continue
            for c in self.starts[i]:
                if open_groups and any(not later[c.id].isdisjoint(later[g]) for g in open_groups):
                    continue
                offered += 1
                entries = dict(frontier)
                if len(c.nodes) == 1:
                    after, groups = self._execute(c, entries, cost + c.compute_us), open_groups
                    touched = (*read_here, *c.inputs, *c.outputs)
                else:
                    after, groups = cost + c.compute_us, tuple(sorted((*open_groups, c.id)))
                    touched = (*read_here, *c.inputs)
                offer((canonical(entries, groups, touched), groups), after, (c.id, record))
        self.expanded += offered
        return new


def search_order(space: SearchSpace) -> list[int]:
    """The topological order to search in: the graph's own, or a chain-following one when that
    keeps fewer tensors live (graphs emitted breadth-first would otherwise make wide frontiers).

    Any topological order works: a chain's nodes come in chain order in all of them.
    """
    given = list(range(len(space.graph.nodes)))
    following = _chain_following_order(space)
    return following if _live_width(space, following) < _live_width(space, given) else given


def _successors(space: SearchSpace) -> list[list[int]]:
    successors: list[set[int]] = [set() for _ in space.graph.nodes]
    for t, readers in enumerate(space.consumers):
        if space.producer[t] >= 0:
            successors[space.producer[t]].update(readers)
    return [sorted(s) for s in successors]


def _chain_following_order(space: SearchSpace) -> list[int]:
    """Kahn's algorithm that continues with a ready successor of the node just placed, if any."""
    successors = _successors(space)
    waiting = [0] * len(successors)
    for node_successors in successors:
        for s in node_successors:
            waiting[s] += 1
    ready = [n for n, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    done = [False] * len(successors)
    order: list[int] = []
    last = None
    while len(order) < len(successors):
        pick = None
        if last is not None:
            pick = next((s for s in successors[last] if waiting[s] == 0 and not done[s]), None)
        while pick is None:
            candidate = heapq.heappop(ready)
            pick = None if done[candidate] else candidate
        done[pick] = True
        order.append(pick)
        for s in successors[pick]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, s)
        last = pick
    return order


def _live_width(space: SearchSpace, order: list[int]) -> int:
    """The most tensors alive at once when nodes run in `order`."""
    remaining = [len(readers) for readers in space.consumers]
    live = sum(1 for t in space.graph_inputs if remaining[t])
    widest = live
    nodes = space.graph.nodes
    for node in order:
        for name in dict.fromkeys(nodes[node].inputs):
            t = space.tensor_id.get(name) if name else None
            if t is not None:
                remaining[t] -= 1
                live -= remaining[t] == 0
        for name in nodes[node].outputs:
            t = space.tensor_id.get(name) if name else None
            live += t is not None and remaining[t] > 0
        widest = max(widest, live)
    return widest
