"""The cost model: every figure comes from the platform, optionally scaled by measurement.

    group time    = scale * (launch_us + max(flops / (peak_gflops * 1e3 * efficiency),
                                             bytes / (bandwidth_gbps * 1e3)))          [us]
    on a CPU controller whose program has a worker pool of T threads (its own `threads:`, else
    `options.threads`; none on bare metal: hetgen.platform.threads), the kernel's compute
    shares it as its lowering split it (`Kernel.parallel`, hetgen/ops/_parallel.py), its memory
    traffic does not (the threads share one memory bus):
    group time    = scale * (launch_us + max(flops / (peak_gflops * 1e3 * efficiency) / P,
                                             bytes / (bandwidth_gbps * 1e3))
                             + calls * POOL_CALL_US + barriers * POOL_BARRIER_US)      [us]
                    P = tasks / ceil(tasks / min(T, tasks)) for a kernel cut into fixed tasks;
                        for a GEMM call (hg_gemm.c): 1 below SPLIT_MACS multiply-adds or with
                        fewer panels than T on the side it splits, else panels / ceil(panels / T);
                        1 for a kernel that never splits (and then no pool cost)
                    calls = the hg_parallel_for calls that hand work out (one per split GEMM call)
                    barriers = the barriers between the phases of hg_parallel_phases calls (a
                    recurrent layer's steps)
                    A unit is priced as the kernel the program runs: the search prices the kernel
                    table's, and once the groups are placed the kernel choice stage
                    (hetgen/partition/choices.py) re-prices each CPU group as its chosen variants:
                    a Winograd Conv at Winograd's work and split (hetgen/spec/variants.py), a
                    blocked (NCHW[V]c) unit at its blocked kernel's, each reorder at the edge of
                    a blocked run as a kernel of its own in the group it serves
    on a root controller with memory banks (`memories:`), once lowering has put each buffer in a
    bank, `bytes / (bandwidth_gbps * 1e3)` becomes the sum over the banks its buffers, scratch and
    weights live in of bank.access_us(its share of the bytes, its accesses there)
    (hetgen/partition/choices.py `banked`; the search compares placements at the plain figure)
    on an accelerator that runs one group per invocation (hetgen/spec/invocation.py, the rule
    lowering follows), its units' tile plans (hetgen/spec/tiling.py) timed command by command:
    group time    = scale * (launch_us + sum over units of plan_us(plan, rates)), where a tile's
                    compute takes max(flops / (peak_gflops * 1e3 * efficiency),
                    its SRAM bytes / (local_gbps * 1e3)), its DMA (input blocks with halos,
                    weight slices, output blocks) bytes / (bandwidth_gbps * 1e3), each command
                    command_us more, and DMA overlaps compute where the plan double-buffers
    transfer time = sum over the copies between places on the tree path between two targets of
                    (latency_us + bytes / (bandwidth_gbps * 1e3))      over the copy's link, if any
                  + bytes / (bandwidth_gbps * 1e3)       by an accelerator's DMA, where one end is
                                                         its local memory                     [us]

A link belongs to the target below it (`Target.link`: from its controlling parent); a child with
no link shares its parent's memory, so crossing that edge costs only what an accelerator's DMA
engine takes to move the bytes into or out of its local memory. A composite and its host sit at the
same place in the tree. A tensor crosses each copy once, however many readers lie beyond it (the
schedule copies it once per device and keeps it there): `Topology.copies` lists the copies, and
the search and `SearchSpace.tensor_transfers` charge each one once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hetgen.errors import PlacementError
from hetgen.ir import Graph, Node
from hetgen.ops._parallel import POOL_BARRIER_US, POOL_CALL_US, SERIAL, Parallel
from hetgen.platform.model import CostFigures, Link, Platform, Role, Target
from hetgen.platform.threads import program_threads
from hetgen.spec.invocation import (
    group_plans,
    kernel_units_of,
    one_unit_per_invocation,
    peak_gops,
    tile_rates,
    unit_inputs,
    weight_load_bytes,
)
from hetgen.spec.table import KernelTable
from hetgen.spec.tile_shapes import tensor_names
from hetgen.spec.tiling import Unfit, plan_us


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float


@dataclass(frozen=True)
class Calibration:
    """Measured correction factors on group time, keyed by target path or kind name."""

    scales: Mapping[str, float] = field(default_factory=dict)

    def scale_for(self, target: Target) -> float:
        for key in (target.path_str, target.kind.name, target.kind.parent):
            if key is not None and key in self.scales:
                return self.scales[key]
        return 1.0


def calibrate(measured: Mapping[str, float], base: Calibration | None = None) -> Calibration:
    """Fold measured `actual / estimated` time ratios (per kind name or target path) into a Calibration."""
    scales = dict(base.scales) if base is not None else {}
    for key, factor in measured.items():
        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise PlacementError(f"calibration factor for {key!r} must be a positive number, not {factor!r}")
        scales[key] = scales.get(key, 1.0) * float(factor)
    return Calibration(scales)


# Integer kernels: priced at the kind's int8 throughput (`peak_int8_gops`) where it declares one.
def kernel_us(
    figures: CostFigures,
    work: Work,
    efficiency: float = 1.0,
    scale: float = 1.0,
    nodes: Iterable[Node] = (),
    parallel: Parallel = SERIAL,
    threads: int = 1,
    memory_us: float | None = None,
) -> float:
    """A kernel's time on a CPU: the longer of its compute and its memory traffic; with a worker
    pool of `threads`, its compute split as `parallel` says and each pool call's cost added.
    `memory_us`: its traffic's time where the caller prices it per memory bank (a banked root:
    hetgen/partition/choices.py `banked`), else its bytes at the CPU's one bandwidth."""
    compute = work.flops / (peak_gops(figures, nodes) * 1e3 * efficiency)
    memory = work.bytes / (figures.bandwidth_gbps * 1e3) if memory_us is None else memory_us
    calls = parallel.pool_calls(threads)
    if not calls:
        return scale * (figures.launch_us + max(compute, memory))
    pool_us = calls * POOL_CALL_US + parallel.barriers(threads) * POOL_BARRIER_US
    return scale * (figures.launch_us + max(compute / parallel.speedup(threads), memory) + pool_us)


def pool_threads(platform: Platform, target: Target) -> int:
    """The worker-pool threads a kernel on `target` runs with: its controller's own count (its
    `threads:`, else `options.threads`), which codegen writes into that program's
    hg_threads_config.h (hetgen/codegen/project.py `_threads_config`); 1 on an accelerator (its own
    figures time it) and where there is no pool (bare metal: hetgen.platform.threads)."""
    return program_threads(platform, target)


def unit_parallel(kernels: KernelTable, nodes: tuple[Node, ...]) -> Parallel:
    """How the one kernel a controller runs for a group (a node, a head with its fused
    activations, a multi-operator unit: partition/fused.py) shares the pool."""
    names = tuple(node.name for node in nodes)
    pattern = kernels.fused(names) if len(names) > 1 else None
    spec = kernels.units.get(pattern.names if pattern is not None else names)
    return spec.parallel if spec is not None else SERIAL


def group_us(
    target: Target,
    work: Work,
    efficiency: float,
    scale: float,
    graph: Graph,
    nodes: Iterable[Node],
    kernels: KernelTable,
    threads: int = 1,
    crossing: frozenset[str] = frozenset(),
) -> float:
    """A placement group's time on `target`; `crossing`: the tensors it reads from or writes for
    another target (the controller's), which a tiled device with `linear_burst_bytes` DMAs from
    and to DRAM in the controller's linear layout (hetgen/spec/work.py linear_bytes).

    Where lowering runs each group as its own invocation on a device with local SRAM
    (hetgen/spec/invocation.py), the group runs its units' tile plans (hetgen/spec/tiling.py): the
    plans' commands timed with the device's figures, DMA (tile loads incl. halos and weight
    re-loads, stores) overlapping compute where the plan double-buffers. Its activations arrive
    and leave as the placement's transfers. Elsewhere a kernel takes the longer of its compute and
    its memory traffic, its compute shared by `threads` (`pool_threads`) as its kernel splits.
    """
    figures = target.figures
    nodes = tuple(nodes)
    if not one_unit_per_invocation(target):
        parallel = unit_parallel(kernels, nodes) if threads > 1 else SERIAL
        return kernel_us(figures, work, efficiency, scale, nodes, parallel, threads)
    total = 0.0
    units = kernel_units_of(nodes, graph, kernels)
    for (chain, _), plan in zip(units, group_plans(nodes, graph, target, kernels)):
        if isinstance(plan, Unfit):
            raise PlacementError(f"{target.path_str}: {plan.reason}")
        linear = linear_positions(chain, kernels, crossing, graph) if crossing else frozenset()
        total += plan_us(plan, tile_rates(target, efficiency, chain), linear)
    return scale * (figures.launch_us + total)


def crossing_us(
    target: Target,
    efficiency: float,
    scale: float,
    graph: Graph,
    nodes: Iterable[Node],
    kernels: KernelTable,
    crossing: frozenset[str],
) -> float:
    """What a group on a tiled device whose controller's tensors stay in DRAM (`linear_burst_bytes`)
    takes more because it reads or writes the tensors `crossing` there, in the controller's linear
    layout, rather than as the device's own feature maps: group_us with them less group_us without
    (0 elsewhere). The search prices a group alone; the placement, once it knows which tensors
    cross, adds this (hetgen/partition/assemble.py), as lowering marks those DMAs for the simulator."""
    nodes = tuple(nodes)
    if not crossing or not target.figures.linear_burst_bytes or not one_unit_per_invocation(target):
        return 0.0
    extra = 0.0
    units = kernel_units_of(nodes, graph, kernels)
    for (chain, _), plan in zip(units, group_plans(nodes, graph, target, kernels)):
        linear = linear_positions(chain, kernels, crossing, graph)
        if linear and not isinstance(plan, Unfit):
            rates = tile_rates(target, efficiency, chain)
            extra += plan_us(plan, rates, linear) - plan_us(plan, rates)
    return scale * extra


def linear_positions(
    chain: Sequence[Node], kernels: KernelTable, crossing: frozenset[str], graph: Graph
) -> frozenset[tuple[str, int]]:
    """The positions (`in0`, `out0`, ...: what a unit's plan names its blocks by) of the unit's
    tensors among `crossing`, each with its element bytes."""
    names = tensor_names(chain, unit_inputs(chain, kernels))
    return frozenset(
        (position, graph.types[name].dtype.itemsize) for position, name in names.items() if name in crossing
    )


def weight_load_us(
    target: Target, graph: Graph, nodes: Iterable[Node], scale: float, kernels: KernelTable
) -> tuple[int, float]:
    """The weight bytes a group on `target` loads into local memory by DMA (re-loads across tiles
    included) and their DMA time: part of the group's time, shown on its own by explain. (0, 0.0)
    where the group runs from its controller's memory."""
    if not one_unit_per_invocation(target):
        return 0, 0.0
    loaded = weight_load_bytes(list(nodes), graph, target, kernels)
    return loaded, scale * loaded / ((target.figures.weight_gbps or target.figures.bandwidth_gbps) * 1e3)


def link_us(link: Link, nbytes: float) -> float:
    return link.latency_us + nbytes / (link.bandwidth_gbps * 1e3)


def format_bytes(nbytes: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{int(nbytes)} B"


def dma_gbps(target: Target) -> float | None:
    """The rate of the DMA engine that moves tensors into and out of `target`'s local memory: an
    accelerator with a bounded local memory has one (its `bandwidth_gbps` figure); others share
    their controller's memory (None)."""
    if target.role is Role.ACCELERATOR and target.memory_bytes is not None:
        return target.figures.bandwidth_gbps
    return None


@dataclass(frozen=True)
class Hop:
    """One copy of a tensor between two places (a controller's memory, an accelerator's local
    memory): over the link of `below` when it has one, by `below`'s DMA engine when it is an
    accelerator with local memory (hg_sim.c counts both)."""

    src: str
    dst: str
    below: str  # the deeper end of the tree edge crossed
    link: Link | None
    dma_gbps: float | None

    @property
    def latency_us(self) -> float:
        return self.link.latency_us if self.link is not None else 0.0

    @property
    def us_per_byte(self) -> float:
        link = 1.0 / (self.link.bandwidth_gbps * 1e3) if self.link is not None else 0.0
        dma = 1.0 / (self.dma_gbps * 1e3) if self.dma_gbps else 0.0
        return link + dma

    def us(self, nbytes: float) -> float:
        return self.latency_us + nbytes * self.us_per_byte


class Topology:
    """The platform tree seen as places tensors live and the links between them."""

    def __init__(self, platform: Platform):
        self.root = platform.root.controller()
        self._parent: dict[str, str] = {}
        self._link: dict[str, Link | None] = {}
        self._target: dict[str, Target] = {platform.root.path_str: platform.root}
        self._depth: dict[str, int] = {platform.root.path_str: 0}
        self._copies: dict[tuple[str, str], tuple[Hop, ...]] = {}  # `copies`, each pair worked out once
        self._visit(platform.root)

    def _visit(self, target: Target) -> None:
        children = ([target.host] if target.host is not None else []) + list(target.devices)
        for child in children:
            self._parent[child.path_str] = target.path_str
            self._link[child.path_str] = child.link
            self._target[child.path_str] = child
            self._depth[child.path_str] = self._depth[target.path_str] + 1
            self._visit(child)

    def place(self, path: str) -> str:
        """Where a target's tensors live: a composite's are in its host's memory."""
        target = self._target[path]
        return target.host.path_str if target.host is not None else path

    def copies(self, src: str, dst: str) -> tuple[Hop, ...]:
        """The copies a tensor makes from `src` to `dst`, in order: one per tree edge between two
        different places that moves it over a link or through an accelerator's DMA."""
        found = self._copies.get((src, dst))
        if found is None:
            found = self._copies[src, dst] = self._walked_copies(src, dst)
        return found

    def _walked_copies(self, src: str, dst: str) -> tuple[Hop, ...]:
        up, down = [src], [dst]
        while up[-1] != down[-1]:
            if self._depth[up[-1]] >= self._depth[down[-1]]:
                up.append(self._parent[up[-1]])
            else:
                down.append(self._parent[down[-1]])
        nodes = up + down[-2::-1]
        hops = []
        for a, b in zip(nodes, nodes[1:]):
            below = a if self._depth[a] > self._depth[b] else b
            link, dma = self._link[below], dma_gbps(self._target[below])
            if self.place(a) != self.place(b) and (link is not None or dma is not None):
                hops.append(Hop(self.place(a), self.place(b), below, link, dma))
        return tuple(hops)

    def route(self, src: str, dst: str) -> tuple[Link, ...]:
        """The links a tensor crosses from `src` to `dst` (both directions count the same)."""
        return tuple(link for _, link in self.hops(src, dst))

    def hops(self, src: str, dst: str) -> tuple[tuple[str, Link], ...]:
        """(target below the link, link) for each link on the way from `src` to `dst`."""
        up: list[tuple[str, Link | None]] = []
        down: list[tuple[str, Link | None]] = []
        a, b = src, dst
        while a != b:
            if self._depth[a] >= self._depth[b]:
                up.append((a, self._link[a]))
                a = self._parent[a]
            else:
                down.append((b, self._link[b]))
                b = self._parent[b]
        return tuple((below, link) for below, link in (*up, *reversed(down)) if link is not None)

    def transfer_us(self, src: str, dst: str, nbytes: float) -> float:
        return sum(hop.us(nbytes) for hop in self.copies(src, dst))
