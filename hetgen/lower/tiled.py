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

from dataclasses import dataclass

from hetgen.errors import InternalError
from hetgen.lower.program import BufferRef, Call, Copy, KernelUnit, Region
from hetgen.lower.work import Engine, Work, instance_work
from hetgen.spec.tiling import Action, TilePlan


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


def tiled_steps(unit: TiledUnit, tensor_ref, sram_size: int, scratch_base: int) -> list:
    """The steps of one invocation running `unit`; `tensor_ref(name)` is where a tensor lives in
    device memory (an ARENA offset past the SRAM) or the weight store (WEIGHTS)."""
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
            bytes=block.nbytes,
            after=command.after,
            src_stride=src_stride,
            dst_stride=dst_stride,
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
