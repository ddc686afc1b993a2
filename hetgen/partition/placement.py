"""The value the partition stage hands to lowering: which group of operators runs where, and why.

Everything here is frozen and printable. `Placement.verify(graph)` is the cheap invariant check run
between stages: a failure is a hetgen bug (InternalError), never the user's problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hetgen.errors import InternalError
from hetgen.ir import Graph
from hetgen.spec.table import KernelTable

MODES = ("cost", "greedy")


@dataclass(frozen=True)
class Alternative:
    """Another way to run exactly a group's operators, everything else left as placed.

    `cost_us` is the group's time on that target plus the transfers of the group's inputs and
    outputs that this choice causes, so it compares directly with the chosen option's local cost;
    `delta_us` is how much the whole placement's total would grow with it; `why` says what it costs.
    """

    target: str
    label: str
    cost_us: float
    delta_us: float = 0.0
    why: str = ""


@dataclass(frozen=True)
class Refusal:
    """Why one target did not take one operator: a pattern's predicate said no (dtype, kernel size,
    memory fit, with its numbers), or no pattern of that target matches the operator at all."""

    node: str
    target: str
    label: str  # the refusing pattern; "" when no pattern of the target matches the operator
    reason: str

    @property
    def text(self) -> str:
        return f"[{self.label}] {self.reason}" if self.label else self.reason


@dataclass(frozen=True)
class Group:
    """Operators that run together as one launch on one target (a matched pattern)."""

    name: str
    target: str  # target path, e.g. "soc/vdevice0/npu0"
    nodes: tuple[str, ...]  # node names, in graph order
    label: str  # the pattern label ("*" for a controller's any-operator fallback)
    cost_us: float  # estimated time of the launch on its target
    alternatives: tuple[Alternative, ...] = ()  # sorted by cost_us
    reason: str = ""
    refused: tuple[Refusal, ...] = ()  # patterns of other targets (or its own) that refused its operators
    launch_us: float = 0.0  # the launch overhead the cost model charged inside cost_us
    weight_bytes: int = 0  # weights its invocation loads into an accelerator's local memory
    weight_us: float = 0.0  # their DMA time, inside cost_us
    tilings: tuple[Tiling, ...] = ()  # on a tiled accelerator: each kernel unit's tile plan, as priced
    efficiency: float = 1.0  # the pattern's efficiency the cost model priced it at
    # Where the kernel choice stage (hetgen/partition/choices.py) re-priced it: the variants its
    # kernels run as (reorders included), and what the search priced the kernel table's kernels at.
    variants: tuple[str, ...] = ()
    searched_us: float | None = None
    scale: float = 1.0  # the calibration's scale on its target, as the cost model priced it
    # On a root with memory banks (hetgen/partition/choices.py `banked`): its traffic's time in
    # each bank it touches, (bank, us), the memory term inside cost_us; () elsewhere.
    bank_us: tuple[tuple[str, float], ...] = ()
    # On a device that keeps the tensors it shares with other targets in DRAM, linear (the device
    # model's linear_burst_bytes): those tensors (`crossing_tensors`), priced so inside cost_us;
    # lowering marks their DMAs (Work.linear) for the simulator. () elsewhere.
    crossing: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Tiling:
    """How one kernel unit of a group runs on an accelerator with SRAM (hetgen/spec/tiling.py)."""

    unit: str  # the unit's head node
    split: str  # "whole", "rows", "channels", "rows x channels", "rows x columns", "chunks", ...
    tile_shape: tuple[int, ...]  # a full tile's output block
    count: int  # tiles
    load_bytes: int  # DMA into SRAM: inputs with their halos, weights with their re-loads
    store_bytes: int  # DMA out of SRAM
    double_buffered: bool
    sram_bytes: int  # the tile buffers
    residual_bytes: int = 0  # of load_bytes, a fused residual Add's blocks (a conv_residual unit)

    @property
    def dma_bytes(self) -> int:
        return self.load_bytes + self.store_bytes


@dataclass(frozen=True)
class Cascade:
    """Consecutive groups on one tiled accelerator run stripe by stripe through its SRAM
    (hetgen/spec/cascade.py), chosen over running them layer by layer by their price
    (hetgen/partition/cascades.py)."""

    target: str
    groups: tuple[str, ...]  # the groups' names, producer first
    units: tuple[str, ...]  # their kernel units' head nodes
    stripe: int  # output rows of the last layer a stripe
    stripes: int
    rows: tuple[int, ...]  # per layer: output rows it produces a stripe
    buffer_rows: tuple[int, ...]  # per layer: rows of its input buffer (rolling, but the first's)
    sram_bytes: int  # the cascade's buffers and weights
    dma_bytes: int  # first input, last output, residuals, weights
    move_bytes: int  # SRAM to SRAM: each stripe's kept rows and its producers' new rows into the windows
    cost_us: float  # one invocation: its launch and its stripes
    layer_sram_bytes: int  # layer by layer: the largest tile plan's buffers
    layer_dma_bytes: int  # layer by layer: every tile plan's loads and stores
    layer_us: float  # layer by layer: the groups' cost

    @property
    def saved_bytes(self) -> int:
        return self.layer_dma_bytes - self.dma_bytes


@dataclass(frozen=True)
class LinkUse:
    """One link a transfer crosses: the link of target `below` (from its controlling parent)."""

    below: str
    bandwidth_gbps: float
    latency_us: float


@dataclass(frozen=True)
class DmaUse:
    """An accelerator's DMA engine moving a copy into or out of its local memory."""

    target: str
    bandwidth_gbps: float


@dataclass(frozen=True)
class Transfer:
    """One copy of a tensor between two places (a tensor crosses each copy once, however many
    readers lie beyond it): over a link, by an accelerator's DMA engine, or both."""

    tensor: str
    src: str
    dst: str
    bytes: int
    cost_us: float
    links: tuple[LinkUse, ...] = ()  # the links crossed, from src towards dst
    dma: tuple[DmaUse, ...] = ()  # the accelerators whose DMA engine moves it into or out of local memory


@dataclass(frozen=True)
class Placement:
    groups: tuple[Group, ...]  # in a valid execution order (each after everything it reads)
    transfers: tuple[Transfer, ...]
    total_us: float  # the program's makespan (hetgen/spec/timeline.py): at most groups + transfers
    mode: str  # "cost" or "greedy"
    unclaimed: tuple[tuple[str, str], ...] = ()  # (node name, why no accelerator could take it)
    exact: bool = (
        True  # the search's objective (the serial sum, total_us's proxy) at its optimum: no beam cut (greedy: False)
    )
    # Each accelerator's refusal of each unclaimed node: the structure behind `unclaimed`'s text.
    unclaimed_refusals: tuple[Refusal, ...] = ()
    search_note: str = ""  # when not exact in cost mode: why, and what bounded the search (explain prints it)
    # How good the search's result is (hetgen/partition/optimal.py, reported.py): its makespan at
    # the search's prices (before cascades and kernel choices re-price it), whether `total_us`, the
    # total it reports, is proven the least of any placement, and the lower bound at the search's
    # prices it is measured against (total_us where optimal). 0.0: not judged (greedy mode, or by hand).
    searched_us: float = 0.0
    optimal: bool = False
    bound_us: float = 0.0
    # what cost mode minimised: "latency" (the makespan), "energy" (per inference) or "throughput"
    # (the period of frames pipelined across devices)
    objective: str = "latency"

    @property
    def gap(self) -> float | None:
        """How much faster than this placement the best one may be (0.0 where proven optimal), as
        a fraction of the bound; None where not judged."""
        if not self.bound_us:
            return None
        return 0.0 if self.optimal else self.searched_us / self.bound_us - 1.0

    # The kernel table the placement was priced with: lowering emits exactly its kernels and tilings.
    kernels: KernelTable | None = field(default=None, repr=False, compare=False)
    # Each kernel unit as the program runs it (hetgen/partition/choices.py's Choices): the variant
    # its groups are priced with, which lowering takes as it is.
    choices: object | None = field(default=None, repr=False, compare=False)
    # Chains of groups on a tiled accelerator that run stripe by stripe (hetgen/partition/cascades.py).
    cascades: tuple[Cascade, ...] = ()
    # Its energy per inference (hetgen/partition/energy.py EnergyReport) where the platform
    # declares energy figures; None elsewhere.
    energy: object | None = field(default=None, repr=False, compare=False)
    # For the throughput objective, the pipeline (hetgen/partition/throughput.py); None elsewhere.
    pipeline: object | None = field(default=None, repr=False, compare=False)
    _group_by_node: Mapping[str, Group] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_node: dict[str, Group] = {}
        for group in self.groups:
            for node in group.nodes:
                by_node.setdefault(node, group)
        object.__setattr__(self, "_group_by_node", by_node)

    def group_of(self, node_name: str) -> Group:
        try:
            return self._group_by_node[node_name]
        except KeyError:
            raise KeyError(f"node {node_name!r} is not in this placement") from None

    def target_of(self, node_name: str) -> str:
        return self.group_of(node_name).target

    def targets(self) -> tuple[str, ...]:
        """The target paths that run at least one group, in first-use order."""
        return tuple(dict.fromkeys(group.target for group in self.groups))

    def verify(self, graph: Graph) -> Placement:
        """Check the invariants lowering relies on; raise InternalError (a hetgen bug) otherwise."""
        if self.mode not in MODES:
            raise InternalError(f"placement mode {self.mode!r} is not one of {MODES}")
        order = {node.name: index for index, node in enumerate(graph.nodes)}
        seen: dict[str, str] = {}
        for group in self.groups:
            if not group.nodes:
                raise InternalError(f"group {group.name} is empty")
            for name in group.nodes:
                if name not in order:
                    raise InternalError(f"group {group.name} places unknown node {name!r}")
                if name in seen:
                    raise InternalError(f"node {name!r} is placed twice ({seen[name]} and {group.name})")
                seen[name] = group.name
            if [order[name] for name in group.nodes] != sorted(order[name] for name in group.nodes):
                raise InternalError(f"group {group.name} lists its nodes out of graph order")
        missing = [node.name for node in graph.nodes if node.name not in seen]
        if missing:
            raise InternalError(f"nodes left unplaced: {', '.join(missing[:10])}")
        _check_acyclic(self.groups, graph)
        expected = sum(g.cost_us for g in self.groups) + sum(t.cost_us for t in self.transfers)
        # Devices run concurrently (hetgen/spec/timeline.py): the total is at most the sum of its parts.
        if not (self.total_us >= 0.0 and self.total_us <= expected * (1 + 1e-9) + 1e-6):
            raise InternalError(f"placement total {self.total_us} us exceeds the sum of its parts ({expected} us)")
        return self


def refusal_text(refusals: tuple[Refusal, ...]) -> str:
    """ "target: [label] reason; ..." — one line of reasons, as `Placement.unclaimed` holds them."""
    return "; ".join(f"{r.target}: {r.text}" for r in refusals)


def _check_acyclic(groups: tuple[Group, ...], graph: Graph) -> None:
    """Groups must form a DAG, and must run in the listed order.

    An acyclic group graph implies every group is convex: a path that leaves a group and re-enters
    it would be a cycle through the groups it passes.
    """
    group_of = {name: index for index, group in enumerate(groups) for name in group.nodes}
    producer = {out: group_of[node.name] for node in graph.nodes for out in node.outputs if out}
    for node in graph.nodes:
        reader = group_of[node.name]
        for tensor in node.inputs:
            writer = producer.get(tensor)
            if writer is None or writer == reader:
                continue
            if writer > reader:
                cycle = _find_cycle(groups, graph, group_of, producer)
                if cycle:
                    path = " -> ".join(groups[i].name for i in cycle)
                    raise InternalError(f"groups are not convex: a path leaves and re-enters a group ({path})")
                raise InternalError(
                    f"group {groups[reader].name} is listed before group {groups[writer].name}, which it reads"
                )


def _find_cycle(groups, graph, group_of, producer) -> list[int]:
    edges: dict[int, set[int]] = {index: set() for index in range(len(groups))}
    for node in graph.nodes:
        reader = group_of[node.name]
        for tensor in node.inputs:
            writer = producer.get(tensor)
            if writer is not None and writer != reader:
                edges[writer].add(reader)
    state = dict.fromkeys(edges, 0)  # 0 new, 1 on the stack, 2 done
    for root in edges:
        if state[root]:
            continue
        stack = [(root, iter(sorted(edges[root])))]
        path = [root]
        state[root] = 1
        while stack:
            current, successors = stack[-1]
            step = next(successors, None)
            if step is None:
                state[current] = 2
                stack.pop()
                path.pop()
            elif state[step] == 1:
                return path[path.index(step) :] + [step]
            elif state[step] == 0:
                state[step] = 1
                stack.append((step, iter(sorted(edges[step]))))
                path.append(step)
    return []


def crossing_tensors(graph: Graph, target_of: Mapping[str, str], nodes: tuple[str, ...]) -> frozenset[str]:
    """The tensors a group of `nodes` reads from, or writes for, another target (`target_of`: each
    placed node's target): graph inputs and outputs, and tensors of groups placed elsewhere; not
    constants. On a device that keeps its controller's tensors in DRAM (the device model's
    linear_burst_bytes) these are the ones its DMAs fetch from there, in the controller's layout:
    the cost model prices them so (`cost.crossing_us`) and lowering marks their DMAs (`Work.linear`)."""
    inside = set(nodes)
    where = target_of[nodes[0]]
    producer = {out: node.name for node in graph.nodes for out in node.outputs if out}
    readers: dict[str, list[str]] = {}
    for node in graph.nodes:
        for name in node.inputs:
            if name:
                readers.setdefault(name, []).append(node.name)
    outputs = set(graph.outputs)
    crossing = set()
    for node in graph.nodes:
        if node.name not in inside:
            continue
        for name in node.inputs:
            if not name or name in graph.constants:
                continue
            source = producer.get(name)
            if source is None or (source not in inside and target_of.get(source) != where):
                crossing.add(name)
        for name in node.outputs:
            if name and (name in outputs or any(target_of.get(r, where) != where for r in readers.get(name, ()))):
                crossing.add(name)
    return frozenset(crossing)
