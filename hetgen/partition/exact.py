"""Exact placement search: dynamic programming over the topological order.

A state is what the future can still depend on:

- the frontier: each live tensor (produced, read again later) with the place it lives and the
  places it has already been copied to (a tensor moves once per destination), and
- the open groups: fused candidates chosen at their first node, executing at their last node.

A candidate is chosen when its first node comes up and executes (inputs copied in, outputs
produced) when its last node comes up; patterns only expose their last node's outputs, so all its
inputs exist by then. States with equal keys merge, keeping the cheaper.

Three things keep the state count small without giving up optimality:

- canonical entries: copies to places no remaining reader can run at are forgotten, and a tensor
  every possible reader already has becomes DONE;
- dominance: with the same open groups, state A makes state B useless when A's cost plus the most
  B's tensor locations could save (each possible reader place priced once) is still no more than
  B's cost, since A can then follow B's best continuation for at most that much more;
- only when a step still holds more than `max_states` states are the costliest dropped (a beam),
  which the result reports as not exact.
"""

from __future__ import annotations

import bisect
import heapq
import itertools

import numpy as np

from hetgen.errors import PlacementError
from hetgen.partition.space import Candidate, SearchSpace

DONE = (-1, -1)  # a tensor entry every remaining reader already has: nothing left to pay for it
DOMINANCE_WINDOW = 8  # how many cheaper states each state is checked against
PRE_CUT = 4  # states beyond PRE_CUT * max_states are dropped before the dominance pass


class ExactSearch:
    def __init__(self, space: SearchSpace, candidates: tuple[Candidate, ...]):
        self.space = space
        self.starts: list[list[Candidate]] = [[] for _ in space.graph.nodes]
        for c in candidates:
            self.starts[c.nodes[0]].append(c)
        self.by_id = {c.id: c for c in candidates}
        self.later = {c.id: frozenset(c.nodes[1:]) for c in candidates}
        node_locs = [0] * len(space.graph.nodes)
        for c in candidates:
            for n in c.nodes:
                node_locs[n] |= 1 << c.loc
        self.last_use = [readers[-1] if readers else -1 for readers in space.consumers]
        self.readers = [list(readers) for readers in space.consumers]
        # reader_locs[t][k]: the places t's readers from its k-th one on could run at
        self.reader_locs: list[list[int]] = []
        for readers in space.consumers:
            masks = [0] * (len(readers) + 1)
            for k in range(len(readers) - 1, -1, -1):
                masks[k] = masks[k + 1] | node_locs[readers[k]]
            self.reader_locs.append(masks)
        self.step = -1
        self._after: dict[int, int] = {}
        self._pending: dict[tuple[int, ...], dict[int, int]] = {}
        self._owed_cache: dict[tuple, tuple[float, ...]] = {}

    # -- per-step caches --------------------------------------------------------------------

    def _begin(self, step: int) -> None:
        self.step = step
        self._after.clear()
        self._pending.clear()
        self._owed_cache.clear()

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
        latency, per_byte, nbytes = space.latency, space.us_per_byte, space.tensor_bytes
        loc, bit, root = c.loc, 1 << c.loc, space.root
        for t in c.inputs:
            src, mask = entries[t]
            if not mask & bit:
                cost += latency[src][loc] + nbytes[t] * per_byte[src][loc]
                entries[t] = (src, mask | bit)
        for t in c.outputs:
            mask = bit
            if t in space.graph_outputs and loc != root:
                cost += latency[loc][root] + nbytes[t] * per_byte[loc][root]
                mask |= 1 << root
            if space.consumers[t]:
                entries[t] = (loc, mask)
        return cost

    def _canonical(self, entries: dict, open_groups: tuple[int, ...]) -> tuple:
        pending = self._pending_readers(open_groups)
        kept = []
        for t, entry in entries.items():
            if self.last_use[t] <= self.step and t not in pending:
                continue  # dead: every reader has executed
            src, mask = entry
            if src >= 0:
                relevant = self._relevant(t, pending)
                mask &= relevant
                entry = DONE if not relevant & ~mask & ~(1 << src) else (src, mask)
            kept.append((t, entry))
        kept.sort()
        return tuple(kept)

    # -- dominance --------------------------------------------------------------------------

    def _owed(self, t: int, entry: tuple[int, int], relevant: int) -> tuple[float, ...]:
        """What each place would still pay to get tensor `t` in this entry (0 where nobody reads it)."""
        key = (t, entry, relevant)
        owed = self._owed_cache.get(key)
        if owed is None:
            src, mask = entry
            owed = tuple(
                0.0
                if src < 0 or not (relevant >> d) & 1 or (mask >> d) & 1 or d == src
                else self.space.transfer_us(src, d, t)
                for d in range(len(self.space.paths))
            )
            self._owed_cache[key] = owed
        return owed

    def _owed_vector(self, frontier: tuple, pending: dict[int, int]) -> np.ndarray:
        """All of a state's owed costs, tensor after tensor, as one vector."""
        owed = [self._owed(t, entry, self._relevant(t, pending)) for t, entry in frontier]
        return np.fromiter(itertools.chain.from_iterable(owed), dtype=float, count=len(owed) * len(self.space.paths))

    def _undominated(self, states: dict) -> dict:
        """Drop states some cheaper state with the same open groups dominates.

        B is dominated by A when cost(A) + sum over tensors and places of max(0, owed_A - owed_B)
        <= cost(B): following B's best continuation from A costs at most that much more.
        """
        classes: dict[tuple[int, ...], list] = {}
        for key, value in states.items():
            classes.setdefault(key[1], []).append((value[0], key, value))
        kept: dict = {}
        for open_groups, members in classes.items():
            if len(members) == 1:
                kept[members[0][1]] = members[0][2]
                continue
            pending = self._pending_readers(open_groups)
            members.sort(key=lambda item: item[0])
            tensors = [t for t, _ in members[0][1][0]]
            window_costs = np.empty(DOMINANCE_WINDOW)
            window_owed = np.empty((DOMINANCE_WINDOW, len(tensors) * len(self.space.paths)))
            filled = 0
            for cost, key, value in members:
                if [t for t, _ in key[0]] != tensors:  # cannot happen: same open groups, same live tensors
                    kept[key] = value
                    continue
                owed = self._owed_vector(key[0], pending)
                if filled:
                    penalty = np.maximum(window_owed[:filled] - owed, 0.0).sum(axis=1)
                    if np.any(window_costs[:filled] + penalty <= cost):
                        continue
                kept[key] = value
                if filled < DOMINANCE_WINDOW:
                    window_costs[filled], window_owed[filled] = cost, owed
                    filled += 1
        return kept

    # -- the search -------------------------------------------------------------------------

    def run(self, max_states: int) -> tuple[list[int], bool]:
        """The ids of the chosen candidates of least total cost, and whether no beam cut was needed."""
        space = self.space
        root = space.root
        initial = tuple(sorted((t, (root, 1 << root)) for t in space.graph_inputs if space.consumers[t]))
        states: dict[tuple, tuple[float, tuple | None]] = {(initial, ()): (0.0, None)}
        exact = True
        for i in range(len(space.graph.nodes)):
            self._begin(i)
            new = self._advance(states, i)
            if not new:
                raise PlacementError(f"no placement satisfies the pins around {space.graph.nodes[i].label}")
            if len(new) > PRE_CUT * max_states:  # pathological width: cut before the costlier pass
                exact = False
                new = dict(heapq.nsmallest(PRE_CUT * max_states, new.items(), key=lambda item: item[1][0]))
            if len(new) > 1:
                new = self._undominated(new)
            if len(new) > max_states:
                exact = False
                new = dict(heapq.nsmallest(max_states, new.items(), key=lambda item: item[1][0]))
            states = new
        _, record = min(states.values(), key=lambda value: value[0])
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

        later = self.later
        for (frontier, open_groups), (cost, record) in states.items():
            owner = next((g for g in open_groups if i in later[g]), None)
            if owner is not None:
                group = self.by_id[owner]
                if i != group.last:
                    offer((frontier, open_groups), cost, record)
                    continue
                entries = dict(frontier)
                cost = self._execute(group, entries, cost)
                remaining = tuple(g for g in open_groups if g != owner)
                offer((self._canonical(entries, remaining), remaining), cost, record)
                continue
            for c in self.starts[i]:
                if open_groups and any(not later[c.id].isdisjoint(later[g]) for g in open_groups):
                    continue
                entries = dict(frontier)
                if len(c.nodes) == 1:
                    after, groups = self._execute(c, entries, cost + c.compute_us), open_groups
                else:
                    after, groups = cost + c.compute_us, tuple(sorted((*open_groups, c.id)))
                offer((self._canonical(entries, groups), groups), after, (c.id, record))
        return new
