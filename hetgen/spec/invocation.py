"""How work is cut into invocations of an accelerator: one rule that lowering follows and the cost
model prices, so the program that runs is the program that was priced.

An accelerator with a bounded local memory (SRAM) runs each kernel unit (a placement group: an
operator and the activations fused into it) as its own invocation. Activations stay in the device's
memory (outside SRAM) from the first use to the last: copied in once, and out only for a reader
elsewhere (those copies are the placement's transfers). An invocation runs its unit's tiling
(hetgen/spec/tiling.py): tiles of inputs and weights DMA'd into SRAM, computed, DMA'd out. The
same plan decides whether the unit fits (the fits_memory predicate), what it costs (cost.py) and
what lowering emits, so no fallback changes the program behind the placement's back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hetgen.ir import Graph, Node
from hetgen.ops.base import Epilogue
from hetgen.ops.registry import op_def
from hetgen.platform.model import CostFigures, Role, Target
from hetgen.spec.fusion import cut_units
from hetgen.spec.patterns import FusedPattern
from hetgen.spec.table import KernelTable
from hetgen.spec.tiling import Action, Rates, TilePlan, Unfit


def one_unit_per_invocation(target: Target) -> bool:
    return target.role is Role.ACCELERATOR and target.memory_bytes is not None


def peak_gops(figures: CostFigures, nodes: Iterable[Node] = ()) -> float:
    """The arithmetic throughput a group reaches: int8 for an integer kernel on an int8 datapath."""
    head = next(iter(nodes), None)
    definition = op_def(head.op) if head is not None else None
    if definition is not None and definition.integer_mac is not None and figures.peak_int8_gops:
        return figures.peak_int8_gops
    return figures.peak_gflops


def tile_rates(target: Target, efficiency: float = 1.0, nodes: Sequence[Node] = ()) -> Rates:
    """What a tile's commands take on `target` by its cost figures: compute at `efficiency` of its
    peak but no faster than its engines stream the tile's buffers from SRAM (`local_gbps`, where the
    kind has it), DMA at its bandwidth, and `command_us` (a figure; 0 where the kind has none) per
    command. Plans are chosen at efficiency 1 (a device property); patterns price them at their own.
    A fused residual's add runs on the vector unit at `vector_gops` (elements), where the kind has
    that figure, else as one flop an element at the compute rate; so does a vector-unit kernel's
    work (its taps: pools, elementwise, lookups), whatever the pattern's efficiency. Where the kind gives its MAC
    array's shape (`mac_rows`, `mac_cols`, `int8_mac_cols` figures), a tile's compute is priced at
    the share of the array its product keeps busy (`tiling.mac_utilisation`), as the device runs it;
    an integer product's depth in whole dots of `int8_mac_depth` products a multiplier."""
    figures = target.figures
    peak = peak_gops(figures, nodes)
    us_per_flop = 1.0 / (peak * 1e3 * efficiency)
    cols, dot = figures.mac_cols, 0
    if figures.int8_mac_cols and figures.peak_int8_gops and peak == figures.peak_int8_gops:
        cols, dot = figures.int8_mac_cols, int(figures.int8_mac_depth)
    shaped = bool(figures.mac_rows and cols)
    return Rates(
        us_per_flop,
        1.0 / (figures.bandwidth_gbps * 1e3),
        float(figures.command_us or 0.0),
        1.0 / (figures.local_gbps * 1e3) if figures.local_gbps else 0.0,
        1.0 / (figures.vector_gops * 1e3) if figures.vector_gops else us_per_flop,
        int(figures.mac_rows) if shaped else 0,
        int(cols) if shaped else 0,
        float(figures.output_us or 0.0),
        1.0 / (figures.weight_gbps * 1e3) if figures.weight_gbps else 0.0,
        float(figures.weight_setup_us or 0.0),
        float(figures.dma_hidden_us or 0.0),
        1.0 / (figures.vector_gops * 1e3) if figures.vector_gops else 0.0,
        float(figures.weight_hidden_us or 0.0),
        int(figures.mac_depth_block or 0),
        int(figures.dma_brick_channels or 0),
        int(figures.linear_burst_bytes or 0),
        int(figures.linear_write_bytes or 0),
        dot,
    )


def kernel_units_of(
    nodes: Sequence[Node], graph: Graph, kernels: KernelTable
) -> list[tuple[tuple[Node, ...], tuple[Epilogue, ...]]]:
    """How lowering cuts a placed group into kernel units: a group that is exactly one of the
    kernel table's residual units (a Conv with its residual Add: hetgen/spec/patterns.py) is that
    one unit; otherwise by the one fusion rule (hetgen/spec/fusion.py), within the group.
    `kernels`: the graph's kernel table."""
    if len(nodes) == 1:
        return [(tuple(nodes), ())]
    pattern = residual_unit(nodes, kernels)
    if pattern is not None:
        return [(pattern.nodes, pattern.epilogue)]
    return cut_units(nodes, kernels.chains, lambda head, activation: True)


def residual_unit(nodes: Sequence[Node], kernels: KernelTable) -> FusedPattern | None:
    """The kernel table's residual unit whose nodes are exactly `nodes`, if there is one."""
    if len(nodes) < 2:
        return None
    pattern = kernels.fused(node.name for node in nodes)
    return pattern if pattern is not None and pattern.residual is not None else None


def unit_inputs(chain: Sequence[Node], kernels: KernelTable) -> tuple[str, ...]:
    """The inputs of a kernel unit's kernel: its head's, or a residual unit's (x, w, bias, residual)."""
    pattern = residual_unit(chain, kernels)
    return pattern.inputs if pattern is not None else chain[0].inputs


def group_plans(nodes: Sequence[Node], graph: Graph, target: Target, kernels: KernelTable) -> list[TilePlan | Unfit]:
    """The tiling of each kernel unit of a group placed on a tiled accelerator (`tiling.unit_plan`),
    as the kernel table planned it: what the fits_memory predicate, the cost model and lowering all read."""
    units = kernel_units_of(nodes, graph, kernels)
    return [kernels.tile_plan(target.path_str, tuple(node.name for node in chain)) for chain, _ in units]


def weight_load_bytes(nodes: Sequence[Node], graph: Graph, target: Target, kernels: KernelTable) -> int:
    """Bytes of constants (weights, biases) a group's tile plans DMA into local memory, a weight
    slice loaded again for a later tile counted each time: the weight part of what the plans price."""
    total = 0
    for (chain, _), plan in zip(kernel_units_of(nodes, graph, kernels), group_plans(nodes, graph, target, kernels)):
        if not isinstance(plan, TilePlan):
            continue
        inputs = unit_inputs(chain, kernels)
        for command in plan.commands:
            if command.action is Action.LOAD and inputs[command.operand] in graph.constants:
                total += plan.block_of(command).nbytes
    return total


def residual_load_bytes(plan: TilePlan, chain: Sequence[Node], kernels: KernelTable) -> int:
    """Bytes a residual unit's tiles DMA of its residual (0 for other units)."""
    pattern = residual_unit(chain, kernels)
    if pattern is None:
        return 0
    operand = pattern.residual_operand
    return sum(plan.block_of(c).nbytes for c in plan.commands if c.action is Action.LOAD and c.operand == operand)
