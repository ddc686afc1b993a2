"""Which layout each constant operand takes, and the one place that fits CPU kernels to the
platform (cache blocks, memory budget): part of the kernel choice stage (hetgen/partition/choices.py
records it and prices it; hetgen/lower/prepack.py makes the constants).

A lowering may offer `Kernel.prepacked` (e.g. a convolution's weights as GEMM panels). Where the
unit runs on a CPU controller, the constant is replaced by a new constant in that layout and the
kernel reads it with the offered template parameters (and, for Winograd, does Winograd's work:
hetgen/spec/variants.py); accelerators keep the model's layout (they
load weights as the model has them, and their own templates read it). Offers for the same input
are alternatives, the faster first; one is taken per input:

- an offer that only pads the model's weights (at most BARE_METAL_GROWTH larger: GEMM panels) is
  always taken; an offer marked `bare_metal_only` (a kernel reading the weights in the model's
  layout where they are linked, with no run-time packing: hetgen/ops/_in_place.py) is seen on
  bare-metal targets only, where it comes first; one marked `hosted_only` (the packed int8
  kernels, hetgen/ops/qpack.py) on application cores only; one for a register file (the direct
  convolution of small planes, blocked per file: hetgen/ops/_conv_small.py) on CPUs with that file only;
- a larger one (Winograd's transformed 4x4 taps are 16/9 of the 3x3 ones) is declined on a
  bare-metal target, whose weights sit in a small flash; on other CPUs it is taken where it is the
  only offer (declining panels that pad a few rows would only move the packing to run time, with
  its workspace) or with `options.memory: fast`; with `lean` (the default) a larger alternative is
  taken only while the target's packed weights stay within its share of MEMORY_SLACK of the
  model's weights plus the liveness lower bound of the activations, layers with the most
  arithmetic per extra byte first (hetgen/lower/peak_memory.py measures the result;
  tests/test_memory_bound.py checks it).

Every unit that calls the GEMM is lowered again with the platform's cache blocks
(`options.tuning`, measured by `hetgen tune`) where they differ from the defaults, so its
workspace matches the generated runtime/hg_gemm_config.h. With `lean`, a unit's workspace (GEMM
packing blocks, Winograd's V and M) is further held to a cap of its own: the activations live at
its step plus its workspace may pass the target's activation peak by at most WORKSPACE_SHARE of
the bound. A unit over its cap is lowered again with smaller blocks (nc and kc halved, never
below one B panel of nc and KC_FLOOR of kc; Winograd then transforms fewer tiles at a time), the
largest that fit; a Winograd layout whose least workspace still does not fit is declined. Layers
where little is live keep the platform's blocks, so only those near the peak pay for it.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from hetgen.errors import PlacementError
from hetgen.ir import Graph
from hetgen.ops import _gemm_plan
from hetgen.ops.base import Kernel, Prepacked
from hetgen.partition.liveness import live_bytes
from hetgen.partition.units import Unit, op_instance, unit_lowering
from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.model import Platform, Role, Target
from hetgen.platform.registers import vector_registers
from hetgen.platform.tuning import gemm_blocks, memory_mode
from hetgen.spec.variants import with_offers

# How much larger than the model's a packed constant may be on a bare-metal target (panel padding).
BARE_METAL_GROWTH = 1.15
# How far above its memory bound (weights + liveness lower bound of activations) a lean program may be;
# the budget keeps a little of it back for the arena planner, which may not reach the lower bound.
MEMORY_SLACK = 0.10
PLANNER_RESERVE = 0.02
# ... and the part of it that kernel workspaces may add to the activations live at their step (each
# layer's workspace cap, `workspace_caps`); what is left goes to weights that grow (Winograd's).
WORKSPACE_SHARE = 0.03


class UnitLowerings:
    """What fitting a unit's kernel to the platform makes, kept across the placements of one graph
    (hetgen/partition/reported.py finishes up to 256 of them, and the same unit recurs in most):
    the unit lowered again with other GEMM blocks, and an offer's layout of a constant.

    Each is a function of the unit alone (its nodes, hence its fused epilogue or pattern, and the
    graph's types and constants) and of the blocks or the offer, never of where the unit or the
    others run, so the one kept is the one that would be made again. What does depend on the
    placement (a unit's workspace cap, the target's memory budget, its register file, the blocked
    runs) is decided afresh for each placement from these."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._lowered: dict[tuple, Kernel] = {}
        self._offered: dict[tuple, tuple[Kernel, Kernel]] = {}
        self._layouts: dict[tuple[str, int], tuple[Prepacked, np.ndarray]] = {}

    def lowered(self, unit: Unit, blocks) -> Kernel:
        """`unit` lowered with these GEMM cache blocks."""
        key = (unit.names, unit.is_pattern, blocks)
        found = self._lowered.get(key)
        if found is None:
            instance = dataclasses.replace(op_instance(unit, self.graph), gemm_blocks=blocks)
            found = self._lowered[key] = unit_lowering(unit)(instance)
        return found

    def offered(self, kernel: Kernel, positions: tuple[int, ...]) -> Kernel:
        """`kernel` with its offers at `positions` taken (hetgen/spec/variants.py `with_offers`).
        Keyed by the kernel itself (kept alongside: an id is only its own while it lives)."""
        key = (id(kernel), positions)
        found = self._offered.get(key)
        if found is None or found[0] is not kernel:
            found = self._offered[key] = (kernel, with_offers(kernel, [kernel.prepacked[p] for p in positions]))
        return found[1]

    def layout(self, constant: str, offer: Prepacked) -> np.ndarray:
        """`constant` in `offer`'s layout, flat (Winograd's transform is not free). Keyed by the
        offer itself: one kept here, or in the kernel table, is never freed, so its id stays its own."""
        found = self._layouts.get((constant, id(offer)))
        if found is None:
            value = offer.layout(self.graph.constants[constant])
            # int8 layouts (the quantized convolution's panels, hetgen/ops/qpack.py) keep their type
            dtype = np.asarray(value).dtype if np.asarray(value).dtype.kind in "iu" else np.float32
            found = self._layouts[(constant, id(offer))] = (offer, np.ascontiguousarray(value, dtype=dtype).reshape(-1))
        return found[1]


class Layouts:
    """Each offer's layout of its constant, made once (Winograd's transform is not free)."""

    def __init__(self, graph: Graph, unit_inputs: list[tuple[str, ...]], lowerings: UnitLowerings):
        self.graph, self.unit_inputs, self.lowerings = graph, unit_inputs, lowerings

    def model(self, index: int, offer: Prepacked) -> np.ndarray:
        return self.graph.constants[self.unit_inputs[index][offer.index]]

    def packed(self, index: int, offer: Prepacked) -> np.ndarray:
        return self.lowerings.layout(self.unit_inputs[index][offer.index], offer)

    def growth(self, index: int, offer: Prepacked) -> float:
        return self.packed(index, offer).size / max(self.model(index, offer).size, 1)

    def extra_bytes(self, index: int, offer: Prepacked | None) -> int:
        return 0 if offer is None else self.packed(index, offer).nbytes - self.model(index, offer).nbytes


def taken_offers(
    graph: Graph,
    units: tuple[Unit, ...],
    kernels: tuple[Kernel, ...],
    unit_inputs: list[tuple[str, ...]],
    assignment: dict[str, str],
    platform: Platform,
    lowerings: UnitLowerings | None = None,
) -> tuple[tuple[Kernel, ...], dict[int, tuple[Prepacked, ...]], Layouts]:
    """Each unit's kernel with the offers taken (its variant's work: hetgen/spec/variants.py), the
    offers taken per unit index, and their layouts (made once; lowering packs the constants with them).
    `lowerings`: kept from other placements of `graph` (`UnitLowerings`)."""
    lowerings = lowerings or UnitLowerings(graph)
    kernels = with_blocks(units, kernels, assignment, platform, lowerings)
    controllers = {t.path_str: t for t in platform.targets() if t.role is Role.CONTROLLER}
    layouts = Layouts(graph, unit_inputs, lowerings)
    caps = workspace_caps(units, kernels, unit_inputs, graph, assignment, platform, controllers)
    fitting = Fitting(units, kernels, caps, gemm_blocks(platform), lowerings)
    chosen = chosen_offers(layouts, units, kernels, assignment, platform, controllers, fitting)
    taken = tuple(fitting.kernel(index, chosen.get(index, ())) for index in range(len(units)))
    return taken, chosen, layouts


def with_blocks(units, kernels, assignment, platform, lowerings: UnitLowerings) -> tuple[Kernel, ...]:
    """The kernels, those that call the GEMM lowered again for the platform's cache blocks.

    The generated runtime (and its hg_gemm_config.h) is shared by every target of the platform, so
    every GEMM kernel follows the same blocks. A tiled accelerator's C kernels are lowered per tile
    elsewhere with the defaults; blocks larger than those would overrun their workspace, so they are
    refused there."""
    blocks = gemm_blocks(platform)
    if blocks == _gemm_plan.DEFAULT_BLOCKS:
        return kernels
    default = _gemm_plan.DEFAULT_BLOCKS
    if any(getattr(blocks, key) > getattr(default, key) for key in ("mc", "kc", "nc")):
        tiled = sorted(
            {
                assignment[unit.head.name]
                for unit in units
                if any(
                    t.path_str == assignment[unit.head.name] and t.role is Role.ACCELERATOR and t.memory_bytes
                    for t in platform.targets()
                )
            }
        )
        if tiled:
            raise PlacementError(
                f"{platform.file}: options.tuning sets cache blocks larger than hetgen's defaults "
                f"({vars(default)}), but {', '.join(tiled)} runs tiled kernels sized for the defaults; "
                "remove options.tuning or keep each of mc, kc, nc at most its default"
            )
    return tuple(
        lowerings.lowered(unit, blocks) if _gemm_plan.HELPER in kernel.helpers else kernel
        for unit, kernel in zip(units, kernels)
    )


class Fitting:
    """Each unit's kernel with the offers taken, its GEMM blocks made smaller where its workspace
    would pass the unit's cap (`workspace_caps`).

    Only kernels that pass their blocks to each GEMM call (params `gemm_kc`, `gemm_nc`: the
    template gives them to hg_sgemm_ex) get blocks of their own; the unit is lowered again with
    them (OpInstance.gemm_blocks), so its workspace, its template's _Static_assert and the GEMM's
    loops all follow the same GemmBlocks, chosen from `_gemm_plan.smaller_blocks` (`kernel`)."""

    def __init__(self, units, kernels, caps: dict[int, int], blocks, lowerings: UnitLowerings):
        self.units, self.kernels, self.caps, self.blocks, self.lowerings = units, kernels, caps, blocks, lowerings

    def _lowered(self, index: int, blocks) -> Kernel:
        return self.lowerings.lowered(self.units[index], blocks)

    def _candidates(self, index: int, offers):
        """The unit's kernel with `offers`, with its own blocks, then with each smaller set of blocks."""
        kernel = self.kernels[index]
        positions = tuple(kernel.prepacked.index(offer) for offer in offers)
        yield self.lowerings.offered(kernel, positions)
        if "gemm_nc" not in kernel.params:
            return
        for blocks in _gemm_plan.smaller_blocks(self.blocks):
            yield self.lowerings.offered(self._lowered(index, blocks), positions)

    def kernel(self, index: int, offers=()) -> Kernel:
        """The kernel with `offers`: with the unit's own blocks where its workspace fits the cap,
        else with the smaller blocks whose workspace is the largest that fits (the largest B block:
        the fewest passes over C and A), of two as large the one with the deeper kc; else with the
        least workspace there is."""
        cap = self.caps.get(index)
        candidates = self._candidates(index, tuple(offers))
        own = next(candidates)
        if cap is None or own.scratch_bytes <= cap:
            return own
        smaller = list(candidates)
        fitting = [c for c in smaller if c.scratch_bytes <= cap]
        if fitting:
            return max(fitting, key=lambda c: (c.scratch_bytes, c.params["gemm_kc"]))
        return min([own, *smaller], key=lambda c: c.scratch_bytes)

    def fits(self, index: int, offers) -> bool:
        """Whether some blocks give the kernel with `offers` a workspace within the unit's cap."""
        return self.kernel(index, offers).scratch_bytes <= self.caps.get(index, float("inf"))


def workspace_caps(units, kernels, unit_inputs, graph, assignment, platform, controllers) -> dict[int, int]:
    """With `options.memory: lean`, per unit on a CPU controller, the most workspace it may take:
    what keeps its step's live activations plus workspace within WORKSPACE_SHARE of its target's
    bound above that bound's activations (the most bytes live at one step).

    So a layer where little is live keeps the platform's blocks, and one at or near the activation
    peak takes smaller ones (`Fitting`); no layer's workspace can then lift the arena's peak by more
    than the share."""
    if memory_mode(platform) != "lean":
        return {}
    root = platform.root.controller().path_str
    caps: dict[int, int] = {}
    for path in sorted({assignment[unit.head.name] for unit in units} & set(controllers)):
        on_target = [i for i, unit in enumerate(units) if assignment[unit.head.name] == path]
        model_bytes = sum(graph.constants[name].nbytes for name in _constants_of(on_target, unit_inputs, graph))
        live = _live_per_unit(on_target, units, unit_inputs, graph, path == root)
        peak = max(live, default=0)
        allowed = peak + int(WORKSPACE_SHARE * (model_bytes + peak))
        caps.update({index: max(0, allowed - live_bytes) for index, live_bytes in zip(on_target, live)})
    return caps


def chosen_offers(
    layouts: Layouts, units, kernels, assignment, platform, controllers, fitting: Fitting
) -> dict[int, tuple]:
    """Per unit index on a CPU controller, the offers taken: at most one per input (see the module doc)."""
    lean = memory_mode(platform) == "lean"
    chosen: dict[int, list[Prepacked]] = {}
    growing: dict[str, list[tuple[int, Prepacked, Prepacked | None]]] = {}  # per target: (unit, big, fallback)
    for index, (unit, kernel) in enumerate(zip(units, kernels)):
        path = assignment[unit.head.name]
        target = controllers.get(path)
        if target is None or not kernel.prepacked:
            continue
        for offers in offers_on(kernel, target).values():
            small = next((o for o in offers if layouts.growth(index, o) <= BARE_METAL_GROWTH), None)
            first = offers[0]
            if first is small or is_bare_metal(target) or not lean or len(offers) == 1:
                taken = small if is_bare_metal(target) else first
                if taken is not None:
                    chosen.setdefault(index, []).append(taken)
                continue
            if fitting.fits(index, (first,)):  # else its workspace would lift the activation peak
                growing.setdefault(path, []).append((index, first, small))
            elif small is not None:
                chosen.setdefault(index, []).append(small)
    for path, candidates in growing.items():
        taken = within_budget(path, candidates, layouts, units, kernels, assignment, chosen, platform)
        for index, big, small in candidates:
            offer = big if (index, id(big)) in taken else small
            if offer is not None:
                chosen.setdefault(index, []).append(offer)
    return {index: tuple(offers) for index, offers in chosen.items()}


def offers_on(kernel: Kernel, target: Target) -> dict[int, list[Prepacked]]:
    """The offers of `kernel` that CPU controller `target` may take, per input, the preferred first."""
    by_input: dict[int, list[Prepacked]] = {}
    bare_metal = is_bare_metal(target)
    registers = vector_registers(target)
    for offer in kernel.prepacked:
        # in-place kernels for flash-resident weights on bare metal only; the packed int8
        # kernels (hg_qgemm.h) only on application cores, where their SIMD paths exist
        if (offer.bare_metal_only and not bare_metal) or (offer.hosted_only and bare_metal):
            continue
        if offer.registers is not None and offer.registers != registers:
            continue  # blocked for another CPU's register file
        by_input.setdefault(offer.index, []).append(offer)
    return by_input


def every_choice(unit: Unit, kernel: Kernel, target: Target, platform: Platform, lowerings: UnitLowerings):
    """Every kernel `taken_offers` may give `unit` (the kernel table's `kernel`) on CPU controller
    `target`, in any placement: lowered for the platform's cache blocks (`with_blocks`), with at most
    one offer per input taken (`chosen_offers`: which, depends on the target's memory budget), with
    those blocks or any smaller set (`Fitting`: which, depends on the activations live at its step)."""
    blocks = gemm_blocks(platform)
    if blocks != _gemm_plan.DEFAULT_BLOCKS and _gemm_plan.HELPER in kernel.helpers:
        kernel = lowerings.lowered(unit, blocks)
    kernels = [kernel]
    if "gemm_nc" in kernel.params:
        kernels += [lowerings.lowered(unit, smaller) for smaller in _gemm_plan.smaller_blocks(blocks)]
    per_input = [[None, *offers] for offers in offers_on(kernel, target).values()]
    taken = [
        tuple(kernel.prepacked.index(o) for o in offers if o is not None) for offers in itertools.product(*per_input)
    ]
    return [lowerings.offered(k, positions) for k in kernels for positions in taken]


def within_budget(path, candidates, layouts: Layouts, units, kernels, assignment, chosen, platform) -> set:
    """Which growing offers on `path` fit its lean memory budget, the most arithmetic per extra byte first.

    The budget is MEMORY_SLACK of the target's bound (its constants in the model's layout plus the
    liveness lower bound of its activations, over the unit order the schedule follows), less
    PLANNER_RESERVE for the arena planner, WORKSPACE_SHARE for the kernels' workspaces (each held
    to its cap: `workspace_caps`), and what the offers taken anyway add (panel padding)."""
    graph, unit_inputs = layouts.graph, layouts.unit_inputs
    on_target = [i for i, unit in enumerate(units) if assignment[unit.head.name] == path]
    model_bytes = sum(graph.constants[name].nbytes for name in _constants_of(on_target, unit_inputs, graph))
    is_root = path == platform.root.controller().path_str
    activations = max(_live_per_unit(on_target, units, unit_inputs, graph, is_root), default=0)
    padding = sum(
        layouts.extra_bytes(index, offer)
        for index, offers in chosen.items()
        if assignment[units[index].head.name] == path
        for offer in offers
    )
    share = MEMORY_SLACK - PLANNER_RESERVE - WORKSPACE_SHARE
    budget = share * (model_bytes + activations) - padding
    budget -= sum(layouts.extra_bytes(index, small) for index, _, small in candidates)  # fallbacks' padding
    ranked = []
    for index, big, small in candidates:
        extra = layouts.extra_bytes(index, big) - layouts.extra_bytes(index, small)
        ranked.append((-kernels[index].flops / max(extra, 1), index, big, extra))
    taken: set[tuple[int, int]] = set()
    for _, index, big, extra in sorted(ranked, key=lambda r: (r[0], r[1])):
        if extra <= budget:
            budget -= extra
            taken.add((index, id(big)))
    return taken


def _constants_of(on_target, unit_inputs, graph) -> list[str]:
    return list(dict.fromkeys(name for i in on_target for name in unit_inputs[i] if name in graph.constants))


def _live_per_unit(on_target, units, unit_inputs, graph, is_root: bool) -> list[int]:
    """Per unit on one target, in their order, the bytes of activations live across it: each tensor
    from the unit that first touches it to the one that last does (the model's inputs from the first
    unit, its outputs to the last). On the root, the model's inputs and outputs are the caller's
    buffers, outside the arena, and are not counted."""
    caller = set(graph.inputs) | set(graph.outputs) if is_root else set()
    touches = [
        [
            name
            for name in (*unit_inputs[index], *units[index].outputs)
            if name and name not in graph.constants and name in graph.types and name not in caller
        ]
        for index in on_target
    ]
    nbytes = {name: graph.types[name].nbytes for names in touches for name in names}
    return live_bytes(touches, nbytes, from_start=set(graph.inputs), to_end=set(graph.outputs))
