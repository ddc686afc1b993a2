"""A cascade's command list: what the tiled accelerator runs, stripe by stripe (hetgen/spec/cascade.py).

The SRAM holds, each at a 64-byte aligned offset: every layer's input window, laid out (C, rows, W)
for its kernel (rows contiguous per channel, NCHW); every layer's but the last output stripe; the
last layer's output stripe (two slots where there is more than one stripe: stored while the next
computes); a fused residual's stripe (two slots likewise); every layer's constants, loaded once.

The commands, in the order the device gets them:

- LOAD every layer's constants (weights, bias, scales, zero points: the blocks its row tiles read).
- Per stripe, per layer that computes in it (`stripe_steps`), producer first: MOVE the kept rows of
  its window to the window's top (an SRAM-to-SRAM copy of one segment a channel, the previous
  window's row stride to this one's); bring the new rows below them: the first layer by a LOAD from
  its input tensor, the others by a MOVE from their producer's output stripe; LOAD a residual's
  rows; COMPUTE the layer's row tile (`window_row_tile`: the window's rows, the pads its windows
  cross) into its output stripe; the last layer's is STOREd to its output tensor.
- The first layer's kept-row MOVE and new-row LOAD for its next stripe are issued right after its
  COMPUTE, so the DMA loads the next input rows while the later layers compute this stripe.

A MOVE runs on the compute side, in order with the kernels (each one feeds or drains a kernel, so
it could not overlap them), at the engines' SRAM bandwidth; LOAD and STORE are the DMA engine's.
Each command waits, as a tile plan's do (`tiling.with_waits`), for the latest command of the other
engine that touches one of its buffers. Within one buffer a MOVE copies its segments in the order
that reads each before it is overwritten: backwards where the destination's stride is the larger.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hetgen.errors import InternalError
from hetgen.spec.cascade import Layer, StripeStep, stripe_steps
from hetgen.spec.tile_shapes import UnitOp, op_residual, operands, window_row_tile
from hetgen.spec.tiling import (
    ALIGNMENT,
    Action,
    Rates,
    TileKernel,
    mac_utilisation,
    tile_kernel,
    two_engine_us,
    with_waits,
)
from hetgen.spec.work import Engine, Linear, depth_factor, instance_work

__all__ = ["CascadeCommand", "CascadeProgram", "Kind", "cascade_program", "program_us"]

_MAC_ENGINES = (
    Engine.MAC_ARRAY,
    Engine.MAC_ARRAY_INT8,
    Engine.MAC_ARRAY_RESIDUAL,
    Engine.MAC_ARRAY_INT8_RESIDUAL,
)


class Kind(enum.Enum):
    LOAD = "load"  # device memory (a tensor of the unit, or its constants) to SRAM, by DMA
    MOVE = "move"  # SRAM to SRAM, on the compute side
    COMPUTE = "compute"  # a layer's row tile on SRAM buffers
    STORE = "store"  # SRAM to the last layer's output tensor, by DMA


def _aligned(value: int) -> int:
    return (value + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class CascadeCommand:
    """One command. A copy (LOAD, MOVE, STORE) moves `count` segments of `seg_bytes`, from `src`
    (`src_stride` bytes apart) to `dst` (`dst_stride` apart): offsets into SRAM, or into the tensor
    `tensor` (position name of layer `layer`'s unit: `in0`, `out0`, ...) in device memory. A COMPUTE
    calls kernel `kernel` with `args`: per kernel input its SRAM offset (None: omitted), then its
    output's. `after`: how many commands back the command it waits for is (0: none)."""

    kind: Kind
    layer: int
    tensor: str = ""
    src: int = 0
    dst: int = 0
    count: int = 0
    seg_bytes: int = 0
    src_stride: int = 0
    dst_stride: int = 0
    kernel: int = -1
    args: tuple[int | None, ...] = ()
    after: int = 0
    weights: bool = False  # a LOAD of a layer's constants (the weights' DMA rate: `Rates.dma_us`)

    @property
    def nbytes(self) -> int:
        return self.count * self.seg_bytes

    @property
    def is_dma(self) -> bool:
        return self.kind in (Kind.LOAD, Kind.STORE)


@dataclass(frozen=True)
class CascadeProgram:
    stripe: int
    kernels: tuple[TileKernel, ...]
    kernel_layers: tuple[int, ...]  # per kernel: its layer
    commands: tuple[CascadeCommand, ...]
    sram_bytes: int

    def moved(self, kind: Kind) -> int:
        return sum(c.nbytes for c in self.commands if c.kind is kind)

    @property
    def dma_bytes(self) -> int:
        return self.moved(Kind.LOAD) + self.moved(Kind.STORE)

    @property
    def scratch_bytes(self) -> int:
        """The emulating C kernels' workspace (im2col, packing), outside SRAM, as a tile plan's."""
        return max((k.kernel.scratch_bytes for k in self.kernels), default=0)


class _Sram:
    def __init__(self) -> None:
        self.size = 0
        self.names: list[str] = []
        self.offsets: list[int] = []

    def take(self, name: str, nbytes: int) -> int:
        self.names.append(name)
        self.offsets.append(self.size if nbytes else 0)
        self.size += _aligned(nbytes)
        return len(self.offsets) - 1


def cascade_program(ops: Sequence[UnitOp], layers: Sequence[Layer], stripe: int) -> CascadeProgram:
    """The command list of the chain `ops` (its layers as `cascade_layer` gives them) at this stripe
    height; Unsupported where a layer's row tile has no kernel."""
    program = stripe_steps(layers, stripe)
    count = len(layers)
    slots = 2 if len(program) > 1 else 1
    steps_of = [[step for steps in program for step in steps if step.layer == index] for index in range(count)]
    sram = _Sram()
    window = [sram.take(f"window{i}", max(s.window_rows for s in steps_of[i]) * layers[i].in_row_bytes) for i in range(count)]  # fmt: skip
    out_rows = [max(s.out_rows for s in steps_of[i]) for i in range(count)]
    output = [
        [sram.take(f"out{i}.{k}", out_rows[i] * layers[i].out_row_bytes) for k in range(slots if i == count - 1 else 1)]
        for i in range(count)
    ]
    residual = [
        [sram.take(f"residual{i}.{k}", out_rows[i] * layers[i].out_row_bytes) for k in range(slots)]
        if op_residual(ops[i]) is not None
        else []
        for i in range(count)
    ]
    raw: list[tuple] = []  # (CascadeCommand without its wait, reads, writes)

    def add(command: CascadeCommand, reads: tuple[int, ...], writes: tuple[int, ...]) -> None:
        raw.append((command, reads, writes))

    # the constants, loaded once: every row tile of a layer reads the same blocks of them
    constants: list[dict[int, int]] = []
    for index, op in enumerate(ops):
        spec = window_row_tile(op, 0, 1)
        held: dict[int, int] = {}
        for i, block in enumerate(spec.inputs):
            if block is None or not op.constant[i]:
                continue
            buffer = held[i] = sram.take(f"const{index}.{i}", block.nbytes)
            add(
                CascadeCommand(Kind.LOAD, index, block.tensor, block.offset, sram.offsets[buffer], block.count,
                               block.seg_bytes, block.stride, block.seg_bytes, weights=True),
                (), (buffer,),
            )  # fmt: skip
        constants.append(held)
    kernels: list[TileKernel] = []
    kernel_layers: list[int] = []
    kernel_of: dict[tuple, int] = {}
    held_rows = [0] * count  # rows of each window's current layout
    produced_rows = [0] * count  # rows of each output stripe's current layout
    stripe_of = [0] * count  # how many stripes each layer has computed (the last layer's slot)

    def bring(step: StripeStep) -> None:
        """Kept rows to the window's top, then the new rows below them."""
        layer, buffer = layers[step.layer], window[step.layer]
        channels, row = layer.in_shape[0], layer.in_shape[2] * layer.in_itemsize
        base, rows = sram.offsets[buffer], step.window_rows
        if step.kept:
            previous = held_rows[step.layer]
            add(
                CascadeCommand(Kind.MOVE, step.layer, "", base + (previous - step.kept) * row, base, channels,
                               step.kept * row, previous * row, rows * row),
                (buffer,), (buffer,),
            )  # fmt: skip
        if step.new_rows:
            dst = base + step.kept * row
            if step.layer == 0:
                height = layer.in_shape[1]
                tensor = ops[0].inputs[operands(ops[0]).x]
                add(
                    CascadeCommand(Kind.LOAD, 0, tensor, step.source_row * row, dst, channels,
                                   step.new_rows * row, height * row, rows * row),
                    (), (buffer,),
                )  # fmt: skip
            else:
                source = output[step.layer - 1][0]
                stride = produced_rows[step.layer - 1] * row
                add(
                    CascadeCommand(Kind.MOVE, step.layer, "", sram.offsets[source] + step.source_row * row, dst,
                                   channels, step.new_rows * row, stride, rows * row),
                    (source, buffer), (buffer,),
                )  # fmt: skip
        held_rows[step.layer] = rows

    first_steps = iter(steps_of[0])
    bring(next(first_steps))
    for steps in program:
        for step in steps:
            index, op = step.layer, ops[step.layer]
            if index:
                bring(step)
            spec = window_row_tile(op, step.out_first, step.out_end)
            if spec.input_types[operands(op).x].shape[2] != step.window_rows:
                raise InternalError(f"cascade layer {index}: its row tile reads other rows than its window")
            key = (index, spec.input_types, spec.output_types, spec.attrs)
            if key not in kernel_of:
                kernel_of[key] = len(kernels)
                kernels.append(tile_kernel(op, spec))  # Unsupported: no cascade of this chain
                kernel_layers.append(index)
            slot = stripe_of[index] % len(output[index])
            out_buffer = output[index][slot]
            reads = [window[index]]
            args: list[int | None] = []
            res = op_residual(op)
            for i, block in enumerate(spec.inputs):
                if block is None:
                    args.append(None)
                elif i == operands(op).x:
                    args.append(sram.offsets[window[index]])
                elif i == res:
                    buffer = residual[index][stripe_of[index] % slots]
                    add(
                        CascadeCommand(Kind.LOAD, index, block.tensor, block.offset, sram.offsets[buffer],
                                       block.count, block.seg_bytes, block.stride, block.seg_bytes),
                        (), (buffer,),
                    )  # fmt: skip
                    args.append(sram.offsets[buffer])
                    reads.append(buffer)
                else:
                    args.append(sram.offsets[constants[index][i]])
                    reads.append(constants[index][i])
            args.append(sram.offsets[out_buffer])
            add(
                CascadeCommand(Kind.COMPUTE, index, kernel=kernel_of[key], args=tuple(args)),
                tuple(reads), (out_buffer,),
            )  # fmt: skip
            produced_rows[index] = step.out_rows
            stripe_of[index] += 1
            if index == 0:
                following = next(first_steps, None)
                if following is not None:
                    bring(following)  # the next stripe's input rows while the later layers compute
            if index == count - 1:
                block = spec.outputs[0]
                add(
                    CascadeCommand(Kind.STORE, index, block.tensor, sram.offsets[out_buffer], block.offset,
                                   block.count, block.seg_bytes, block.seg_bytes, block.stride),
                    (out_buffer,), (),
                )  # fmt: skip
    timed = with_waits(
        [(Action.LOAD if c.is_dma else Action.COMPUTE, 0, 0, -1, reads, writes) for c, reads, writes in raw]
    )
    commands = tuple(replace(c, after=t.after) for (c, _, _), t in zip(raw, timed))
    return CascadeProgram(stripe, tuple(kernels), tuple(kernel_layers), commands, sram.size)


def feature_channels(program: CascadeProgram, command: CascadeCommand) -> int:
    """The channels of the feature map a LOAD or STORE moves rows of (its layer's tensor `inN` or
    `outN`, NCHW: dim 1); 0 for a LOAD of constants or a tensor that is not rank 4."""
    if command.weights or not command.is_dma:
        return 0
    kernel = program.kernels[program.kernel_layers.index(command.layer)].instance
    index = int(command.tensor[3:] if command.tensor.startswith("out") else command.tensor[2:])
    types = kernel.output_types if command.tensor.startswith("out") else kernel.input_types
    found = types[index] if index < len(types) else None
    return found.shape[1] if found is not None and found.rank == 4 else 0


def program_us(
    program: CascadeProgram, layers: Sequence[Layer], linear: Sequence[frozenset[tuple[str, int]]] | None = None
) -> float:
    """The command list's time on two engines that run in order and wait as its commands say, as a
    tile plan's (`tiling.plan_us`): a LOAD or STORE at the DMA rate, a MOVE at the engines' SRAM
    rate, a COMPUTE as a tile's kernel (its MAC-array work at the share of the array its product
    keeps busy, a residual's adds on the vector unit, a pool's taps at the vector unit's rate, no
    faster than it streams its buffers from SRAM
    or drains its outputs), each with its command overhead; each layer's command at its own rates
    (`Layer.rates`, int8 columns for an integer product)."""
    kernel_us = []
    for tile, index in zip(program.kernels, program.kernel_layers):
        rates = layers[index].rates or Rates(0.0, 0.0)
        work = instance_work(tile.instance)
        mac = work.engine in _MAC_ENGINES
        outputs = work.batch * work.m * work.n
        compute = tile.kernel.flops * rates.us_per_flop
        if mac:
            compute /= mac_utilisation(((1, work.batch, work.m, work.n),), rates)
            compute *= depth_factor(work, rates.mac_depth_block, rates.mac_dot)  # depth blocks and dots
        elif work.engine is Engine.VECTOR and rates.us_per_vector_tap:  # the vector unit at its own rate
            compute = work.batch * work.m * work.k * rates.us_per_vector_tap
        if work.engine in (Engine.MAC_ARRAY_RESIDUAL, Engine.MAC_ARRAY_INT8_RESIDUAL):
            compute += outputs * rates.us_per_vector_element
        stage = outputs * rates.us_per_output_element if mac else 0.0
        kernel_us.append(max(compute, work.bytes * rates.us_per_local_byte, stage))

    element_bytes = [dict(pairs) for pairs in linear] if linear is not None else [{} for _ in layers]

    def step(command) -> tuple:
        rates = layers[command.layer].rates or Rates(0.0, 0.0)
        if command.is_dma:
            # the controller's tensor, in DRAM in its linear layout (tiling.plan_us, hg_sim.c)
            linear = element_bytes[command.layer].get(command.tensor) if rates.linear_burst_bytes else None
            direction = Linear.READ if command.kind is Kind.LOAD else Linear.WRITE
            took, overhead, hidden = rates.feature_dma_step(
                command.nbytes, feature_channels(program, command), command.weights, linear, direction
            )
            return True, command.after, took, overhead, hidden
        if command.kind is Kind.MOVE:
            took = command.nbytes * rates.us_per_local_byte
        else:
            took = kernel_us[command.kernel]
        return command.is_dma, command.after, took, rates.command_us

    hidden = (layers[0].rates or Rates(0.0, 0.0)).dma_hidden_us if layers else 0.0  # one device's
    return two_engine_us(map(step, program.commands), hidden)
