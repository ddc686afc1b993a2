"""The kernel table's values: a frozen `KernelSpec` per kernel unit, and the `KernelTable` holding them
with each unit's tilings (built by `hetgen/spec/build.py`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from hetgen.errors import InternalError
from hetgen.ir import Graph, Node
from hetgen.ops._parallel import SERIAL, Parallel
from hetgen.ops.base import Epilogue, Kernel
from hetgen.spec.patterns import EPILOGUE, FusedPattern
from hetgen.spec.tiling import TilePlan, Unfit
from hetgen.spec.work import Work


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

    def multi_units(self) -> tuple[tuple[tuple[str, ...], str, bool], ...]:
        """Every multi-operator unit the table forms, as (node names, unit kind, whether a controller
        may run it: its C kernel lowered, and a pattern unit's `controllers`): each head's epilogue
        units (every prefix of its fusion chain, a prefix counted as lowered only when the shorter
        ones are too), in graph order, then the pattern units
        (attention, conv_residual) in the order of their heads. The only multi-operator groups a
        placement may form (hetgen/partition/patterns.py filters them by each target's patterns)."""
        found = []
        for node in self.graph.nodes:
            names, lowered = [node.name], True
            for name, _ in self.chains.get(node.name, ()):
                names.append(name)
                spec = self.units.get(tuple(names))
                if spec is None:
                    break
                lowered = lowered and spec.kernel is not None
                found.append((tuple(names), EPILOGUE, lowered))
        found.extend((names, pattern.kind, pattern.controllers) for names, pattern in self.patterns.items())
        return tuple(found)

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
