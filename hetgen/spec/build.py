"""Building the kernel table: every operator and fused unit of a graph lowered once."""

from __future__ import annotations

import math
from types import MappingProxyType

from hetgen.ir import Graph, Node
from hetgen.ops.base import Epilogue, Kernel, OpInstance, Unsupported, WorkRule
from hetgen.ops.registry import op_def
from hetgen.platform.model import Platform
from hetgen.spec.fusion import fusion_chains
from hetgen.spec.patterns import FusedPattern, fused_patterns
from hetgen.spec.signature import UnitKeys, same_constants
from hetgen.spec.table import SPEC_FIELDS, KernelSpec, KernelTable
from hetgen.spec.tiles import residual_plans, tile_plans
from hetgen.spec.work import instance_work, kernel_work


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
    definition = op_def(head.op, head.opset)
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
    definition = op_def(node.op)
    work = definition.work if definition is not None else WorkRule.VECTOR
    # ConvTranspose by name: the device model prices it as vector work, no trait sets it apart
    if (work is WorkRule.CONV or node.op == "ConvTranspose") and len(ins) >= 2:
        source = out_size if work is WorkRule.CONV else ins[0].size
        flops = 2.0 * source * math.prod(ins[1].shape[1:])
    elif work is WorkRule.MATMUL and len(ins) >= 2 and ins[0].rank >= 1:
        flops = 2.0 * out_size * ins[0].shape[-1]
    elif work is WorkRule.GEMM and len(ins) >= 2 and ins[0].rank == 2:
        flops = 2.0 * out_size * ins[0].shape[0 if node.attr("transA", 0) else 1]
    return flops, float(sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs))
