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

from collections.abc import Sequence
from dataclasses import dataclass

from hetgen.ops.base import Tiling, WorkRule
from hetgen.ops.registry import op_def
from hetgen.spec.tile_shapes import UnitOp, has_residual, operands, window_geometry
from hetgen.spec.tiling import ALIGNMENT, Rates, mac_utilisation

__all__ = ["CascadePlan", "Layer", "cascade_layer", "cascade_plan", "cascade_sram", "stripe_rows"]


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
    convolution, a depthwise convolution, a window pool), not rank 4 with one batch item, or
    pooling with ceil_mode."""
    definition = op_def(op.node.op)
    if definition is None or definition.tiling is not Tiling.WINDOW or len(op.output_types) != 1:
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
    weights = sum(t.nbytes for t, constant in zip(op.input_types, op.constant) if constant and t is not None)
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
        int(weights),
        int(flops),
        groups,
        has_residual(op),
        rates,
    )


def stripe_rows(layers: Sequence[Layer], stripe: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Run the chain's stripes (the last layer's output rows, `stripe` at a time) backwards
    through its layers, each layer computing only the rows its consumer's windows newly reach.
    Returns, per layer, the most output rows it computes in one stripe, and the rows of its input
    buffer: for the others than the first, the rolling buffer of its producer's output (the rows
    its windows reach this stripe and the rows its producer wrote this stripe); for the first, that
    window and the next stripe's new rows, loaded while this stripe computes."""
    count = len(layers)
    done = [0] * count  # output rows each layer has computed so far
    reached = [-1] * count  # the last input row each layer's windows have reached
    rows = [0] * count
    buffers = [0] * count
    prefetch = 0
    last = layers[-1].out_shape[1]
    for start in range(0, last, stripe):
        needed = min(start + stripe, last)  # output rows of the layer at hand needed by the stripe's end
        for index in range(count - 1, -1, -1):
            layer = layers[index]
            first, end = done[index], max(needed, done[index])
            if end == first:
                break  # this layer (and so its producers) already has the rows
            height = layer.in_shape[1]
            lo = max(first * layer.stride - layer.pad, 0)
            hi = min((end - 1) * layer.stride - layer.pad + layer.window - 1, height - 1)
            written = reached[index] + 1  # the first input row new to this stripe
            rows[index] = max(rows[index], end - first)
            buffers[index] = max(buffers[index], hi - min(lo, written) + 1)
            if index == 0 and start:
                prefetch = max(prefetch, hi - reached[0])
            done[index] = end
            reached[index] = max(reached[index], hi)
            needed = hi + 1
    buffers[0] = min(buffers[0] + prefetch, layers[0].in_shape[1])
    return tuple(rows), tuple(buffers)


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
    input_bytes: int  # the first layer's input, DMA'd once
    output_bytes: int  # the last layer's output, DMA'd once
    residual_bytes: int  # fused residuals' blocks, DMA'd once
    estimate_us: float  # one invocation's work (its launch not included)

    @property
    def dma_bytes(self) -> int:
        return self.input_bytes + self.output_bytes + self.residual_bytes + self.weight_bytes

    def describe(self) -> str:
        return (
            f"{len(self.layers)} layers, {self.stripes} stripes of {self.stripe} rows "
            f"(rows a stripe: {', '.join(map(str, self.rows))}), DMA {self.dma_bytes} bytes, SRAM {self.sram_bytes} bytes"
        )


def cascade_sram(layers: Sequence[Layer], stripe: int) -> int:
    """The SRAM bytes the chain's buffers and weights take at this stripe height."""
    return _sram(layers, stripe)[0]


def _sram(layers: Sequence[Layer], stripe: int) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    produced, buffers = stripe_rows(layers, stripe)
    total = sum(_aligned(rows * layer.in_row_bytes) for rows, layer in zip(buffers, layers))
    last = layers[-1]
    stripes = -(-last.out_shape[1] // stripe)
    slots = 2 if stripes > 1 else 1
    total += slots * _aligned(produced[-1] * last.out_row_bytes)
    for rows, layer in zip(produced, layers):
        if layer.residual:
            total += slots * _aligned(rows * layer.out_row_bytes)
    total += sum(_aligned(layer.weight_bytes) for layer in layers)
    return total, produced, buffers


def _estimate_us(layers: Sequence[Layer], produced: Sequence[int], stripes: int, dma: tuple[int, int]) -> float:
    """The cascade's time on the tiled accelerator's engines: its weights loaded first, then each
    stripe's input and output DMA overlapped with its layers' compute (double-buffered) but for the
    lesser engine's one stripe (the first load or the last store), and each command's overhead (per stripe: one kernel call a layer, the input
    load, the output store, a residual's load)."""
    weights, io = dma
    rates = layers[0].rates or Rates(0.0, 0.0)
    compute = 0.0
    for rows, layer in zip(produced, layers):
        lr = layer.rates or rates
        if layer.groups:
            products = [(stripes, layer.groups, rows * layer.out_shape[2], layer.out_shape[0] // layer.groups)]
            mac = layer.flops * lr.us_per_flop / mac_utilisation(products, lr)
        else:
            mac = layer.flops * lr.us_per_flop
        outputs = layer.out_shape[0] * layer.out_shape[1] * layer.out_shape[2]
        vector = outputs * lr.us_per_vector_element if layer.residual else 0.0
        local = (
            layer.in_shape[1] * layer.in_row_bytes + layer.out_shape[1] * layer.out_row_bytes
        ) * lr.us_per_local_byte
        stage = outputs * lr.us_per_output_element if layer.groups else 0.0
        compute += max(mac + vector, local, stage)
    io_us = io * rates.us_per_byte
    commands = stripes * (len(layers) + 2 + sum(layer.residual for layer in layers)) + len(layers)
    # two engines in a pipeline of `stripes` steps: the busier one's time, and the other's first or last step
    overlapped = max(io_us, compute) + min(io_us, compute) / stripes if stripes > 1 else io_us + compute
    return weights * rates.us_per_byte + overlapped + commands * rates.command_us


def cascade_plan(layers: Sequence[Layer], capacity: int) -> CascadePlan | None:
    """The chain run as a cascade at the stripe height of least estimated time whose buffers fit
    `capacity` bytes of SRAM (ties: the fewest stripes); None where no stripe height fits or the
    layers do not chain (each layer's input is its predecessor's output)."""
    if len(layers) < 2 or any(a.out_shape != b.in_shape for a, b in zip(layers, layers[1:])):
        return None
    last, first = layers[-1], layers[0]
    input_bytes = first.in_shape[1] * first.in_row_bytes
    output_bytes = last.out_shape[1] * last.out_row_bytes
    residual_bytes = sum(layer.out_shape[1] * layer.out_row_bytes for layer in layers if layer.residual)
    weight_bytes = sum(layer.weight_bytes for layer in layers)
    io = input_bytes + output_bytes + residual_bytes
    best: CascadePlan | None = None
    for stripe in range(1, last.out_shape[1] + 1):
        sram, produced, buffers = _sram(layers, stripe)
        if sram > capacity:
            continue
        stripes = -(-last.out_shape[1] // stripe)
        us = _estimate_us(layers, produced, stripes, (weight_bytes, io))
        if best is None or us < best.estimate_us * (1 - 1e-9):
            best = CascadePlan(
                tuple(layer.name for layer in layers),
                stripe,
                stripes,
                produced,
                buffers,
                sram,
                weight_bytes,
                input_bytes,
                output_bytes,
                residual_bytes,
                us,
            )
    return best
