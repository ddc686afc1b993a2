"""Cascades: consecutive window layers on one tiled accelerator run stripe by stripe through SRAM.

Layer by layer (hetgen/spec/tiling.py), every kernel unit's output goes back by DMA to device
memory and the next unit reads it again. A cascade runs a chain of units (each one's activation the
previous one's only reader) one stripe of the last layer's output rows at a time: for each stripe,
each layer computes the rows of its output that its consumer's next stripe needs, into a rolling
buffer in SRAM that keeps only the rows the consumer's windows still reach. Only the first layer's
input, the last layer's output, fused residuals and the weights move by DMA.

Stripe heights are computed backwards from the last layer (as Vela's cascade builder does): in the
steady state, a layer producing `rows` output rows a stripe reads `(rows - 1) * stride + (kernel -
1) * dilation + 1` input rows, of which `rows * stride` are new each stripe; that window is the
rolling buffer of the layer before it, which produces `rows * stride` rows a stripe. `stripe_rows`
runs the stripes with their exact row ranges (the first stripe reaches further, pads and the last
rows clip), and each buffer is the most rows any stripe keeps in it. The SRAM a cascade needs is the
first layer's input buffer (its window and the next stripe's new rows, DMA'd while this stripe
computes), the rolling buffers in between, the last layer's output stripe (double-buffered, stored
while the next stripe computes), a fused residual's stripe (double-buffered) and every layer's
weights, loaded once and kept. `cascade_plan` chooses the stripe height of least estimated time
that fits; the estimate uses the same rates (`tiling.Rates`) as the tile plans it competes with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hetgen.ops.base import Tiling, WorkRule
from hetgen.ops.registry import op_def
from hetgen.spec.tile_shapes import UnitOp, has_residual, operands, rowwise, window_geometry
from hetgen.spec.tiling import ALIGNMENT, Rates, mac_utilisation
from hetgen.spec.work import Work, depth_factor, shape_work

__all__ = [
    "CascadePlan",
    "Layer",
    "StripeStep",
    "cascade_layer",
    "cascade_plan",
    "cascade_sram",
    "move_bytes",
    "stripe_rows",
    "stripe_steps",
]


def _aligned(value: int) -> int:
    return (value + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class Layer:
    """What a cascade needs to know of one kernel unit: its activation's and output's shapes (C, H,
    W; one batch item), their element sizes, its window along the rows, its constants' bytes, its
    MAC-array work and how it is priced."""

    name: str  # the unit's head node
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    in_itemsize: int
    out_itemsize: int
    kernel: int  # rows of a window
    stride: int
    dilation: int
    pad: int  # rows of padding above the input
    weight_bytes: int  # every constant the unit reads (weights, bias, scales, zero points)
    flops: int  # the whole layer's
    groups: int  # MAC products per stripe (a depthwise convolution: one per channel); 0: vector unit
    residual: bool = False  # a Conv with its residual Add: reads one more block, the output stripe's rows
    rates: Rates | None = None  # its tiles' rates (int8 columns for an integer product)
    weight_sram: int = 0  # its constants in SRAM, each aligned (0: weight_bytes aligned as one)
    taps: int = 0  # a vector-unit layer's (a pool's) element-taps, the whole layer's (0: a MAC layer)
    # a MAC layer's work descriptor, the whole layer's (hetgen/spec/work.py): its depth, which the
    # array runs in its depth blocks and dots (`work.depth_factor`); None: a vector-unit layer
    product: Work | None = None

    @property
    def window(self) -> int:
        return (self.kernel - 1) * self.dilation + 1

    @property
    def in_row_bytes(self) -> int:
        return self.in_shape[0] * self.in_shape[2] * self.in_itemsize

    @property
    def out_row_bytes(self) -> int:
        return self.out_shape[0] * self.out_shape[2] * self.out_itemsize


def cascade_layer(op: UnitOp, flops: int, rates: Rates | None = None) -> Layer | None:
    """The unit as a cascade layer, or None where it cannot be one: not a window operator (a
    convolution, a depthwise convolution, a window pool) or a `rowwise` one (a QuantizeLinear: a
    1x1 window on the vector unit), not rank 4 with one batch item, or pooling with ceil_mode."""
    definition = op_def(op.node.op)
    window = definition is not None and definition.tiling is Tiling.WINDOW
    if not (window or rowwise(op)) or len(op.output_types) != 1:
        return None
    roles = operands(op)
    x = op.input_types[roles.x]
    y = op.output_types[0]
    if x is None or x.rank != 4 or y.rank != 4 or x.shape[0] != 1 or op.node.attr("ceil_mode", 0):
        return None
    if op.constant[roles.x]:
        return None
    (kh, _), (sh, _), (dh, _), (pt, _), _ = window_geometry(op)
    is_conv = roles.like is WorkRule.CONV
    groups = int(op.node.attr("group", 1)) if is_conv else 0
    constants = [t.nbytes for t, constant in zip(op.input_types, op.constant) if constant and t is not None]
    return Layer(
        op.node.name,
        tuple(x.shape[1:]),
        tuple(y.shape[1:]),
        x.dtype.itemsize,
        y.dtype.itemsize,
        int(kh),
        int(sh),
        int(dh),
        int(pt),
        sum(constants),
        int(flops),
        groups,
        has_residual(op),
        rates,
        sum(_aligned(nbytes) for nbytes in constants),
        0 if is_conv else y.size * math.prod(op.node.attr("kernel_shape", (1,))),
        shape_work(op.node, [t for t in op.input_types if t is not None], list(op.output_types)) if is_conv else None,
    )


def stripe_rows(layers: Sequence[Layer], stripe: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per layer, the most output rows it computes in one stripe and the most rows of its input
    window (its input buffer's rows), over the stripes of `stripe_steps`."""
    rows = [0] * len(layers)
    buffers = [0] * len(layers)
    for steps in stripe_steps(layers, stripe):
        for step in steps:
            rows[step.layer] = max(rows[step.layer], step.out_rows)
            buffers[step.layer] = max(buffers[step.layer], step.window_rows)
    return tuple(rows), tuple(buffers)


@dataclass(frozen=True)
class StripeStep:
    """One layer's work in one stripe, in the order the device would run it (producer first).

    Activations are NCHW, so a layer's input window (rows `in_lo`..`in_hi` of every channel) is
    contiguous for its kernel only as a (C, rows, W) block of exactly those rows: each stripe first
    moves the `kept` rows it shares with the previous stripe's window (that window's last rows) to
    the top of each channel of the buffer, then brings the new rows below them: the first layer by
    DMA from its input tensor, the others by a move from their producer's output stripe (row
    `source_row` of it on). Both moves are SRAM-to-SRAM copies of `channels` segments; the kernel
    then runs on the window as one row tile with pads `pad_top` and `pad_bottom`, writing output
    rows `out_first`..`out_end - 1`."""

    layer: int
    in_lo: int
    in_hi: int
    kept: int  # rows of the window already in the buffer (moved to its top)
    source_row: int  # the first new row's row in the producer's output stripe (the first layer: in its input)
    out_first: int
    out_end: int
    pad_top: int
    pad_bottom: int

    @property
    def window_rows(self) -> int:
        return self.in_hi - self.in_lo + 1

    @property
    def new_rows(self) -> int:
        return self.window_rows - self.kept

    @property
    def out_rows(self) -> int:
        return self.out_end - self.out_first


def stripe_steps(layers: Sequence[Layer], stripe: int) -> tuple[tuple[StripeStep, ...], ...]:
    """Per stripe of `stripe` output rows of the last layer, the steps of the layers that compute
    in it (a suffix of the chain: a layer whose consumer needs no new row computes nothing, and
    neither do its producers), producer first. The row ranges are `stripe_rows`'."""
    count = len(layers)
    done = [0] * count
    reached = [-1] * count
    last = layers[-1].out_shape[1]
    program: list[tuple[StripeStep, ...]] = []
    for start in range(0, last, stripe):
        needed = min(start + stripe, last)
        steps: list[StripeStep] = []
        for index in range(count - 1, -1, -1):
            layer = layers[index]
            first, end = done[index], max(needed, done[index])
            if end == first:
                break
            top = first * layer.stride - layer.pad  # the first window's first row, padding included
            bottom = (end - 1) * layer.stride - layer.pad + layer.window - 1
            lo, hi = max(top, 0), min(bottom, layer.in_shape[1] - 1)
            new_lo = max(lo, reached[index] + 1)
            # the producer's stripe starts at its rows done before this stripe: reached + 1
            steps.append(
                StripeStep(
                    index,
                    lo,
                    hi,
                    new_lo - lo,
                    new_lo - (reached[index] + 1) if index else new_lo,
                    first,
                    end,
                    lo - top,
                    bottom - hi,
                )
            )
            done[index] = end
            reached[index] = max(reached[index], hi)
            needed = hi + 1
        program.append(tuple(reversed(steps)))
    return tuple(program)


def move_bytes(layers: Sequence[Layer], program: Sequence[Sequence[StripeStep]]) -> int:
    """Bytes the cascade copies from SRAM to SRAM: each layer's kept rows to its buffer's top, and
    every layer's but the first new rows from its producer's output stripe."""
    total = 0
    for steps in program:
        for step in steps:
            row = layers[step.layer].in_row_bytes
            total += step.kept * row + (step.new_rows * row if step.layer else 0)
    return total


@dataclass(frozen=True)
class CascadePlan:
    """A chain of layers run stripe by stripe, as `cascade_plan` chose it."""

    layers: tuple[str, ...]  # the units' head nodes, producer first
    stripe: int  # output rows of the last layer a stripe
    stripes: int
    rows: tuple[int, ...]  # per layer: the most output rows it computes in one stripe
    buffer_rows: tuple[int, ...]  # per layer: rows of its input buffer (the first: its input's)
    sram_bytes: int  # every buffer of the cascade, weights included
    weight_bytes: int
    input_bytes: int  # the first layer's input rows its windows reach, DMA'd once
    output_bytes: int  # the last layer's output, DMA'd once
    residual_bytes: int  # fused residuals' blocks, DMA'd once
    move_bytes: int  # SRAM-to-SRAM: kept rows to each window's top, new rows from each producer's stripe
    estimate_us: float  # one invocation's work (its launch not included)

    @property
    def dma_bytes(self) -> int:
        return self.input_bytes + self.output_bytes + self.residual_bytes + self.weight_bytes

    def describe(self) -> str:
        return (
            f"{len(self.layers)} layers, {self.stripes} stripes of {self.stripe} rows "
            f"(rows a stripe: {', '.join(map(str, self.rows))}), DMA {self.dma_bytes} bytes, "
            f"SRAM moves {self.move_bytes} bytes, SRAM {self.sram_bytes} bytes"
        )


def cascade_sram(layers: Sequence[Layer], stripe: int) -> int:
    """The SRAM bytes the chain's buffers and weights take at this stripe height."""
    return _sram(layers, stripe_steps(layers, stripe))[0]


def _sram(layers: Sequence[Layer], program) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Every layer's input window buffer, every layer's but the last output stripe (single: its
    consumer moves it out before the next stripe), the last layer's output stripe and a fused
    residual's stripe (double-buffered where there is more than one stripe: stored, or loaded,
    while the next stripe computes), and every layer's weights, each aligned."""
    produced = [0] * len(layers)
    windows = [0] * len(layers)
    for steps in program:
        for step in steps:
            produced[step.layer] = max(produced[step.layer], step.out_rows)
            windows[step.layer] = max(windows[step.layer], step.window_rows)
    slots = 2 if len(program) > 1 else 1
    total = sum(_aligned(rows * layer.in_row_bytes) for rows, layer in zip(windows, layers))
    for index, (rows, layer) in enumerate(zip(produced, layers)):
        last = index == len(layers) - 1
        total += (slots if last else 1) * _aligned(rows * layer.out_row_bytes)
        if layer.residual:
            total += slots * _aligned(rows * layer.out_row_bytes)
    total += sum(layer.weight_sram or _aligned(layer.weight_bytes) for layer in layers)
    return total, tuple(produced), tuple(windows)


def _estimate_us(layers: Sequence[Layer], program, dma: tuple[int, int], moved: int) -> float:
    """The cascade's time on the tiled accelerator's engines: its weights loaded first, then the
    stripes' input and output DMA overlapped with their compute (double-buffered) but for the
    lesser engine's one stripe (the first load or the last store). The SRAM-to-SRAM moves run on
    the compute side, in series with the kernels they feed (each layer's moves wait for its
    producer's kernel, and its kernel for its moves), at the engines' SRAM bandwidth. Every command
    costs its overhead: per stripe and layer, a kernel call, a move of kept rows where there are
    some, a move (or the first layer's load) of new rows, a residual's load; the last layer's store."""
    weights, io = dma
    rates = layers[0].rates or Rates(0.0, 0.0)
    stripes = len(program)
    compute = 0.0
    for index, layer in enumerate(layers):
        lr = layer.rates or rates
        rows = max(step.out_rows for steps in program for step in steps if step.layer == index)
        if layer.groups:
            products = [(stripes, layer.groups, rows * layer.out_shape[2], layer.out_shape[0] // layer.groups)]
            mac = layer.flops * lr.us_per_flop / mac_utilisation(products, lr)
            if layer.product is not None:  # a dense convolution's channels in depth blocks, int8 depth in dots
                mac *= depth_factor(layer.product, lr.mac_depth_block, lr.mac_dot)
        elif layer.taps and lr.us_per_vector_tap:  # a pool on the vector unit, at its own rate
            mac = layer.taps * lr.us_per_vector_tap
        else:
            mac = layer.flops * lr.us_per_flop
        outputs = layer.out_shape[0] * layer.out_shape[1] * layer.out_shape[2]
        vector = outputs * lr.us_per_vector_element if layer.residual else 0.0
        local = (
            layer.in_shape[1] * layer.in_row_bytes + layer.out_shape[1] * layer.out_row_bytes
        ) * lr.us_per_local_byte
        stage = outputs * lr.us_per_output_element if layer.groups else 0.0
        compute += max(mac + vector, local, stage)
    compute += moved * rates.us_per_local_byte
    io_us = io * rates.us_per_byte
    commands = sum(
        1 + (step.kept > 0) + (step.new_rows > 0) + layers[step.layer].residual for steps in program for step in steps
    )
    commands += stripes + len(layers)  # the stores, the weights' loads
    # two engines in a pipeline of `stripes` steps: the busier one's time, and the other's first or last step
    overlapped = max(io_us, compute) + min(io_us, compute) / stripes if stripes > 1 else io_us + compute
    # the weights at their own DMA rate where they have one (Vela's Shared_Sram: from flash)
    weight_us = weights * (rates.us_per_weight_byte or rates.us_per_byte)
    if rates.us_per_weight_byte:
        weight_us += len(layers) * rates.weight_setup_us
    return weight_us + overlapped + commands * rates.command_us


# A stripe height whose estimate is within this share of the fastest one's is as good: of those the
# one with the least SRAM is taken, so a cascade leaves its device's SRAM to others (an Ethos-U's
# arena cache) where that costs no time. Float rounding only: a share of a percent traded for SRAM
# would let more SRAM choose a slower cut (the placement must be monotone in the hardware, issue 23).
SRAM_TOLERANCE = 1e-9


def cascade_plan(layers: Sequence[Layer], capacity: int) -> CascadePlan | None:
    """The chain run as a cascade at the stripe height of least SRAM among those whose buffers fit
    `capacity` bytes of SRAM and whose estimated time is within SRAM_TOLERANCE of the least (ties:
    the fewest stripes); None where no stripe height fits or the layers do not chain (each layer's
    input is its predecessor's output)."""
    return fitting_plan(stripe_plans(layers), capacity)


def stripe_plans(layers: Sequence[Layer]) -> tuple[CascadePlan, ...]:
    """The chain as a cascade at every stripe height, whatever SRAM it takes (none where the layers
    do not chain): what `cascade_plan` chooses from, worked out once where several capacities ask."""
    if len(layers) < 2 or any(a.out_shape != b.in_shape for a, b in zip(layers, layers[1:])):
        return ()
    last, first = layers[-1], layers[0]
    output_bytes = last.out_shape[1] * last.out_row_bytes
    residual_bytes = sum(layer.out_shape[1] * layer.out_row_bytes for layer in layers if layer.residual)
    weight_bytes = sum(layer.weight_bytes for layer in layers)
    plans: list[CascadePlan] = []
    for stripe in range(1, last.out_shape[1] + 1):
        program = stripe_steps(layers, stripe)
        sram, produced, windows = _sram(layers, program)
        moved = move_bytes(layers, program)
        # the first layer's rows, each loaded once (rows no window reaches are not)
        input_bytes = sum(step.new_rows for steps in program for step in steps if not step.layer) * first.in_row_bytes
        us = _estimate_us(layers, program, (weight_bytes, input_bytes + output_bytes + residual_bytes), moved)
        plans.append(
            CascadePlan(
                tuple(layer.name for layer in layers),
                stripe,
                len(program),
                produced,
                windows,
                sram,
                weight_bytes,
                input_bytes,
                output_bytes,
                residual_bytes,
                moved,
                us,
            )
        )
    return tuple(plans)


def fitting_plan(plans: Sequence[CascadePlan], capacity: int) -> CascadePlan | None:
    """Of `stripe_plans`, `cascade_plan`'s choice for `capacity` bytes of SRAM."""
    fitting = [plan for plan in plans if plan.sram_bytes <= capacity]
    if not fitting:
        return None
    fastest = min(plan.estimate_us for plan in fitting)
    good = [plan for plan in fitting if plan.estimate_us <= fastest * (1 + SRAM_TOLERANCE)]
    return min(good, key=lambda plan: (plan.sram_bytes, plan.stripes, plan.estimate_us))
