"""The kernel table: every operator lowered once, before placement, into typed, frozen specs.

Entry point: `build_kernel_specs(graph, platform) -> KernelTable`. For each node it holds the spec
of the node as a kernel of its own, and for each head that can absorb activations (`fusion.py`) the
spec of every unit it can form: its nodes, resolved epilogue, the lowered kernel (or why the
operator cannot be lowered), the work the cost model prices (flops, bytes), the scratch the kernel
needs and the work descriptor a simulated accelerator counts; and, per accelerator with a bounded
SRAM, each unit's tiling there (`tiles.py`); and the multi-operator units a CPU controller runs as one
kernel (fused attention, a residual Add in a Conv: `patterns.py`), which placement prices as one
group and lowering emits for exactly such a group (a residual unit also on a tiled accelerator
whose pattern table offers it, with its tiling there). Placement reads costs and memory fit from it as data;
lowering takes its kernels and tilings from it; nothing re-runs an operator lowering or a tiling
to learn a number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING

from hetgen.errors import InternalError
from hetgen.ir import Graph, Node
from hetgen.ops._parallel import SERIAL, Parallel
from hetgen.ops.base import Epilogue, Kernel, OpInstance, Unsupported
from hetgen.ops.registry import op_def
from hetgen.platform.model import Platform
from hetgen.spec.fusion import fusion_chains
from hetgen.spec.patterns import FusedPattern, fused_patterns
from hetgen.spec.signature import UnitKeys, same_constants
from hetgen.spec.tiles import residual_plans, tile_plans
from hetgen.spec.work import Work, instance_work, kernel_work

if TYPE_CHECKING:
    from hetgen.lower.tiling import TilePlan, Unfit

__all__ = ["KernelSpec", "KernelTable", "build_kernel_specs"]


@dataclass(frozen=True)
class KernelSpec:
    """One kernel unit: a head node and the activations fused into it as its epilogue."""

    nodes: tuple[str, ...]  # the head first, then the fused activations
    op: str  # the head's operator
    epilogue: tuple[Epilogue, ...]
    kernel: Kernel | None  # None when the operator cannot be lowered (`refusal` says why)
    refusal: str | None
    flops: float  # what the cost model prices: the kernel's figures, or estimated from the shapes
    bytes: float
    scratch_bytes: int  # the workspace the kernel needs besides its tensors (im2col, packing)
    device_work: Work | None  # what a simulated accelerator counts for the whole unit

    @property
    def parallel(self) -> Parallel:
        """How the kernel shares a controller's worker pool (its lowering's own split), for the cost model."""
        return self.kernel.parallel if self.kernel is not None else SERIAL


SPEC_FIELDS = tuple(f.name for f in fields(KernelSpec))  # "nodes" first


@dataclass(frozen=True)
class KernelTable:
    """The graph's kernel units, lowered, and their tilings on the platform's tiled accelerators."""

    graph: Graph  # the graph the specs were built from
    units: Mapping[tuple[str, ...], KernelSpec]  # every unit a placement can form, by its node names
    chains: Mapping[str, tuple[tuple[str, Epilogue], ...]]  # head -> the activations it may absorb
    # (tiled accelerator's path, unit) -> the unit's tiling there, or why none fits (`tiles.py`)
    plans: Mapping[tuple[str, tuple[str, ...]], TilePlan | Unfit] = field(default_factory=lambda: MappingProxyType({}))
    # multi-operator units (`patterns.py`) by their names, also in `units`; and by their node sets
    patterns: Mapping[tuple[str, ...], FusedPattern] = field(default_factory=lambda: MappingProxyType({}))
    pattern_of: Mapping[frozenset[str], FusedPattern] = field(default_factory=lambda: MappingProxyType({}))

    def fused(self, names: Iterable[str]) -> FusedPattern | None:
        """The pattern unit whose nodes are exactly `names` (a placement group), if there is one."""
        return self.pattern_of.get(frozenset(names)) if self.pattern_of else None

    def tile_plan(self, target_path: str, names: tuple[str, ...]) -> TilePlan | Unfit:
        """The tiling of unit `names` on the tiled accelerator `target_path`."""
        plan = self.plans.get((target_path, names))
        if plan is None:
            raise InternalError(
                f"the kernel table has no tiling of {' + '.join(names)} on {target_path}; "
                "it was built without the platform, or for operators the device's patterns do not name"
            )
        return plan

    def node(self, name: str) -> KernelSpec:
        """The spec of node `name` as a kernel of its own."""
        return self.units[(name,)]

    def unit(self, names: tuple[str, ...]) -> KernelSpec:
        spec = self.units.get(names)
        if spec is None:
            raise InternalError(f"the kernel table has no unit {' + '.join(names)}; fusion cut it differently")
        return spec

    def group_work(self, nodes: Iterable[Node]) -> tuple[float, float]:
        """A fused group's (flops, bytes): its nodes' flops, and bytes less the intermediates kept
        on chip."""
        nodes = list(nodes)
        pattern = self.fused(node.name for node in nodes)
        if pattern is not None:  # one kernel: the scores, transposes, sums never leave it
            spec = self.units[pattern.names]
            return spec.flops, spec.bytes
        specs = [self.node(node.name) for node in nodes]
        flops = sum(spec.flops for spec in specs)
        total_bytes = sum(spec.bytes for spec in specs)
        if len(nodes) == 1:
            return flops, total_bytes
        types = self.graph.types
        produced = {name for node in nodes[:-1] for name in node.outputs if name and name in types}
        read = {name for node in nodes for name in node.inputs if name and name not in produced and name in types}
        written = {name for name in nodes[-1].outputs if name and name in types}
        external = sum(types[name].nbytes for name in read | written)
        internal = sum(types[name].nbytes for name in produced)
        return flops, float(max(total_bytes - 2 * internal, external))


def build_kernel_specs(graph: Graph, platform: Platform | None = None) -> KernelTable:
    """Lower every node, and every fused unit it can head, once; with `platform`, plan the tiling
    of each unit its tiled accelerators may be given."""
    chains = fusion_chains(graph)
    by_name = {node.name: node for node in graph.nodes}
    units: dict[tuple[str, ...], KernelSpec] = {}
    keys = UnitKeys(graph)
    shared = SharedSpecs(graph, keys)
    for node in graph.nodes:
        members, epilogue = [node], []
        units[(node.name,)] = shared.spec(members, epilogue)
        for name, fused in chains[node.name]:
            members.append(by_name[name])
            epilogue.append(fused)
            units[tuple(n.name for n in members)] = shared.spec(members, epilogue)
    plans = tile_plans(graph, platform, units, keys) if platform is not None else {}
    patterns = {}
    for pattern in fused_patterns(graph, chains):
        spec = pattern_spec(pattern, graph)
        if spec.kernel is not None:  # one its kernel refuses stays separate operators
            units[pattern.names], patterns[pattern.names] = spec, pattern
    if platform is not None:  # a tiled accelerator may run a residual unit too (its own pattern table says)
        plans.update(residual_plans(graph, platform, patterns.values()))
    by_nodes = {frozenset(names): pattern for names, pattern in patterns.items()}
    return KernelTable(
        graph,
        MappingProxyType(units),
        MappingProxyType(chains),
        MappingProxyType(plans),
        MappingProxyType(patterns),
        MappingProxyType(by_nodes),
    )


def pattern_spec(pattern: FusedPattern, graph: Graph) -> KernelSpec:
    """A multi-operator unit's spec: its kernel's own figures; a residual unit also has the work a
    simulated device is asked to do (a Conv whose outputs get the residual added)."""
    instance = pattern.instance(graph)
    try:
        kernel, refusal = pattern.lower(instance), None
    except Unsupported as exc:
        kernel, refusal = None, str(exc)
    return KernelSpec(
        nodes=pattern.names,
        op=pattern.head.op,
        epilogue=pattern.epilogue,
        kernel=kernel,
        refusal=refusal,
        flops=float(kernel.flops) if kernel is not None else 0.0,
        bytes=float(kernel.bytes_accessed) if kernel is not None else 0.0,
        scratch_bytes=kernel.scratch_bytes if kernel is not None else 0,
        device_work=instance_work(instance) if kernel is not None and pattern.residual is not None else None,
    )


class SharedSpecs:
    """`unit_spec`, once per distinct unit (`signature.py`: what the spec key covers and why a
    refusal is never shared): a repeated layer gets the first copy's spec under its own names.
    Every field but `nodes` is copied, so a field that names tensors must be set here per unit."""

    def __init__(self, graph: Graph, keys: UnitKeys):
        self.graph, self.keys = graph, keys
        self._specs: dict[tuple, list[tuple[tuple, KernelSpec]]] = {}

    def spec(self, members: list[Node], epilogue: list[Epilogue]) -> KernelSpec:
        key = self.keys.spec_key(members, epilogue)
        if key is None:
            return unit_spec(members, epilogue, self.graph)
        constants = self.keys.constants(members)
        copies = self._specs.setdefault(key, [])
        for values, spec in copies:
            if same_constants(values, constants):
                return KernelSpec(
                    tuple(node.name for node in members), *(getattr(spec, name) for name in SPEC_FIELDS[1:])
                )
        spec = unit_spec(members, epilogue, self.graph)
        if spec.kernel is not None:
            copies.append((constants, spec))
        return spec


def lowered(head: Node, instance: OpInstance) -> tuple[Kernel | None, str | None]:
    """The kernel, or why this instance cannot be lowered (the lowering's own words)."""
    definition = op_def(head.op)
    if definition is None:
        return None, f"operator {head.op} is not supported"
    try:
        return definition.lower(instance), None
    except Unsupported as exc:
        return None, str(exc)


def unit_spec(members: list[Node], epilogue: list[Epilogue], graph: Graph) -> KernelSpec:
    head, last = members[0], members[-1]
    instance = OpInstance.of(head, graph, tuple(epilogue), outputs=last.outputs)
    kernel, refusal = lowered(head, instance)
    if kernel is not None and (kernel.flops > 0 or kernel.bytes_accessed > 0):
        flops, nbytes = float(kernel.flops), float(kernel.bytes_accessed)
    else:
        flops, nbytes = estimated_work(head, graph)
    return KernelSpec(
        nodes=tuple(node.name for node in members),
        op=head.op,
        epilogue=tuple(epilogue),
        kernel=kernel,
        refusal=refusal,
        flops=flops,
        bytes=nbytes,
        scratch_bytes=kernel.scratch_bytes if kernel is not None else 0,
        device_work=kernel_work(head, last, graph) if kernel is not None and _typed(head, last, graph) else None,
    )


def _typed(head: Node, last: Node, graph: Graph) -> bool:
    """A work descriptor is the shape of tensors; a unit that reads or writes a sequence has none."""
    outputs = [name for name in last.outputs if name]
    return bool(outputs) and all(name in graph.types for name in (*outputs, *(n for n in head.inputs if n)))


def estimated_work(node: Node, graph: Graph) -> tuple[float, float]:
    """(flops, bytes) from the node's shapes, for an operator whose lowering does not count them."""
    types = graph.types
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
    return flops, float(sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs))
