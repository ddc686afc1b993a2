"""Where a Dedicated_Sram npu's feature maps live: in DRAM, or in its arena cache (a per-network choice).

An Ethos-U65 in Vela's Dedicated_Sram mode keeps its arena and weights in DRAM and its SRAM as a
cache; Vela's scheduler (scheduler.py `use_fast_storage_for_feature_maps`) puts the feature maps that
fit in that cache, so the NPU reads and writes them at the SRAM's rate into its internal SHRAM and
only the weights (and spilled feature maps) come from DRAM. A target whose kind offers the choice
(`feature_maps: auto`) is loaded with both configurations (hetgen/platform/memory_modes.py
`feature_map_cache_attributes`; `Target.in_cache`): feature maps in DRAM, tiles DMA'd into the cache
at DRAM rate; or the npu's whole arena in the cache, tiles DMA'd into the SHRAM at the cache's rate,
weights at DRAM's with their reads in flight (two DMA rates, which the simulator counts by where a
DMA reads from: hg_sim.c).

`place_feature_maps` places the network both ways and keeps the cache where the lowered program's
arena (its feature maps and the emulating kernels' workspace: all it keeps in device memory) fits
the cache's bytes and the placement's total is less; otherwise DRAM. Every later stage (lowering,
code generation, the simulator's parameters) reads the chosen platform, so estimate and simulation
follow one decision. All or nothing per npu: a network whose arena exceeds the cache keeps every
feature map in DRAM (Vela would keep those that fit: not modelled).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from hetgen.ir import Graph
from hetgen.lower import lower
from hetgen.lower.program import ProgramRole
from hetgen.partition.placement import Placement
from hetgen.platform.model import Platform, Target


@dataclass(frozen=True)
class FeatureMapChoice:
    target: str  # the npu's path
    in_cache: bool  # its feature maps (its arena) in its cache
    dram_us: float  # the network's estimate with them in DRAM
    cache_us: float  # ... in the cache
    arena_bytes: int  # the arena the cache would hold (its feature maps and emulation workspace)
    cache_bytes: int  # the cache's size
    tensors: tuple[str, ...] = ()  # the feature maps that sit in the cache, where chosen

    def text(self) -> str:
        where = "in its cache" if self.in_cache else "in DRAM"
        why = (
            f"its arena {self.arena_bytes} B fits the {self.cache_bytes} B cache"
            if self.arena_bytes <= self.cache_bytes
            else f"its arena {self.arena_bytes} B does not fit the {self.cache_bytes} B cache"
        )
        head = (
            f"feature maps of {self.target}: {where} (estimate {self.cache_us:.1f} us in the cache, "
            f"{self.dram_us:.1f} us in DRAM; {why})"
        )
        if not self.tensors:
            return head
        return head + "\n  in the cache: " + ", ".join(self.tensors)


@dataclass(frozen=True)
class FeatureMaps:
    platform: Platform  # with each choosing npu in its chosen configuration
    placement: Placement
    choices: tuple[FeatureMapChoice, ...] = ()

    def text(self) -> str:
        return "\n".join(choice.text() for choice in self.choices)


def with_target(platform: Platform, target: Target) -> Platform:
    """`platform` with the node at `target.path` replaced by `target`."""

    def swap(node: Target) -> Target:
        if node.path == target.path:
            return target
        if not target.path[: len(node.path)] == node.path:
            return node
        host = swap(node.host) if node.host is not None else None
        return dataclasses.replace(node, host=host, devices=tuple(swap(d) for d in node.devices))

    return dataclasses.replace(platform, root=swap(platform.root))


def arena_in_cache(lowered, target: Target) -> tuple[int, tuple[str, ...]]:
    """The bytes a lowered npu program keeps in device memory past its SRAM (its feature maps and
    the emulating kernels' workspace), and the feature maps' names."""
    for program in lowered.programs:
        if program.role is ProgramRole.ACCELERATOR and program.target.path == target.path:
            past = program.sram_size + program.emulation_scratch
            names = tuple(sorted(name for name, offset, _ in program.memory.buffers if offset >= past))
            return program.memory.arena_size - program.sram_size, names
    return 0, ()  # nothing placed on it


def place_feature_maps(graph: Graph, platform: Platform, place_on: Callable[[Platform], Placement]) -> FeatureMaps:
    """The platform and placement with each npu that offers the choice (`Target.in_cache`) in the
    configuration of the lesser estimate whose arena fits its cache; `place_on(platform)` places
    the graph on a platform (its kernels lowered for it)."""
    placement = place_on(platform)
    choices = []
    for target in platform.targets():
        cached = target.in_cache
        if cached is None:
            continue
        trial = with_target(platform, cached)
        trial_placement = place_on(trial)
        arena, names = arena_in_cache(lower(graph, trial, trial_placement), cached)
        fits = arena <= (cached.cache_bytes or 0)
        chosen = fits and trial_placement.total_us < placement.total_us
        choices.append(
            FeatureMapChoice(
                target.path_str,
                chosen,
                placement.total_us,
                trial_placement.total_us,
                arena,
                cached.cache_bytes or 0,
                names if chosen else (),
            )
        )
        if chosen:
            platform, placement = trial, trial_placement
    return FeatureMaps(platform, placement, tuple(choices))
