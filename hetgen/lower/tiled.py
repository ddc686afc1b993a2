"""A tile plan (hetgen/spec/tiling.py) becomes the command list a simulated accelerator runs.

The device's memory is one block: its SRAM first (`sram_size` bytes, where every kernel call's
operands lie, as the plan laid them out), then the emulating C kernels' workspace (im2col, GEMM
packing: how the host imitates a MAC array that streams operands from SRAM; not the device's
memory), then the rest of its memory, where activations live between invocations (planned by
liveness like any arena). A LOAD is a strided DMA from a tensor
there (or from the weight store) into an SRAM buffer, a COMPUTE calls the tile's kernel on SRAM
buffers, a STORE is a strided DMA back. Each command's work descriptor carries how many commands
back the command it waits for is, so the simulator overlaps DMA and compute as the plan allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetgen.errors import InternalError
from hetgen.lower.program import BufferRef, Call, Copy, KernelUnit, Region
from hetgen.lower.work import Engine, Work, instance_work
from hetgen.spec.cascade_program import CascadeProgram, Kind, feature_channels
from hetgen.spec.tiling import Action, TilePlan, block_channels
from hetgen.spec.work import Linear


@dataclass(frozen=True)
class TiledUnit:
    """A kernel unit on a tiled accelerator: its plan and the generated function of each tile kernel."""

    plan: TilePlan
    functions: tuple[KernelUnit, ...]  # one per plan.kernels


def tile_functions(plan: TilePlan, fn: str, nodes: tuple[str, ...], label: str) -> tuple[KernelUnit, ...]:
    if len(plan.kernels) == 1:
        return (KernelUnit(fn, nodes, f"{label} ({plan.split})", plan.kernels[0].kernel),)
    return tuple(
        KernelUnit(f"{fn}_t{index}", nodes, f"{label} (tile kernel {index} of {plan.split})", tile.kernel)
        for index, tile in enumerate(plan.kernels)
    )


def tiled_steps(
    unit: TiledUnit, tensor_ref, sram_size: int, scratch_base: int, linear: Mapping[str, int] | None = None
) -> list:
    """The steps of one invocation running `unit`; `tensor_ref(name)` is where a tensor lives in
    device memory (an ARENA offset past the SRAM) or the weight store (WEIGHTS); `linear`: the
    positions of the tensors the controller writes or reads (with their element bytes), whose DMAs
    are marked `Work.linear`."""
    linear = linear or {}
    plan = unit.plan
    steps: list = []
    for command in plan.commands:
        tile = plan.tiles[command.tile]
        if command.action is Action.COMPUTE:
            steps.append(_call(unit, command, sram_size, scratch_base))
            continue
        block = plan.block_of(command)
        buffer = plan.buffers[command.buffer]
        base = tensor_ref(block.tensor)
        far = BufferRef(base.region, base.position + block.offset, base.tensor)
        near = BufferRef(Region.ARENA, buffer.offset, f"sram:{base.tensor}")
        if buffer.offset + block.nbytes > sram_size:
            raise InternalError(f"tile buffer at {buffer.offset} + {block.nbytes} is past the SRAM ({sram_size})")
        loading = command.action is Action.LOAD
        src, dst = (far, near) if loading else (near, far)
        src_stride, dst_stride = (block.stride, block.seg_bytes) if loading else (block.seg_bytes, block.stride)
        work = Work(
            Engine.DMA,
            m=block.count,
            n=block.seg_bytes,
            k=block_channels(plan, command),  # a feature map's channels: its bricks (hg_sim_brick_bytes)
            bytes=block.nbytes,
            after=command.after,
            src_stride=src_stride,
            dst_stride=dst_stride,
            linear=_linear(block.tensor in linear, loading),
            element_bytes=linear.get(block.tensor, 0),
        )
        steps.append(Copy(src, dst, block.nbytes, work, block.count, src_stride, dst_stride))
        del tile
    return steps


def _call(unit: TiledUnit, command, sram_size: int, scratch_base: int) -> Call:
    plan = unit.plan
    tile = plan.tiles[command.tile]
    tile_kernel = plan.kernels[tile.kernel]
    present = [i for i, block in enumerate(tile.inputs) if block is not None]
    read = dict(zip(present, command.reads))
    args = []
    for i, block in enumerate(tile.inputs):
        args.append(
            BufferRef(Region.ARENA, plan.buffers[read[i]].offset, "sram") if block else BufferRef(Region.NONE, 0)
        )
    for j in range(len(tile.outputs)):
        args.append(BufferRef(Region.ARENA, plan.buffers[command.writes[j]].offset, "sram"))
    if tile_kernel.kernel.scratch_bytes:
        scratch = next(b for b in plan.buffers if b.role == "scratch")
        args.append(BufferRef(Region.ARENA, scratch_base + scratch.offset, "scratch"))
    operands = [b for b in (*command.reads, *command.writes) if plan.buffers[b].role != "scratch"]
    end = max(plan.buffers[b].offset + plan.buffers[b].nbytes for b in operands)
    if end > sram_size:
        raise InternalError(f"a tile kernel's buffers end at {end}, past the SRAM ({sram_size})")
    work = instance_work(tile_kernel.instance, after=command.after)
    return Call(unit.functions[tile.kernel], tuple(args), work)


def _linear(crossing: bool, loading: bool) -> int:
    """A DMA's `Work.linear`: which way it moves a tensor the controller writes or reads (0: another)."""
    if not crossing:
        return Linear.NONE
    return Linear.READ if loading else Linear.WRITE


def cascade_steps(
    program: CascadeProgram,
    functions: tuple[KernelUnit, ...],
    tensor_refs,
    sram_size: int,
    scratch_base: int,
    linear: list[Mapping[str, int]] | None = None,
) -> list:
    """The steps of one invocation running a cascade's command list (hetgen/spec/cascade_program.py):
    LOAD and STORE as a tile plan's strided DMA copies, MOVE as a strided copy within the SRAM (the
    simulator's MOVE engine), COMPUTE as a call of the layer's row-tile kernel (`functions`, one per
    program.kernels) on SRAM offsets. `tensor_refs[layer](position)` is where layer `layer`'s tensor
    lives in device memory or the weight store."""
    steps: list = []

    def sram(offset: int, nbytes: int, what: str) -> BufferRef:
        if offset + nbytes > sram_size:
            raise InternalError(f"cascade {what} at {offset} + {nbytes} is past the SRAM ({sram_size})")
        return BufferRef(Region.ARENA, offset, what)

    for command in program.commands:
        if command.kind is Kind.COMPUTE:
            tile_kernel = program.kernels[command.kernel]
            args = [BufferRef(Region.NONE, 0) if offset is None else sram(offset, 0, "sram") for offset in command.args]
            if tile_kernel.kernel.scratch_bytes:
                args.append(BufferRef(Region.ARENA, scratch_base, "scratch"))
            work = instance_work(tile_kernel.instance, after=command.after)
            steps.append(Call(functions[command.kernel], tuple(args), work))
            continue
        span_src = (command.count - 1) * command.src_stride + command.seg_bytes
        span_dst = (command.count - 1) * command.dst_stride + command.seg_bytes
        crossing, element_bytes = False, 0
        if command.kind is Kind.MOVE:
            src, dst = sram(command.src, span_src, "sram:move"), sram(command.dst, span_dst, "sram:move")
            engine = Engine.MOVE
        else:
            base = tensor_refs[command.layer](command.tensor)
            loading = command.kind is Kind.LOAD
            offset = command.src if loading else command.dst
            far = BufferRef(base.region, base.position + offset, base.tensor)
            near = sram(
                command.dst if loading else command.src, span_dst if loading else span_src, f"sram:{base.tensor}"
            )
            src, dst = (far, near) if loading else (near, far)
            engine = Engine.DMA
            crossing = linear is not None and command.tensor in linear[command.layer]
            element_bytes = linear[command.layer].get(command.tensor, 0) if linear is not None else 0
        work = Work(
            engine,
            m=command.count,
            n=command.seg_bytes,
            k=feature_channels(program, command),  # a DMA's feature map's channels (0: a MOVE, constants)
            bytes=command.nbytes,
            after=command.after,
            src_stride=command.src_stride,
            dst_stride=command.dst_stride,
            linear=_linear(engine is Engine.DMA and crossing, command.kind is Kind.LOAD),
            element_bytes=element_bytes,
        )
        steps.append(Copy(src, dst, command.nbytes, work, command.count, command.src_stride, command.dst_stride))
    return steps
