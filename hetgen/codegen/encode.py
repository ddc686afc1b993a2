"""The one encoder of program steps: each step becomes one `Instruction` of `enum hg_opcode`.

Every runtime's layout (the VM's bytecode words, the graph runtime's node and argument tables, the
straight-line C of `aot`: hetgen/codegen/viewmodel.py) is drawn from these instructions, so which
buffers a step passes, how many bytes it moves and which device and sub-program it names are decided
here once, and the runtimes differ only in how they lay the same instruction out.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.abi import Opcode  # `enum hg_opcode` of the generated hg_constants.h
from hetgen.lower.program import BufferRef, Call, Copy, DeviceCopyIn, DeviceCopyOut, Invoke, Region, Wait


@dataclass(frozen=True)
class Instruction:
    opcode: Opcode
    device: int = 0  # COPY_IN, COPY_OUT, INVOKE, WAIT: index into Program.devices
    fn: str = ""  # CALL: the kernel function
    # CALL: the kernel's arguments; COPY: (src, dst); COPY_IN: (src, the device's memory as a
    # DEVICE offset); COPY_OUT: (the device's memory, dst)
    refs: tuple[BufferRef, ...] = ()
    nbytes: int = 0  # the copies' size
    program: int = 0  # INVOKE: the device's sub-program
    subject: str = ""  # what comments name: the unit's label (CALL), the tensor moved (copies)


def encode(step) -> Instruction:
    if isinstance(step, Call):
        return Instruction(Opcode.CALL, fn=step.unit.fn, refs=step.args, subject=step.unit.label)
    if isinstance(step, Copy):
        return Instruction(Opcode.COPY, refs=(step.src, step.dst), nbytes=step.nbytes, subject=step.dst.tensor)
    if isinstance(step, DeviceCopyIn):
        device_memory = BufferRef(Region.DEVICE, step.dst_offset, step.tensor)
        return Instruction(Opcode.COPY_IN, step.device, refs=(step.src, device_memory), nbytes=step.nbytes,
                           subject=step.tensor)  # fmt: skip
    if isinstance(step, DeviceCopyOut):
        device_memory = BufferRef(Region.DEVICE, step.src_offset, step.tensor)
        return Instruction(Opcode.COPY_OUT, step.device, refs=(device_memory, step.dst), nbytes=step.nbytes,
                           subject=step.tensor)  # fmt: skip
    if isinstance(step, Invoke):
        return Instruction(Opcode.INVOKE, step.device, program=step.program)
    if isinstance(step, Wait):
        return Instruction(Opcode.WAIT, step.device)
    raise TypeError(f"no instruction for {step!r}")


def encode_steps(steps) -> tuple[Instruction, ...]:
    return tuple(encode(step) for step in steps)
