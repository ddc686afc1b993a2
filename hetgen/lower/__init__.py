"""The lower stage: a placed graph becomes per-target programs over planned memory.

Entry point: `lower(graph, platform, placement) -> Lowered`. Units (operators with fused
activations) are scheduled across controllers and devices (`schedule.py`), each target's memory is
planned by liveness (`memory.py`), and symbolic steps are resolved to buffer references.
"""

from __future__ import annotations

import math

from hetgen.errors import ModelError, PlacementError
from hetgen.ir import Graph
from hetgen.lower.fuse import Unit, kernel_units, op_instance
from hetgen.lower.memory import ALIGNMENT, Interval, MemoryPlan, plan_memory
from hetgen.lower.program import (
    BufferRef,
    Call,
    Copy,
    DeviceCopyIn,
    DeviceCopyOut,
    DeviceModel,
    Invoke,
    KernelUnit,
    Lowered,
    Program,
    ProgramRole,
    Region,
    TensorSpec,
    Wait,
    WeightEntry,
    Weights,
)
from hetgen.lower.schedule import SCall, Scheduler, SCopyIn, SCopyOut, SInvoke, SLoadWeight, SWait, Sym, UnitInfo
from hetgen.names import c_identifier
from hetgen.ops.base import Kernel, Unsupported
from hetgen.ops.registry import op_def
from hetgen.platform.model import Platform, Role, Runtime, Target

__all__ = ["lower", "Lowered", "Program"]


def lower_units(units: tuple[Unit, ...], graph: Graph) -> tuple[Kernel, ...]:
    """Lower every unit; report every unsupported instance in one message."""
    kernels, problems = [], []
    for unit in units:
        definition = op_def(unit.head.op)
        if definition is None:
            problems.append(f"{unit.head.label}: operator {unit.head.op} is not supported")
            continue
        try:
            kernels.append(definition.lower(op_instance(unit, graph)))
        except Unsupported as exc:
            problems.append(f"{unit.head.label}: {exc}")
    if problems:
        raise ModelError("the model uses operators hetgen cannot generate code for:\n  " + "\n  ".join(problems))
    return tuple(kernels)


def tensor_specs(names: tuple[str, ...], graph: Graph) -> tuple[TensorSpec, ...]:
    specs, used = [], set()
    for index, name in enumerate(names):
        c_name = c_identifier(name, f"tensor{index}")
        while c_name in used:
            c_name += "_"
        used.add(c_name)
        specs.append(TensorSpec(name, c_name, graph.types[name]))
    return tuple(specs)


def pack_weights(names: list[str], graph: Graph) -> Weights:
    entries, chunks, offset = [], [], 0
    for name in names:
        data = graph.constants[name].tobytes()
        entries.append(WeightEntry(name, offset, len(data)))
        padded = len(data) + (-len(data)) % ALIGNMENT
        chunks.append(data + b"\0" * (padded - len(data)))
        offset += padded
    return Weights(tuple(entries), b"".join(chunks))


def ordered_nodes(graph: Graph, placement) -> tuple[list, dict[str, str]]:
    """Nodes in the placement's execution order (groups stay contiguous), and node → target."""
    if placement is None:
        return list(graph.nodes), {}
    position = {node.name: index for index, node in enumerate(graph.nodes)}
    order = [name for group in placement.groups for name in sorted(group.nodes, key=position.__getitem__)]
    by_name = {node.name: node for node in graph.nodes}
    assignment = {name: group.target for group in placement.groups for name in group.nodes}
    return [by_name[name] for name in order], assignment


def target_prefix(platform: Platform, target: Target) -> str:
    return "hg_" + "_".join((platform.name, *target.path[1:]))


def accelerator_cycles(target: Target, kernel: Kernel) -> int:
    """The simulated device's cycles for one kernel: the kind's figures, as the cost model uses them."""
    figures = target.figures
    compute_us = kernel.flops / (figures.peak_gflops * 1e3) if figures.peak_gflops else 0.0
    memory_us = kernel.bytes_accessed / (figures.bandwidth_gbps * 1e3) if figures.bandwidth_gbps else 0.0
    return math.ceil((figures.launch_us + max(compute_us, memory_us)) * clock_mhz(target))


def clock_mhz(target: Target) -> float:
    return float(target.attrs.get("clock_mhz", 1000))


def device_model(target: Target) -> DeviceModel:
    dma_gbps = float(target.attrs.get("dma_gbps", target.figures.bandwidth_gbps or 1.0))
    return DeviceModel(clock_mhz(target), dma_gbps * 1e3 / clock_mhz(target), target.memory_bytes or 0)


class _Overflow(Exception):
    def __init__(self, path: str, error: PlacementError):
        self.path, self.error = path, error


def lower(graph: Graph, platform: Platform, placement=None) -> Lowered:
    """Lower; when consecutive work overflows an accelerator's memory, run it one unit at a time there."""
    isolated: frozenset[str] = frozenset()
    while True:
        try:
            return _lower(graph, platform, placement, isolated)
        except _Overflow as overflow:
            if overflow.path in isolated:
                raise overflow.error from None
            isolated = isolated | {overflow.path}


# Operators whose output is their input's bytes unchanged: they become a second name for the same
# buffer instead of a copy (the kernels downstream were lowered with the right shapes already).
ALIAS_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def drop_aliases(units: tuple[Unit, ...], kernels: tuple[Kernel, ...], graph: Graph):
    """Remove pure reshapes; return the remaining units and kernels and each unit's buffer names.

    A reshape is dropped when its input is computed (not a model input or a constant) and its output
    is not a model output, so every buffer involved lives in an arena the planner owns.
    """
    rename: dict[str, str] = {}
    kept_units, kept_kernels, buffers = [], [], []
    for unit, kernel in zip(units, kernels):
        head = unit.head
        source = head.inputs[0] if head.inputs else ""
        if (
            head.op in ALIAS_OPS
            and len(unit.nodes) == 1
            and source
            and source not in graph.constants
            and source not in graph.inputs
            and head.outputs[0] not in graph.outputs
            and graph.types[source].nbytes == graph.types[head.outputs[0]].nbytes
        ):
            rename[head.outputs[0]] = rename.get(source, source)
            continue
        kept_units.append(unit)
        kept_kernels.append(kernel)
        buffers.append(tuple(rename.get(name, name) for name in unit.inputs))
    return tuple(kept_units), tuple(kept_kernels), buffers


def _lower(graph: Graph, platform: Platform, placement, isolated: frozenset[str]) -> Lowered:
    root = platform.root.controller()
    nodes, assignment = ordered_nodes(graph, placement)
    if not assignment:
        assignment = {node.name: root.path_str for node in nodes}
    ordered_graph = Graph(
        graph.name, graph.inputs, graph.outputs, tuple(nodes), graph.types, graph.constants, graph.opset
    )
    all_units = kernel_units(ordered_graph, assignment)
    units, kernels, unit_inputs = drop_aliases(all_units, lower_units(all_units, graph), graph)
    targets = {t.path_str: t for t in platform.targets()}
    infos = [UnitInfo(assignment[u.head.name], inputs, u.outputs) for u, inputs in zip(units, unit_inputs)]
    scheduler = Scheduler(infos, root, set(graph.constants), set(graph.outputs), set(graph.inputs), isolated)
    schedule = scheduler.run()

    graph_inputs = {name: index for index, name in enumerate(graph.inputs)}
    graph_outputs: dict[str, int] = {}
    for index, name in enumerate(graph.outputs):
        graph_outputs.setdefault(name, index)

    root_path = root.path_str
    executing = [path for path in targets if path == root_path or path in schedule.entries]
    plans: dict[str, MemoryPlan] = {}
    weights: dict[str, Weights] = {}
    for path in executing:
        target = targets[path]
        is_accelerator = target.role is Role.ACCELERATOR
        intervals = []
        for tensor, times in sorted(schedule.events.get(path, {}).items()):
            if path == root_path and (tensor in graph_inputs or tensor in graph_outputs):
                continue
            if tensor in graph.constants and not is_accelerator:
                continue
            intervals.append(Interval(tensor, graph.types[tensor].nbytes, min(times), max(times)))
        for index, kernel in enumerate(kernels):
            if infos[index].target == path and kernel.scratch_bytes:
                intervals.append(Interval(f"scratch:{index}", kernel.scratch_bytes, index, index))
        plans[path] = plan_memory(intervals)
        used = []
        for info in infos:
            if info.target == path:
                used += [name for name in info.inputs if name in graph.constants and name not in used]
        if path == root_path:
            used += [n for n in graph.outputs if n in graph.constants and n not in used]
        weights[path] = pack_weights(used, graph)
        capacity = target.memory_bytes
        if capacity is not None and plans[path].arena_size > capacity:
            raise _Overflow(
                path,
                PlacementError(
                    f"{path}: the work placed here needs {plans[path].arena_size} bytes of local memory "
                    f"(liveness lower bound {plans[path].lower_bound}); the device has {capacity} bytes. "
                    "Give it more memory (e.g. sram_kib), pin the large layers elsewhere, or use the cost placement, which avoids it"
                ),
            )

    kernel_units_by_index = {}
    for index, (unit, kernel) in enumerate(zip(units, kernels)):
        target = targets[infos[index].target]
        fn = f"{target_prefix(platform, target)}_k_{unit.head.name}"
        label = " + ".join(node.label for node in unit.nodes)
        kernel_units_by_index[index] = KernelUnit(fn, tuple(node.name for node in unit.nodes), label, kernel)

    produced_at_root = {
        name for index, unit in enumerate(units) if infos[index].target == root_path for name in unit.outputs if name
    }
    copied_to_root = {
        step.dst.tensor for entry in schedule.entries.get(root_path, []) for step in entry if isinstance(step, SCopyOut)
    }

    def ref(sym: Sym | None) -> BufferRef:
        if sym is None:
            return BufferRef(Region.NONE, 0)
        name, path = sym.tensor, sym.target
        if path == root_path:
            if name in graph_outputs and (name in produced_at_root or name in copied_to_root):
                return BufferRef(Region.OUTPUT, graph_outputs[name], name)
            if name in graph_inputs:
                return BufferRef(Region.INPUT, graph_inputs[name], name)
        if name in graph.constants and targets[path].role is not Role.ACCELERATOR:
            return BufferRef(Region.WEIGHTS, weight_offset(weights[path], name), name)
        return BufferRef(Region.ARENA, plans[path].offset(name), name)

    def device_offset(sym: Sym) -> int:
        return plans[sym.target].offset(sym.tensor)

    def resolve(path: str, step):
        target = targets[path]
        if isinstance(step, SCall):
            unit = kernel_units_by_index[step.unit]
            args = [ref(sym) for sym in step.args]
            if unit.kernel.scratch_bytes:
                args.append(BufferRef(Region.ARENA, plans[path].offset(f"scratch:{step.unit}"), "scratch"))
            cycles = accelerator_cycles(target, unit.kernel) if target.role is Role.ACCELERATOR else 0
            return Call(unit, tuple(args), cycles)
        if isinstance(step, SLoadWeight):
            entry = weight_offset(weights[path], step.tensor)
            nbytes = graph.types[step.tensor].nbytes
            model = device_model(target)
            return Copy(
                BufferRef(Region.WEIGHTS, entry, step.tensor),
                ref(Sym(path, step.tensor)),
                nbytes,
                math.ceil(nbytes / model.dma_bytes_per_cycle),
            )
        if isinstance(step, SCopyIn):
            nbytes = graph.types[step.src.tensor].nbytes
            return DeviceCopyIn(step.device, ref(step.src), device_offset(step.dst), nbytes, step.src.tensor)
        if isinstance(step, SCopyOut):
            nbytes = graph.types[step.src.tensor].nbytes
            return DeviceCopyOut(step.device, device_offset(step.src), ref(step.dst), nbytes, step.src.tensor)
        if isinstance(step, SInvoke):
            return Invoke(step.device, step.program)
        if isinstance(step, SWait):
            return Wait(step.device)
        raise TypeError(step)

    estimates: dict[str, float] = {}
    for group in placement.groups if placement is not None else ():
        estimates[group.target] = estimates.get(group.target, 0.0) + group.cost_us
    programs = []
    for path in executing:
        target = targets[path]
        entries = [tuple(resolve(path, step) for step in entry) for entry in schedule.entries.get(path, [[]])]
        if path == root_path:
            entries[0] = entries[0] + tuple(
                _output_copies(graph, produced_at_root | copied_to_root, graph_inputs, weights[path])
            )
            role = ProgramRole.ROOT
        elif target.role is Role.ACCELERATOR:
            role = ProgramRole.ACCELERATOR
        else:
            role = ProgramRole.COPROCESSOR
        programs.append(
            Program(
                target=target,
                role=role,
                runtime=target.runtime or Runtime.GRAPH,
                units=tuple(kernel_units_by_index[i] for i in range(len(units)) if infos[i].target == path),
                entries=tuple(entries),
                memory=plans[path],
                weights=weights[path],
                inputs=tensor_specs(graph.inputs, graph) if role is ProgramRole.ROOT else (),
                outputs=tensor_specs(graph.outputs, graph) if role is ProgramRole.ROOT else (),
                devices=tuple(schedule.devices.get(path, ())),
                device_model=device_model(target) if role is ProgramRole.ACCELERATOR else None,
                estimated_us=estimates.get(path, 0.0),
            )
        )
    return Lowered(name=platform.name, model_name=graph.name, programs=tuple(programs))


def weight_offset(weights: Weights, tensor: str) -> int:
    for entry in weights.entries:
        if entry.tensor == tensor:
            return entry.offset
    raise KeyError(tensor)


def _output_copies(graph: Graph, written: set[str], inputs: dict[str, int], weights: Weights) -> list[Copy]:
    """Outputs no kernel writes (a model input passed through, a folded constant) are copied."""
    copies = []
    for index, name in enumerate(graph.outputs):
        if name in written and graph.outputs.index(name) == index:
            continue
        nbytes = graph.types[name].nbytes
        if name in inputs:
            src = BufferRef(Region.INPUT, inputs[name], name)
        elif name in written:
            src = BufferRef(Region.OUTPUT, graph.outputs.index(name), name)
        else:
            src = BufferRef(Region.WEIGHTS, weight_offset(weights, name), name)
        copies.append(Copy(src, BufferRef(Region.OUTPUT, index, name), nbytes))
    return copies
