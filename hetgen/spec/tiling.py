"""Tiling: how an accelerator with a small local memory (SRAM) runs a kernel unit.

An accelerator's tensors live in its device memory (the co-processor's DRAM it reaches by DMA); its
engines compute only from SRAM. Each kernel unit (an operator and the activations fused into it)
is cut into tiles whose buffers fit the SRAM: output rows (with the input rows their windows reach,
the halo, for convolutions and pooling), output channels (with their slice of the weights), or
both; rows and columns of a matrix product; chunks of an elementwise operator. Each tile is a DMA
of its input blocks into SRAM (a block the previous tile left in SRAM is not loaded again), one
kernel call on the SRAM buffers, and a DMA of its output block back. When two tiles' buffers fit,
they are double-buffered: the next tile's loads and the previous tile's store overlap the compute.
A Conv with its residual Add (the kernel table's residual unit) tiles as the Conv, each tile also
loading the residual's block of its output (no halo), which its kernel adds on the vector unit
before the store (`Tile.vector`, priced at `Rates.us_per_vector_element`). A tile's MAC-array work
is priced at the share of the array its product's shape keeps busy (`mac_utilisation`, from the
kind's mac_rows and mac_cols figures), so the choice among tilings prefers tiles that fill it.

`unit_plan` is the one function that decides. Its `TilePlan` is read by the `fits_memory`
predicate (a unit fits when a plan exists), the cost model (`plan_us`: the plan's commands timed
with the platform's figures), lowering (the command list the device runs) and the simulator's work
descriptors. A unit no plan fits is refused with the numbers; nothing falls back later.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hetgen.abi import WAIT_RING
from hetgen.errors import InternalError
from hetgen.ir import Graph, Node
from hetgen.ops.base import Epilogue, Kernel, OpInstance, Unsupported, WorkRule
from hetgen.ops.registry import op_def
from hetgen.spec.tile_shapes import (
    Block,
    Candidate,
    TileSpec,
    UnitOp,
    candidates,
    has_residual,
    tensor_names,
    unit_op,
)
from hetgen.spec.work import Engine, Linear, brick_bytes, depth_factor, instance_work, linear_bytes

__all__ = ["Action", "Block", "Rates", "TilePlan", "Unfit", "plan_us", "tensor_names", "unit_plan"]

ALIGNMENT = 64
# The simulator remembers when the last RING commands finished; a command waits for one of them.
RING = WAIT_RING


def _aligned(value: int) -> int:
    return (value + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class Tile:
    kernel: int  # index into TilePlan.kernels
    inputs: tuple[Block | None, ...]  # one per kernel input (None: an omitted optional input)
    outputs: tuple[Block, ...]
    flops: int  # the MAC array's work
    vector: int = 0  # elements the vector unit adds after it (a fused residual: the tile's outputs)


class Action(enum.Enum):
    LOAD = "load"  # DMA a block of an input from device memory (or the weights) into SRAM
    COMPUTE = "compute"  # run the tile's kernel on SRAM buffers
    STORE = "store"  # DMA an output block from SRAM to device memory


@dataclass(frozen=True)
class Buffer:
    """An SRAM buffer: input or output `operand`'s slot, or the kernels' scratch (operand -1)."""

    role: str  # "input" | "output" | "scratch"
    operand: int
    slot: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Command:
    action: Action
    tile: int
    operand: int  # LOAD: input index; STORE: output index; COMPUTE: -1
    buffer: int  # index into TilePlan.buffers (COMPUTE: -1; its buffers are in `reads`/`writes`)
    reads: tuple[int, ...]  # buffers read
    writes: tuple[int, ...]  # buffers written
    after: int  # how many commands back the command this one waits for is (0: none); < RING

    @property
    def is_dma(self) -> bool:
        return self.action is not Action.COMPUTE


@dataclass(frozen=True)
class TileKernel:
    instance: OpInstance  # the operator on one tile's shapes
    kernel: Kernel


@dataclass(frozen=True)
class TilePlan:
    op: str
    split: str  # "whole" | "rows" | "channels" | "rows x channels" | "columns" | "chunks" ...
    tile_shape: tuple[int, ...]  # the output block of a full tile
    kernels: tuple[TileKernel, ...]
    tiles: tuple[Tile, ...]
    buffers: tuple[Buffer, ...]
    commands: tuple[Command, ...]
    double_buffered: bool
    sram_bytes: int  # the tile buffers
    scratch_bytes: int = 0  # the emulating C kernels' workspace, outside SRAM (build_plan)
    constant_inputs: tuple[bool, ...] = ()  # per input: a constant's (the weights' DMA rate, `Rates.dma_us`)
    # per input, then per output: the channels of its tensor where it is a rank-4 feature map (NCHW dim
    # 1; 0: a constant or another rank), whose pixels the DMA fetches in bricks (`block_channels`)
    channels: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())

    @property
    def count(self) -> int:
        return len(self.tiles)

    def moved(self, action: Action) -> int:
        """Bytes the DMA moves for `action` (LOAD or STORE), every tile included."""
        return self._moved[action]

    @functools.cached_property
    def _moved(self) -> dict[Action, int]:
        # Summed once per plan (a plan is frozen; layers of one shape share it): explain and
        # placement ask each group's plans for their DMA bytes.
        totals = dict.fromkeys(Action, 0)
        for command in self.commands:
            if command.is_dma:
                totals[command.action] += self.block_of(command).nbytes
        return totals

    @property
    def dma_bytes(self) -> int:
        return self.moved(Action.LOAD) + self.moved(Action.STORE)

    @functools.cached_property
    def mac_products(self) -> tuple[tuple[Product, ...], ...]:
        """Per kernel: the MAC-array product one call computes, as the simulator's work descriptor
        says (hetgen/spec/work.py); () for a kernel of the vector unit."""
        mac_engines = (
            Engine.MAC_ARRAY,
            Engine.MAC_ARRAY_INT8,
            Engine.MAC_ARRAY_RESIDUAL,
            Engine.MAC_ARRAY_INT8_RESIDUAL,
        )
        found = []
        for kernel in self.kernels:
            work = instance_work(kernel.instance)
            found.append(((1, work.batch, work.m, work.n),) if work.engine in mac_engines else ())
        return tuple(found)

    @functools.cached_property
    def vector_taps(self) -> tuple[int, ...]:
        """Per kernel: the element-taps one call takes on the vector unit, as the simulator's work
        descriptor says (batch x m x k); 0 for a kernel of the MAC array."""
        found = []
        for kernel in self.kernels:
            work = instance_work(kernel.instance)
            found.append(work.batch * work.m * work.k if work.engine is Engine.VECTOR else 0)
        return tuple(found)

    def block_of(self, command: Command) -> Block:
        tile = self.tiles[command.tile]
        return tile.inputs[command.operand] if command.action is Action.LOAD else tile.outputs[command.operand]

    def describe(self) -> str:
        shape = "x".join(map(str, self.tile_shape))
        buffering = "double-buffered" if self.double_buffered else "single-buffered"
        return (
            f"{self.split}: {self.count} tile{'s' if self.count != 1 else ''} of {shape}, "
            f"DMA {self.dma_bytes} bytes, {buffering}, SRAM {self.sram_bytes} bytes"
        )


@dataclass(frozen=True)
class Unfit:
    """Why no plan fits: the smallest footprint any tiling reached, and what it holds; or, where
    `memory` is False, why the unit's kernel cannot be lowered at all (its tiles' or its own)."""

    reason: str
    memory: bool = True  # False: not a matter of memory (no kernel), so no SRAM size would help


# ---------------------------------------------------------------------------------------------
# From tiles to a plan: kernels, SRAM buffers, the command list


def _lowered(instance: OpInstance) -> Kernel:
    """The tile instance's kernel. Its constants are the one-value ones a unit carries (numpy
    scalars, which do not hash): the cache keys them by their bytes."""
    constants = tuple(None if c is None else (c.dtype.str, c.shape, c.tobytes()) for c in instance.constants)
    key = (replace(instance, constants=(None,) * len(instance.constants)), constants)
    kernel = _LOWERED.get(key)
    if kernel is None:
        if len(_LOWERED) >= _LOWERED_LIMIT:
            _LOWERED.clear()
        definition = op_def(instance.node.op, instance.node.opset)
        kernel = _LOWERED[key] = definition.lower(instance)  # Unsupported: not cached, raised again
    return kernel


_LOWERED: dict[tuple, Kernel] = {}
_LOWERED_LIMIT = 4096


def _kernel_of(op: UnitOp, spec: TileSpec, whole: bool) -> OpInstance:
    if whole:
        return op.instance(op.input_types, op.output_types)
    return op.instance(spec.input_types, spec.output_types, dict(spec.attrs))


def tile_kernel(op: UnitOp, spec: TileSpec) -> TileKernel:
    """The kernel of one tile of `op` (Unsupported where it cannot be lowered), cached as plans'."""
    instance = _kernel_of(op, spec, False)
    return TileKernel(instance, _lowered(instance))


def with_waits(raw: list[tuple]) -> tuple[Command, ...]:
    """`_with_waits` for a command list built elsewhere (hetgen/spec/cascade_program.py)."""
    return _with_waits(raw)


def build_plan(op: UnitOp, split: str, shape, specs: list[TileSpec], capacity: int, double: bool) -> TilePlan | None:
    """The plan for these tiles, or None when its SRAM buffers exceed `capacity`; Unsupported when
    a tile's kernel cannot be lowered."""
    whole = split == "whole"
    instances: dict[tuple, int] = {}
    kernels: list[TileKernel] = []
    tiles: list[Tile] = []
    for spec in specs:
        key = (spec.input_types, spec.output_types, spec.attrs)
        if key not in instances:
            instance = _kernel_of(op, spec, whole)
            kernel = _lowered(instance)  # Unsupported: the caller says why no tiling of this shape runs
            instances[key] = len(kernels)
            kernels.append(TileKernel(instance, kernel))
        index = instances[key]
        vector = spec.output_types[0].size if has_residual(op) else 0
        tiles.append(Tile(index, spec.inputs, spec.outputs, kernels[index].kernel.flops, vector))
    n_in, n_out = len(op.inputs), len(op.outputs)
    # Which tiles load which input: a block still resident from the previous load is reused.
    loads: list[list[int]] = [[] for _ in range(n_in)]  # per input: the tile of each load
    resident: list[Block | None] = [None] * n_in
    load_at: dict[tuple[int, int], int] = {}  # (tile, input) -> load number of that input
    for t, tile in enumerate(tiles):
        for i, block in enumerate(tile.inputs):
            if block is None:
                continue
            if block != resident[i]:
                loads[i].append(t)
                resident[i] = block
            load_at[(t, i)] = len(loads[i]) - 1
    slots_in = [min(2 if double else 1, max(len(loads[i]), 1)) for i in range(n_in)]
    slots_out = [min(2 if double else 1, len(tiles)) for _ in range(n_out)]
    buffers: list[Buffer] = []
    offset = 0
    in_buffer: dict[tuple[int, int], int] = {}
    for i in range(n_in):
        if not loads[i]:
            continue  # an omitted optional input: nothing to load
        size = max(tile.inputs[i].nbytes for tile in tiles if tile.inputs[i] is not None)  # may be 0: an empty tensor
        for slot in range(slots_in[i]):
            in_buffer[(i, slot)] = len(buffers)
            buffers.append(Buffer("input", i, slot, offset if size else 0, size))  # 0 bytes: at the SRAM's start
            offset += _aligned(size)
    out_buffer: dict[tuple[int, int], int] = {}
    for j in range(n_out):
        size = max(tile.outputs[j].nbytes for tile in tiles)
        for slot in range(slots_out[j]):
            out_buffer[(j, slot)] = len(buffers)
            # an empty tensor's buffer sits at the SRAM's start, never at its end (the device checks
            # that every kernel operand starts inside the SRAM; a 0-byte one at the end would not)
            buffers.append(Buffer("output", j, slot, offset if size else 0, size))
            offset += _aligned(size)
    # The host C kernel's workspace (im2col, GEMM packing) emulates how the MAC array streams its
    # operands; it is the emulator's, not the device's, so it lies outside SRAM (offset 0 of its own).
    scratch = max(k.kernel.scratch_bytes for k in kernels)
    scratch_buffer = -1
    if scratch:
        scratch_buffer = len(buffers)
        buffers.append(Buffer("scratch", -1, 0, 0, scratch))
    if offset > capacity:
        return None

    def load_cmd(t: int) -> list[tuple]:
        out = []
        for i, block in enumerate(tiles[t].inputs):
            if block is not None and loads[i][load_at[(t, i)]] == t:
                buf = in_buffer[(i, load_at[(t, i)] % slots_in[i])]
                out.append((Action.LOAD, t, i, buf, (), (buf,)))
        return out

    def compute_cmd(t: int) -> tuple:
        reads = tuple(in_buffer[(i, load_at[(t, i)] % slots_in[i])] for i, b in enumerate(tiles[t].inputs) if b)
        writes = tuple(out_buffer[(j, t % slots_out[j])] for j in range(n_out))
        extra = (scratch_buffer,) if scratch_buffer >= 0 else ()
        return (Action.COMPUTE, t, -1, -1, reads + extra, writes + extra)

    def store_cmd(t: int) -> list[tuple]:
        return [
            (Action.STORE, t, j, out_buffer[(j, t % slots_out[j])], (out_buffer[(j, t % slots_out[j])],), ())
            for j in range(n_out)
        ]

    raw: list[tuple] = []
    if double and len(tiles) > 1:  # software pipeline: the next tile's loads before this tile's compute
        raw += load_cmd(0)
        for t in range(len(tiles)):
            if t + 1 < len(tiles):
                raw += load_cmd(t + 1)
            raw.append(compute_cmd(t))
            raw += store_cmd(t)
    else:
        for t in range(len(tiles)):
            raw += load_cmd(t)
            raw.append(compute_cmd(t))
            raw += store_cmd(t)
    commands = _with_waits(raw)
    return TilePlan(
        op.node.op,
        split,
        tuple(shape),
        tuple(kernels),
        tuple(tiles),
        tuple(buffers),
        commands,
        double and len(tiles) > 1,
        offset,
        scratch,
        tuple(bool(c) for c in op.constant),
        (
            tuple(_feature_channels(t, c, op) for t, c in zip(op.input_types, op.constant)),
            tuple(_feature_channels(t, False, op) for t in op.output_types),
        ),
    )


def _feature_channels(found, constant: bool, op: UnitOp) -> int:
    """A rank-4 image's channels (NCHW dim 1); 0 for a constant, another rank, or a matrix product's
    operand (a batched MatMul's [batch, heads, rows, columns] is no image: its dim 1 is heads)."""
    definition = op_def(op.node.op)
    if definition is not None and definition.integer_mac is not None:
        definition = op_def(definition.integer_mac.like)
    if definition is not None and definition.work in (WorkRule.MATMUL, WorkRule.GEMM):
        return 0
    return found.shape[1] if found is not None and not constant and found.rank == 4 else 0


def _with_waits(raw: list[tuple]) -> tuple[Command, ...]:
    """Each command waits for the latest earlier command of the other engine (DMA or compute) that
    touches one of its buffers; commands of one engine run in order, so that one suffices."""
    commands: list[Command] = []
    last_write: dict[int, int] = {}
    last_read: dict[int, int] = {}
    for index, (action, t, operand, buf, reads, writes) in enumerate(raw):
        dma = action is not Action.COMPUTE
        conflicts = [last_write.get(b, -1) for b in reads + writes] + [last_read.get(b, -1) for b in writes]
        other = [c for c in conflicts if c >= 0 and commands[c].is_dma != dma]
        wait = max(other, default=-1)
        if wait >= 0 and index - wait >= RING:
            # Too far back for the simulator's memory: wait instead for the oldest command of that
            # engine it still remembers, which finishes later (engines run in order).
            wait = next((c for c in range(index - RING + 1, index) if commands[c].is_dma != dma), -1)
            if wait < 0:
                raise InternalError(f"tiling: command {index} has no command of the other engine within {RING}")
        for b in reads:
            last_read[b] = index
        for b in writes:
            last_write[b] = index
        commands.append(Command(action, t, operand, buf, reads, writes, index - wait if wait >= 0 else 0))
    return tuple(commands)


# ---------------------------------------------------------------------------------------------
# Timing a plan and choosing one


@dataclass(frozen=True)
class Rates:
    """What a plan's commands take: us per flop of compute, per byte of DMA, per command."""

    us_per_flop: float
    us_per_byte: float
    command_us: float = 0.0
    us_per_local_byte: float = 0.0  # the engines stream a tile's buffers from SRAM (0: not modelled)
    us_per_vector_element: float = 0.0  # the vector unit's add after the MAC array (a fused residual)
    # The MAC array's shape (the kind's mac_rows and mac_cols figures; 0: not modelled, every
    # tile at full utilisation): a product of m x n outputs takes ceil(m/rows) * ceil(n/cols)
    # steps of the whole array per unit of depth, so a tile with fewer outputs leaves cells idle.
    mac_rows: int = 0
    mac_cols: int = 0
    us_per_output_element: float = 0.0  # the MAC array's output stage (0: not modelled)
    # Weights from a memory apart from the other tensors' (Vela's Shared_Sram): us per byte of
    # their DMA (0: us_per_byte) and the us each weight DMA waits beyond another DMA's
    us_per_weight_byte: float = 0.0
    weight_setup_us: float = 0.0

    def dma_us(self, nbytes: int, weights: bool = False) -> float:
        """A DMA of `nbytes`: of weights at their own rate (and latency) where they have one."""
        if weights and self.us_per_weight_byte:
            return nbytes * self.us_per_weight_byte + self.weight_setup_us
        return nbytes * self.us_per_byte

    dma_hidden_us: float = 0.0  # a DMA queued behind another hides this much of its setup (0: none)
    # The vector unit's own rate (the kind's vector_gops: vector_lanes element-taps a cycle): a
    # vector-unit kernel (pools, elementwise, lookups, quantizing) takes its work descriptor's taps
    # at it, as the simulator counts them (hg_sim.c HG_SIM_VECTOR), whatever the MAC array's peak;
    # 0: not modelled, its flops at `us_per_flop` (the pattern's efficiency of the peak).
    us_per_vector_tap: float = 0.0
    # A weight DMA queued behind another hides this much more of its setup than dma_hidden_us (the
    # reads in flight from the weights' own memory, weight_dma_outstanding_bytes; 0: no more)
    weight_hidden_us: float = 0.0

    def dma_step(self, nbytes: int, weights: bool = False) -> tuple[float, float, float]:
        """A DMA command's (time, overhead, setup hidden where queued) for two_engine_us: a weight
        DMA from a memory of its own pays its extra latency as overhead, which its reads in flight
        hide where it is queued (as hg_sim.c counts a DMA from the weights region)."""
        if weights and self.us_per_weight_byte:
            return (
                nbytes * self.us_per_weight_byte,
                self.command_us + self.weight_setup_us,
                self.dma_hidden_us + self.weight_hidden_us,
            )
        return nbytes * self.us_per_byte, self.command_us, self.dma_hidden_us

    # The MAC array takes a dense convolution's input channels this many at a time per kernel tap
    # (the device model's mac_depth_block, `work.mac_depth`; 0: not modelled), as hg_sim.c counts.
    mac_depth_block: int = 0
    # The DMA fetches a feature map's pixels in bricks of this many channels (the device model's
    # dma_brick_channels, `work.brick_bytes`; 0: not modelled), as hg_sim.c counts.
    dma_brick_channels: int = 0
    # The tensors the controller writes and reads, in DRAM in its linear layout: a DMA of one takes
    # a burst of this many bytes per access of a pixel's channels, a write access at most
    # linear_write_bytes (the device model's; `work.linear_bytes`; 0: not modelled), as hg_sim.c counts.
    linear_burst_bytes: int = 0
    linear_write_bytes: int = 0
    # Products each multiplier sums along the depth (an int8 product on a dot-product array: the
    # device model's int8_mac_depth, `work.mac_depth`; 0 or 1: one), as hg_sim.c counts: a product
    # of depth k takes ceil(k / it) steps of the array, priced at its peak (mac_rows x mac_cols x it
    # MACs a cycle) over the depth rounded up to whole dots.
    mac_dot: int = 0

    def feature_dma_step(
        self, nbytes: int, channels: int, weights: bool, linear_element_bytes: int | None, direction: int
    ) -> tuple[float, float, float]:
        """`dma_step` of a LOAD or STORE of `nbytes` of a tensor of `channels` channels (0: not a
        feature map), with the bytes it really moves, as hg_sim.c counts them: a controller's tensor
        in DRAM's linear layout (`linear_element_bytes` its element size; None: the device's own)
        a burst per pixel access, at the DRAM's (the weights' memory's) rate and latency; a feature
        map of the device's own in whole bricks. One rule for tile plans and cascades."""
        if linear_element_bytes is not None:
            nbytes = linear_bytes(
                nbytes,
                channels,
                linear_element_bytes,
                direction,
                self.linear_burst_bytes,
                self.mac_depth_block,
                self.linear_write_bytes,
            )
            return self.dma_step(nbytes, weights=True)
        if self.dma_brick_channels and not weights:
            nbytes = brick_bytes(nbytes, channels, self.dma_brick_channels)
        return self.dma_step(nbytes, weights)

    def linear_extra_us(self, nbytes: int, channels: int, element_bytes: int, direction: int) -> float:
        """What a DMA of `nbytes` of a tensor of `channels` channels takes more from (to) DRAM in the
        controller's linear layout than as one of the device's own feature maps (its bricks at the
        DMA's rate): the search's per-tensor price of a tensor crossing to or from the controller
        (hetgen/partition/space.py); 0 where not modelled or not a feature map."""
        if not self.linear_burst_bytes or not channels:
            return 0.0
        linear = linear_bytes(
            nbytes,
            channels,
            element_bytes,
            direction,
            self.linear_burst_bytes,
            self.mac_depth_block,
            self.linear_write_bytes,
        )
        own = brick_bytes(nbytes, channels, self.dma_brick_channels) * self.us_per_byte
        dram = self.us_per_weight_byte or self.us_per_byte
        return max(0.0, linear * dram + self.weight_setup_us - own)


Product = tuple[int, int, int, int]  # (tiles, batch, m, n): tiles of one shape, each `batch` m x n products


def mac_utilisation(products: Sequence[Product], rates: Rates) -> float:
    """The share of the MAC array's cells that do useful work over the steps these products take
    (the depth k is the same for every tile of a unit, so it cancels): 1 where the rates carry no
    array shape or there is no product (the vector unit's work)."""
    rows, cols = rates.mac_rows, rates.mac_cols
    if not rows or not cols or not products:
        return 1.0
    useful = sum(tiles * batch * m * n for tiles, batch, m, n in products)
    cells = sum(tiles * batch * -(-m // rows) * rows * -(-n // cols) * cols for tiles, batch, m, n in products)
    return useful / cells if cells and useful else 1.0


def _tile_bytes(tile: Tile) -> int:
    """The SRAM bytes a tile's kernel reads and writes."""
    return sum(block.nbytes for block in (*tile.inputs, *tile.outputs) if block is not None)


# plan_us by (plan, rates). Plans come from the lru-cached _best_plan, so layers of one shape share
# one plan object and placement asks for its time once per device instead of once per candidate
# group (a 5,000-node graph asks thousands of times). Keyed by id(plan) because plans hold kernels
# (numpy constants) that do not hash; the value keeps the plan alive, so its id stays unique.
_PLAN_US: dict[tuple[int, Rates, frozenset[tuple[str, int]]], tuple[TilePlan, float]] = {}
_PLAN_US_LIMIT = 8192


def plan_us(plan: TilePlan, rates: Rates, linear: frozenset[tuple[str, int]] = frozenset()) -> float:
    """The plan's time on two engines that run in order and wait as its commands say; `linear`: the
    positions (`in0`, `out0`, ...) of its tensors the controller writes or reads, with their element
    bytes, which stay in DRAM in its linear layout (`Rates.linear_burst_bytes`: DMA'd a pixel at a
    time at the DRAM's rate)."""
    linear = linear if rates.linear_burst_bytes else frozenset()
    key = (id(plan), rates, linear)
    cached = _PLAN_US.get(key)
    if cached is not None and cached[0] is plan:
        return cached[1]
    if len(_PLAN_US) >= _PLAN_US_LIMIT:
        _PLAN_US.clear()
    us = _timeline_us(plan, rates, linear)
    _PLAN_US[key] = (plan, us)
    return us


def _timeline_us(plan: TilePlan, rates: Rates, linear: frozenset[tuple[str, int]] = frozenset()) -> float:
    element_bytes = dict(linear)
    utilisation = [mac_utilisation(products, rates) for products in plan.mac_products]
    if rates.mac_depth_block or rates.mac_dot > 1:  # depth in the array's blocks and dots: fewer useful MACs a step
        utilisation = [
            use / depth_factor(instance_work(kernel.instance), rates.mac_depth_block, rates.mac_dot)
            for use, kernel in zip(utilisation, plan.kernels)
        ]

    def step(command) -> tuple:
        if command.is_dma:
            weights = command.action is Action.LOAD and _is_constant(plan, command.operand)
            block = plan.block_of(command)
            direction = Linear.READ if command.action is Action.LOAD else Linear.WRITE
            dma, overhead, hidden = rates.feature_dma_step(
                block.nbytes, block_channels(plan, command), weights, element_bytes.get(block.tensor), direction
            )
            return True, command.after, dma, overhead, hidden
        return False, command.after, took(command), rates.command_us

    def took(command) -> float:
        tile = plan.tiles[command.tile]
        taps = plan.vector_taps[tile.kernel] if rates.us_per_vector_tap else 0
        if taps:  # the vector unit at its own rate
            compute = taps * rates.us_per_vector_tap
        else:
            compute = tile.flops * rates.us_per_flop / utilisation[tile.kernel]
        compute += tile.vector * rates.us_per_vector_element
        return max(compute, _tile_bytes(tile) * rates.us_per_local_byte, _output_us(plan, tile, rates))

    return two_engine_us(map(step, plan.commands), rates.dma_hidden_us)


def block_channels(plan: TilePlan, command: Command) -> int:
    """The channels of the feature map a LOAD or STORE moves a block of (its tensor's, NCHW dim 1:
    a tensor's pixels are whole bricks, whatever channels of it a tile takes); 0 where it is not a
    rank-4 feature map (a constant, a matrix)."""
    per_operand = plan.channels[0 if command.action is Action.LOAD else 1]
    return per_operand[command.operand] if command.operand < len(per_operand) else 0


def _is_constant(plan: TilePlan, operand: int) -> bool:
    return operand < len(plan.constant_inputs) and plan.constant_inputs[operand]


def queued_overhead(overhead: float, hidden: float) -> float:
    """A DMA command's overhead where it is queued behind another DMA: its setup less what the
    reads in flight hide (`Rates.dma_hidden_us`), never below 0."""
    return max(0.0, overhead - hidden)


def two_engine_us(steps, dma_hidden_us: float = 0.0) -> float:
    """The time of commands on the npu's two engines (DMA, compute), each running its commands in
    order: per command (is_dma, after, its time, its overhead[, the setup it hides where queued]), it starts when its engine is free and
    the command `after` places before it (0: none) has finished; the last one to finish ends it. A
    DMA that waits only for the DMA engine (queued behind another) hides `dma_hidden_us` of its
    overhead (`queued_overhead`). The simulator (hg_sim.c) runs its command queue so; tile plans and
    cascades are timed here."""
    finish: list[float] = []
    free = {True: 0.0, False: 0.0}
    end = 0.0
    for index, (is_dma, after, took, overhead, *own) in enumerate(steps):
        ready = finish[index - after] if after else 0.0
        hidden = own[0] if own else dma_hidden_us  # a weight DMA's own (Rates.dma_step)
        if is_dma and hidden and free[True] > 0.0 and ready <= free[True]:
            overhead = queued_overhead(overhead, hidden)
        done = max(free[is_dma], ready) + took + overhead
        free[is_dma] = done
        finish.append(done)
        end = max(end, done)
    return end


def _output_us(plan: TilePlan, tile: Tile, rates: Rates) -> float:
    """The MAC array's output stage on a tile: its kernel's output elements (batch x m x n of the
    work descriptor, as the simulator counts them) at the stage's rate; 0 for the vector unit."""
    if not rates.us_per_output_element:
        return 0.0
    return sum(batch * m * n for _, batch, m, n in plan.mac_products[tile.kernel]) * rates.us_per_output_element


# Tile counts past this make command lists no device would be given.
MAX_TILES = 4096


def least_us(candidate: Candidate, double: bool, flops: int, rates: Rates, vector: int = 0, outputs: int = 1) -> float:
    """A floor under what `plan_us` prices the candidate's plan at, known before building it: each
    of the two engines runs its commands one after another, so a double-buffered plan takes at
    least the busier engine's commands end to end, and a single-buffered one (or one tile) both
    engines' (each tile's compute waits for its loads, its store for its compute, and the next
    tile's compute for that store: its one output buffer). The DMA engine: the candidate's
    bytes at the cheaper of the DMA's rates (bricks only add bytes) and each command's overhead
    less the most a queued one hides; the compute engine: the MAC array's work at the candidate's
    utilisation (depth blocks and dots only lower it; the vector unit's work, none), the fused residual's
    adds, and each command's overhead."""
    per_byte = min(rates.us_per_byte, rates.us_per_weight_byte or rates.us_per_byte)
    setup = rates.command_us + min(0.0, rates.weight_setup_us)
    dma_commands = sum(candidate.input_loads) + candidate.tiles * outputs
    dma = candidate.dma_bytes * per_byte + dma_commands * max(0.0, setup - rates.dma_hidden_us - rates.weight_hidden_us)
    mac = flops * rates.us_per_flop / mac_utilisation(candidate.products, rates) if candidate.products else 0.0
    compute = mac + vector * rates.us_per_vector_element + candidate.tiles * rates.command_us
    return max(dma, compute) if double and candidate.tiles > 1 else dma + compute


def footprint(candidate: Candidate, double: bool) -> int:
    """The SRAM a candidate's buffers take (the kernels' emulation workspace is not SRAM)."""
    slots = [
        _aligned(size) * (min(2, loads) if double else 1)
        for size, loads in zip(candidate.input_blocks, candidate.input_loads)
        if size
    ]
    outs = [_aligned(size) * (2 if double and candidate.tiles > 1 else 1) for size in candidate.output_blocks]
    return sum(slots) + sum(outs)


@dataclass(frozen=True)
class _Entry:
    """A tiling the chooser may build: a candidate, double- or single-buffered."""

    candidate: Candidate
    double: bool
    order: int  # its place among `candidates(op)` x (double, single): names it, and breaks ties last


@dataclass(frozen=True)
class Priced:
    """A plan the chooser built, its price (`plan_us` at the rates it chose at) and its tiling's
    place among the candidates (the last tie-break)."""

    plan: TilePlan
    us: float
    order: int

    @property
    def rank(self) -> tuple[float, int, int]:
        """Least price first; of equal prices, the fewest tiles (split no finer than pays)."""
        return (self.us, self.plan.count, self.order)


@dataclass(frozen=True)
class Chosen:
    """What the chooser built for a unit, and the floor (`least_us`) under every plan it did not
    build: none of those can be priced below `kept`."""

    built: tuple[Priced, ...]
    unbuilt_floor: float  # the least floor of the fitting tilings left unbuilt (inf: none left)

    @property
    def kept(self) -> Priced:
        return min(self.built, key=lambda priced: priced.rank)


@functools.lru_cache(maxsize=2048)
def chosen_plans(op: UnitOp, capacity: int, rates: Rates) -> Chosen | Unfit:
    """The least-priced plan of every tiling of `op` whose buffers fit `capacity` bytes of SRAM,
    found by building and pricing (`plan_us`, as the cost model prices it) the tilings in the order
    of their floor (`least_us`) until the next floor is above the least price found: the rest
    cannot be cheaper. So the plan kept is the least priced of all that fit, which makes it
    monotone in the hardware by construction: more SRAM only adds tilings to choose from (a plan
    that fits a capacity fits every larger one), and more MACs, bandwidth or clock price every
    tiling no higher (`plan_us` is monotone in the rates). An Unfit where no tiling fits."""
    try:
        flops = _lowered(op.instance(op.input_types, op.output_types)).flops
    except Unsupported as exc:
        # a tile kernel reads its inputs from SRAM: of the constants, it knows the one-value ones only
        return Unfit(
            f"{op.node.op} cannot be lowered as a tile kernel (of its constants, one-value ones only): {exc}",
            memory=False,
        )
    vector = op.output_types[0].size if has_residual(op) else 0
    fitting: list[tuple[float, _Entry]] = []
    smallest: tuple[int, str] | None = None
    for index, candidate in enumerate(candidates(op)):
        if candidate.tiles > MAX_TILES:
            continue
        for double in (True, False):
            size = footprint(candidate, double)
            if size <= capacity:
                floor = least_us(candidate, double, flops, rates, vector, len(op.outputs))
                fitting.append((floor, _Entry(candidate, double, 2 * index + (not double))))
            elif smallest is None or size < smallest[0]:
                smallest = (size, f"{candidate.split} {'x'.join(map(str, candidate.tile_shape))}")
    fitting.sort(key=lambda item: (item[0], item[1].order))
    built: list[Priced] = []
    best = math.inf
    refused: Unsupported | None = None  # the first tiling that fitted but whose tile kernel did not lower
    for floor, entry in fitting:
        if floor > best:
            return Chosen(tuple(built), floor)
        try:
            plan = _built(op, entry)
        except Unsupported as exc:
            refused = refused or exc
            continue
        if plan.sram_bytes <= capacity:
            built.append(Priced(plan, plan_us(plan, rates), entry.order))
            best = min(best, built[-1].us)
    if built:
        return Chosen(tuple(built), math.inf)
    if refused is not None:
        return Unfit(f"{op.node.op} cannot be lowered on its tiles: {refused}", memory=False)
    detail = f" (the smallest tiling needs {smallest[0]} bytes: {smallest[1]})" if smallest else ""
    what = f"{op.node.op} with its residual Add" if has_residual(op) else op.node.op
    return Unfit(f"no tiling of {what} fits {capacity} bytes of local memory{detail}")


def _built(op: UnitOp, entry: _Entry) -> TilePlan:
    """The tiling's plan whatever the capacity (the chooser compares its buffers with the
    capacity), built once for every capacity and rate that ask for it: `candidates(op)` lists the
    same tilings in the same order each time, so (op, order) names one."""
    key = (op, entry.order)
    plan = _BUILT.get(key)
    if plan is None:
        if len(_BUILT) >= _BUILT_LIMIT:
            _BUILT.clear()
        candidate = entry.candidate
        plan = build_plan(op, candidate.split, candidate.tile_shape, candidate.specs(), UNBOUNDED, entry.double)
        _BUILT[key] = plan
    return plan


UNBOUNDED = 2**62  # build_plan's capacity where the caller compares the plan's buffers itself
_BUILT: dict[tuple[UnitOp, int], TilePlan] = {}
_BUILT_LIMIT = 8192


def _best_plan(op: UnitOp, capacity: int, rates: Rates) -> TilePlan | Unfit:
    chosen = chosen_plans(op, capacity, rates)
    return chosen if isinstance(chosen, Unfit) else chosen.kept.plan


def unit_plan(
    nodes: Sequence[Node],
    graph: Graph,
    epilogue: tuple[Epilogue, ...],
    capacity: int,
    rates: Rates,
    inputs: Sequence[str] | None = None,
):
    """The tiling of the kernel unit `nodes` (its head, then the activations fused into it) on a
    device with `capacity` bytes of SRAM: a TilePlan, or an Unfit that says why none fits.
    `inputs`: the kernel's inputs where they are not its head's (a Conv with its residual Add reads
    x, w, bias or "", and the residual, which each tile adds to its output block before storing it)."""
    return _best_plan(unit_op(nodes, graph, epilogue, inputs), capacity, rates)
