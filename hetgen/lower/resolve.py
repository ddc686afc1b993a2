"""Symbolic schedule steps → concrete steps over planned buffers.

Once each target's memory is planned, every tensor a step names resolves to a region and a
position: the root's model inputs and outputs are the caller's buffers, constants sit in the
target's weights (accelerators load them into local memory first), everything else is an offset
in the target's arena.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.ir import Graph
from hetgen.lower.memory import MemoryPlan
from hetgen.lower.program import (
    BufferRef,
    Call,
    Copy,
    CountedLink,
    DeviceCopyIn,
    DeviceCopyOut,
    DeviceModel,
    Invoke,
    KernelUnit,
    Region,
    Step,
    Wait,
    Weights,
)
from hetgen.lower.work import dma_work
from hetgen.platform import device_model as device_model_module
from hetgen.platform.model import Role, Target
from hetgen.spec import KernelTable
from hetgen.spec.schedule import SCall, SCopyIn, SCopyOut, SInvoke, SLoadWeight, SWait, Sym


def clock_mhz(target: Target) -> float:
    return device_model_module.clock_mhz(target)


def device_model(target: Target, planned_bytes: int) -> DeviceModel:
    """The simulator's parameters: the target's device model (hetgen/platform/device_model.py); a
    device of unbounded local memory (`memory.local_bytes` null or not given) has exactly the
    `planned_bytes` its work needs."""
    return device_model_module.device_model(target).with_capacity(planned_bytes)


@dataclass
class Resolver:
    graph: Graph
    plans: dict[Target, MemoryPlan]
    weights: dict[Target, Weights]
    root: Target
    kernel_units: dict[int, KernelUnit]  # unit index -> its generated function
    written_at_root: set[str]  # model outputs the root's own steps write (by kernel or copy)
    kernels: KernelTable  # each unit's work descriptor, for a simulated accelerator

    def __post_init__(self) -> None:
        self.graph_inputs = {name: index for index, name in enumerate(self.graph.inputs)}
        self.graph_outputs: dict[str, int] = {}
        for index, name in enumerate(self.graph.outputs):
            self.graph_outputs.setdefault(name, index)

    def ref(self, sym: Sym | None) -> BufferRef:
        if sym is None:
            return BufferRef(Region.NONE, 0)
        name, target = sym.tensor, sym.target
        if target == self.root:
            if name in self.graph_outputs and name in self.written_at_root:
                return BufferRef(Region.OUTPUT, self.graph_outputs[name], name)
            if name in self.graph_inputs:
                return BufferRef(Region.INPUT, self.graph_inputs[name], name)
        if name in self.graph.constants and target.role is not Role.ACCELERATOR:
            return BufferRef(Region.WEIGHTS, self.weights[target].offset(name), name)
        return BufferRef(Region.ARENA, self.plans[target].offset(name), name)

    def step(self, target: Target, step) -> Step:
        if isinstance(step, SCall):
            unit = self.kernel_units[step.unit]
            args = [self.ref(sym) for sym in step.args]
            if unit.kernel.scratch_bytes:
                args.append(BufferRef(Region.ARENA, self.plans[target].offset(f"scratch:{step.unit}"), "scratch"))
            work = self.kernels.unit(unit.nodes).device_work if target.role is Role.ACCELERATOR else None
            return Call(unit, tuple(args), work)
        if isinstance(step, SLoadWeight):
            nbytes = self.graph.types[step.tensor].nbytes
            source = BufferRef(Region.WEIGHTS, self.weights[target].offset(step.tensor), step.tensor)
            return Copy(
                source,
                self.ref(Sym(target, step.tensor)),
                nbytes,
                dma_work(nbytes) if target.role is Role.ACCELERATOR else None,
            )
        if isinstance(step, SCopyIn):
            nbytes = self.graph.types[step.src.tensor].nbytes
            offset = self.plans[step.dst.target].offset(step.dst.tensor)
            return DeviceCopyIn(step.device, self.ref(step.src), offset, nbytes, step.src.tensor)
        if isinstance(step, SCopyOut):
            nbytes = self.graph.types[step.src.tensor].nbytes
            offset = self.plans[step.src.target].offset(step.src.tensor)
            return DeviceCopyOut(step.device, offset, self.ref(step.dst), nbytes, step.src.tensor)
        if isinstance(step, SInvoke):
            return Invoke(step.device, step.program)
        if isinstance(step, SWait):
            return Wait(step.device)
        raise TypeError(step)

    def output_copies(self) -> list[Copy]:
        """Outputs no step writes (a model input passed through, a folded constant) are copied."""
        copies = []
        for index, name in enumerate(self.graph.outputs):
            if name in self.written_at_root and self.graph_outputs[name] == index:
                continue
            nbytes = self.graph.types[name].nbytes
            if name in self.graph_inputs:
                src = BufferRef(Region.INPUT, self.graph_inputs[name], name)
            elif name in self.written_at_root:
                src = BufferRef(Region.OUTPUT, self.graph_outputs[name], name)
            else:
                src = BufferRef(Region.WEIGHTS, self.weights[self.root].offset(name), name)
            copies.append(Copy(src, BufferRef(Region.OUTPUT, index, name), nbytes))
        return copies


def counted_link(composite: Target) -> CountedLink | None:
    """A co-processor's link from its controller (its composite's), in the co-processor's cycles."""
    if composite.link is None or composite.host is None:
        return None
    clock = clock_mhz(composite.host)
    return CountedLink(clock, composite.link.latency_us * clock, composite.link.bandwidth_gbps * 1e3 / clock)
