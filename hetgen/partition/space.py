"""The search space: the graph, the platform's places and links, and every candidate group, indexed
by integers so the search's inner loop touches only lists and tuples.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.ir import Graph
from hetgen.partition.cost import Calibration, Topology, Work, crossing_us, group_us, pool_threads
from hetgen.partition.fused import group_work
from hetgen.partition.patterns import Matches, match_patterns, runnable_targets
from hetgen.platform.model import Platform, Role, Target
from hetgen.spec import KernelTable
from hetgen.spec.alias import alias_source
from hetgen.spec.invocation import one_unit_per_invocation, tile_rates
from hetgen.spec.work import Linear


@dataclass(frozen=True)
class Candidate:
    """A match with its cost and its boundary, in search-space indices."""

    id: int
    loc: int  # index into SearchSpace.targets
    label: str
    nodes: tuple[int, ...]  # node indices, graph order; the group executes at the last one
    compute_us: float
    inputs: tuple[int, ...]  # tensor ids read from outside the group (constants excluded)
    outputs: tuple[int, ...]  # tensor ids the group writes that are read later or are graph outputs
    efficiency: float = 1.0  # its pattern's

    @property
    def last(self) -> int:
        return self.nodes[-1]


class SearchSpace:
    def __init__(self, graph: Graph, platform: Platform, calibration: Calibration, kernels: KernelTable):
        self.graph = graph
        self.kernels = kernels
        self.platform = platform
        self.calibration = calibration
        self.topology = Topology(platform)
        self.targets: tuple[Target, ...] = runnable_targets(platform)
        self.paths = tuple(target.path_str for target in self.targets)
        self.loc_of_path = {path: loc for loc, path in enumerate(self.paths)}
        self.root = self.loc_of_path[self.topology.root.path_str]
        self.controllers = tuple(i for i, t in enumerate(self.targets) if t.role is Role.CONTROLLER)
        self.accelerators = tuple(i for i, t in enumerate(self.targets) if t.role is Role.ACCELERATOR)
        self.node_index = {node.name: i for i, node in enumerate(graph.nodes)}
        self._index_tensors()
        self._index_links()
        self._index_linear()
        self.matches: Matches = match_patterns(graph, platform, self.kernels)
        self.candidates = self._candidates(calibration)

    def launch_us(self, loc: int) -> float:
        """The launch overhead inside every group time on `loc` (calibration scales it too)."""
        target = self.targets[loc]
        return target.figures.launch_us * self.calibration.scale_for(target)

    def _index_tensors(self) -> None:
        graph = self.graph
        # A reshape lowering drops (hetgen/spec/alias.py) runs nowhere: its output is its input's
        # tensor, read where that tensor is.
        self.aliases = frozenset(i for i, node in enumerate(graph.nodes) if alias_source(node, graph) is not None)
        names = [n for n in graph.inputs if not graph.is_constant(n)]
        names += [out for i, node in enumerate(graph.nodes) if i not in self.aliases for out in node.outputs if out]
        self.tensor_id = {name: tid for tid, name in enumerate(dict.fromkeys(names))}
        self.tensor_names = tuple(self.tensor_id)
        for i in sorted(self.aliases):
            node = graph.nodes[i]
            self.tensor_id[node.outputs[0]] = self.tensor_id[alias_source(node, graph)]
        self.tensor_bytes = tuple(graph.types[name].nbytes for name in self.tensor_names)
        self.producer = [-1] * len(self.tensor_names)
        readers: list[set[int]] = [set() for _ in self.tensor_names]
        for index, node in enumerate(graph.nodes):
            if index in self.aliases:
                continue
            for name in node.outputs:
                if name:
                    self.producer[self.tensor_id[name]] = index
            for name in node.inputs:
                tid = self.tensor_id.get(name) if name else None
                if tid is not None:
                    readers[tid].add(index)
        self.consumers = tuple(tuple(sorted(r)) for r in readers)
        self.graph_outputs = frozenset(self.tensor_id[n] for n in graph.outputs if n in self.tensor_id)
        self.graph_inputs = tuple(
            self.tensor_id[n] for n in graph.inputs if n in self.tensor_id and self.producer[self.tensor_id[n]] < 0
        )

    def _index_links(self) -> None:
        """Per pair of places, the copies between them (Topology.copies) as (place left, place
        reached, latency, us per byte), in order from the first to the second (-1: not a place)."""
        count = len(self.paths)
        self.hops: list[list[tuple[tuple[int, int, float, float], ...]]] = [[()] * count for _ in range(count)]
        self.latency = [[0.0] * count for _ in range(count)]
        self.us_per_byte = [[0.0] * count for _ in range(count)]  # summed over the copies
        for a in range(count):
            for b in range(count):
                hops = tuple(
                    (
                        self.loc_of_path.get(hop.src, -1),
                        self.loc_of_path.get(hop.dst, -1),
                        hop.latency_us,
                        hop.us_per_byte,
                    )
                    for hop in self.topology.copies(self.paths[a], self.paths[b])
                )
                self.hops[a][b] = hops
                self.latency[a][b] = sum(h[2] for h in hops)
                self.us_per_byte[a][b] = sum(h[3] for h in hops)
        # relay[a][b]: the places a tensor passes through (and stays in) on its way from a to b
        self.relay = [
            [sum(1 << h[1] for h in self.hops[a][b] if h[1] >= 0) for b in range(count)] for a in range(count)
        ]

    def graph_io(self, members) -> frozenset[str]:
        """The graph inputs a group reads and the graph outputs it writes: tensors that cross to
        the root controller wherever the other groups are placed."""
        io = set(self.graph.inputs) | set(self.graph.outputs)
        return frozenset(n for node in members for n in (*node.inputs, *node.outputs) if n and n in io)

    def _index_linear(self) -> None:
        """Per place and tensor, what a device that keeps its controller's tensors in DRAM in the
        controller's linear layout (`linear_burst_bytes`) takes more to read the tensor from there
        (`linear_in`) or write it there (`linear_out`) than as its own feature map: the search
        charges it on the tensor's copy (the placement prices it exactly, `cost.crossing_us`)."""
        count = len(self.paths)
        self.linear_in = [None] * count
        self.linear_out = [None] * count
        for loc, target in enumerate(self.targets):
            if not target.figures.linear_burst_bytes or not one_unit_per_invocation(target):
                continue
            rates = tile_rates(target)
            ways = []
            for direction in (Linear.READ, Linear.WRITE):
                extra = []
                for name, nbytes in zip(self.tensor_names, self.tensor_bytes):
                    kind = self.graph.types[name]
                    channels = kind.shape[1] if len(kind.shape) == 4 else 0
                    extra.append(rates.linear_extra_us(nbytes, channels, kind.dtype.itemsize, direction))
                ways.append(tuple(extra))
            self.linear_in[loc], self.linear_out[loc] = ways

    def linear_us(self, src: int, dst: int, tid: int) -> float:
        """The extra of tensor `tid` moving from place `src` to `dst` where either keeps the
        controller's tensors in DRAM, linear (`_index_linear`); 0 elsewhere."""
        extra = 0.0
        if self.linear_out[src] is not None:
            extra += self.linear_out[src][tid]
        if self.linear_in[dst] is not None:
            extra += self.linear_in[dst][tid]
        return extra

    def transfer_us(self, src: int, dst: int, tid: int) -> float:
        if src == dst:
            return 0.0
        return (
            self.latency[src][dst] + self.tensor_bytes[tid] * self.us_per_byte[src][dst] + self.linear_us(src, dst, tid)
        )

    def copy_us(self, src: int, dst: int, held: int, tid: int) -> tuple[float, int]:
        """What getting tensor `tid` (produced at `src`) to `dst` still costs when the places in
        mask `held` hold it (a subtree around `src`: every copy leaves it where it passed), and
        the mask after. Only the copies beyond the nearest holder are paid."""
        cost, nbytes = 0.0, self.tensor_bytes[tid]
        for _, reached, latency, per_byte in reversed(self.hops[src][dst]):
            if reached >= 0 and held >> reached & 1:
                break
            cost += latency + nbytes * per_byte
            if reached >= 0:
                held |= 1 << reached
        if cost:
            cost += self.linear_us(src, dst, tid)
        return cost, held

    def _candidates(self, calibration: Calibration) -> tuple[Candidate, ...]:
        nodes = self.graph.nodes
        candidates = []
        # A group's work and boundary depend on its nodes and on whether a controller runs it
        # alone: the matches of several targets (two controllers' "*", accelerators) share them.
        shared: dict[tuple[tuple[int, ...], bool], tuple[Work, tuple, tuple]] = {}
        for match in self.matches.matches:
            loc = self.loc_of_path[match.target]
            target = self.targets[loc]
            # a controller prices a group that is one fused unit as that kernel (partition/fused.py)
            key = (match.nodes, target.role is Role.CONTROLLER)
            known = shared.get(key)
            if known is None:
                work = Work(*group_work(self.kernels, target, (nodes[i] for i in match.nodes)))
                known = shared[key] = (work, *self._boundary(match.nodes))
            work, inputs, outputs = known
            scale = calibration.scale_for(target)
            members = [nodes[i] for i in match.nodes]
            threads = pool_threads(self.platform, target)
            compute = group_us(target, work, match.efficiency, scale, self.graph, members, self.kernels, threads)
            # the graph's own inputs and outputs cross to the controller wherever the rest is placed
            compute += crossing_us(
                target, match.efficiency, scale, self.graph, members, self.kernels, self.graph_io(members)
            )
            if self.aliases.issuperset(match.nodes):  # dropped by lowering: nothing runs, nothing moves
                compute, inputs, outputs = 0.0, (), ()
            candidates.append(
                Candidate(len(candidates), loc, match.label, match.nodes, compute, inputs, outputs, match.efficiency)
            )
        return tuple(candidates)

    def _boundary(self, members: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        nodes = self.graph.nodes
        inside = set(members)
        inputs: set[int] = set()
        for i in members:
            for name in nodes[i].inputs:
                tid = self.tensor_id.get(name) if name else None
                if tid is not None and self.producer[tid] not in inside:
                    inputs.add(tid)
        outputs = {
            self.tensor_id[name]
            for name in nodes[members[-1]].outputs
            if name and (self.consumers[self.tensor_id[name]] or self.tensor_id[name] in self.graph_outputs)
        }
        return tuple(sorted(inputs)), tuple(sorted(outputs))

    def tensor_home(self, tid: int, loc_of_node) -> int:
        producer = self.producer[tid]
        return self.root if producer < 0 else loc_of_node[producer]

    def tensor_transfers(self, tid: int, loc_of_node) -> list[tuple[int, int, float]]:
        """(from, to, us) for each copy of a tensor a complete assignment of nodes implies: each
        copy between two places once, however many readers lie beyond it (as the schedule copies)."""
        src = self.tensor_home(tid, loc_of_node)
        destinations = {loc_of_node[c] for c in self.consumers[tid]}
        if tid in self.graph_outputs:
            destinations.add(self.root)
        held, copies = 1 << src, []
        for dst in sorted(destinations):
            if dst == src:
                continue
            fresh = []
            for left, reached, latency, per_byte in reversed(self.hops[src][dst]):
                if reached >= 0 and held >> reached & 1:
                    break
                fresh.append((left, reached, latency + self.tensor_bytes[tid] * per_byte))
                if reached >= 0:
                    held |= 1 << reached
            copies.extend(reversed(fresh))
        return copies
