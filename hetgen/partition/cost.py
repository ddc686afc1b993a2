"""The cost model: every figure comes from the platform, optionally scaled by measurement.

    group time    = scale * (launch_us + max(flops / (peak_gflops * 1e3 * efficiency),
                                             bytes / (bandwidth_gbps * 1e3)))          [us]
    on an accelerator that runs one group per invocation (hetgen/lower/invocation.py, the rule
    lowering follows), its weights are loaded by DMA before it computes from local memory:
    group time    = scale * (launch_us + flops / (peak_gflops * 1e3 * efficiency)
                             + weight bytes / (bandwidth_gbps * 1e3))
    transfer time = sum over the links on the tree path between two targets of
                    (latency_us + bytes / (bandwidth_gbps * 1e3))                      [us]

A link belongs to the target below it (`Target.link`: from its controlling parent); a child with
no link shares its parent's memory, so crossing that edge is free. A composite and its host sit at
the same place in the tree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hetgen.errors import PlacementError
from hetgen.ir import Graph, Node
from hetgen.lower.invocation import one_unit_per_invocation, weight_bytes
from hetgen.ops.base import OpInstance
from hetgen.ops.registry import op_def
from hetgen.platform.model import CostFigures, Link, Platform, Target


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
INTEGER_OPS = frozenset({"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"})


def peak_gops(figures: CostFigures, nodes: Iterable[Node] = ()) -> float:
    """The arithmetic throughput a group reaches: int8 for an integer kernel on an int8 datapath."""
    head = next(iter(nodes), None)
    if head is not None and head.op in INTEGER_OPS and figures.peak_int8_gops:
        return figures.peak_int8_gops
    return figures.peak_gflops


def kernel_us(
    figures: CostFigures, work: Work, efficiency: float = 1.0, scale: float = 1.0, nodes: Iterable[Node] = ()
) -> float:
    compute = work.flops / (peak_gops(figures, nodes) * 1e3 * efficiency)
    memory = work.bytes / (figures.bandwidth_gbps * 1e3)
    return scale * (figures.launch_us + max(compute, memory))


def group_us(target: Target, work: Work, efficiency: float, scale: float, graph: Graph, nodes: Iterable[Node]) -> float:
    """A placement group's time on `target`.

    Where lowering runs each group as its own invocation (hetgen/lower/invocation.py), the group
    loads its weights into local memory at the device's DMA rate (its `bandwidth_gbps`), then
    computes from local memory; its activations arrive and leave as the placement's transfers.
    Elsewhere a kernel takes the longer of its compute and its memory traffic.
    """
    figures = target.figures
    nodes = tuple(nodes)
    if not one_unit_per_invocation(target):
        return kernel_us(figures, work, efficiency, scale, nodes)
    compute = work.flops / (peak_gops(figures, nodes) * 1e3 * efficiency)
    load = weight_bytes(graph, nodes) / (figures.bandwidth_gbps * 1e3)
    return scale * (figures.launch_us + compute + load)


def link_us(link: Link, nbytes: float) -> float:
    return link.latency_us + nbytes / (link.bandwidth_gbps * 1e3)


def format_bytes(nbytes: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{int(nbytes)} B"


class Topology:
    """The platform tree seen as places tensors live and the links between them."""

    def __init__(self, platform: Platform):
        self.root = platform.root.controller()
        self._parent: dict[str, str] = {}
        self._link: dict[str, Link | None] = {}
        self._depth: dict[str, int] = {platform.root.path_str: 0}
        self._visit(platform.root)

    def _visit(self, target: Target) -> None:
        children = ([target.host] if target.host is not None else []) + list(target.devices)
        for child in children:
            self._parent[child.path_str] = target.path_str
            self._link[child.path_str] = child.link
            self._depth[child.path_str] = self._depth[target.path_str] + 1
            self._visit(child)

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
        return sum(link_us(link, nbytes) for link in self.route(src, dst))


def _signature(node: Node, graph: Graph) -> tuple:
    attrs = tuple(
        (key, (value.shape, value.dtype.str, value.tobytes()) if hasattr(value, "tobytes") else value)
        for key, value in node.attrs
    )
    inputs = tuple((graph.types.get(n), graph.is_constant(n)) if n else None for n in node.inputs)
    outputs = tuple(graph.types.get(n) if n else None for n in node.outputs)
    return node.op, attrs, inputs, outputs


class WorkEstimator:
    """Flops and bytes of each node, from its lowering when it has one, else from its shapes.

    Results are cached per (operator, attributes, tensor types): big graphs repeat a few layers.
    """

    def __init__(self, graph: Graph):
        self.graph = graph
        self._cache: dict[tuple, Work] = {}

    def node_work(self, node: Node) -> Work:
        key = _signature(node, self.graph)
        try:
            work = self._cache.get(key)
        except TypeError:  # an attribute value that cannot be hashed: do not cache this node
            return self._lowered(node) or self._estimated(node)
        if work is None:
            work = self._lowered(node) or self._estimated(node)
            self._cache[key] = work
        return work

    def _lowered(self, node: Node) -> Work | None:
        definition = op_def(node.op)
        if definition is None:
            return None
        try:
            kernel = definition.lower(OpInstance.of(node, self.graph))
        except Exception:  # noqa: BLE001 - any lowering failure only means "estimate from shapes"
            return None
        if kernel.flops <= 0 and kernel.bytes_accessed <= 0:
            return None
        return Work(float(kernel.flops), float(kernel.bytes_accessed))

    def _estimated(self, node: Node) -> Work:
        types = self.graph.types
        ins = [types[n] for n in node.inputs if n and n in types]
        outs = [types[n] for n in node.outputs if n and n in types]
        out_size = sum(t.size for t in outs)
        flops = float(max(out_size, sum(t.size for t in ins)))
        if node.op in ("Conv", "ConvTranspose") and len(ins) >= 2:
            source = out_size if node.op == "Conv" else ins[0].size
            flops = 2.0 * source * math.prod(ins[1].shape[1:])
        elif node.op == "MatMul" and len(ins) >= 2 and ins[0].rank >= 1:
            flops = 2.0 * out_size * ins[0].shape[-1]
        elif node.op == "Gemm" and len(ins) >= 2 and ins[0].rank == 2:
            flops = 2.0 * out_size * ins[0].shape[0 if node.attr("transA", 0) else 1]
        return Work(flops, float(sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)))


def group_work(estimator: WorkEstimator, nodes: Iterable[Node]) -> Work:
    """A fused group's work: its nodes' flops, and bytes less the intermediates kept on chip."""
    nodes = list(nodes)
    works = [estimator.node_work(node) for node in nodes]
    flops = sum(w.flops for w in works)
    total_bytes = sum(w.bytes for w in works)
    if len(nodes) == 1:
        return Work(flops, total_bytes)
    types = estimator.graph.types
    produced = {name for node in nodes[:-1] for name in node.outputs if name and name in types}
    read = {name for node in nodes for name in node.inputs if name and name not in produced and name in types}
    written = {name for name in nodes[-1].outputs if name and name in types}
    external = sum(types[name].nbytes for name in read | written)
    internal = sum(types[name].nbytes for name in produced)
    return Work(flops, float(max(total_bytes - 2 * internal, external)))
