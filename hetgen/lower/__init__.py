"""The lower stage: a placed graph becomes per-target programs over planned memory.

Entry point: `lower(graph, platform, placement) -> Lowered`. Units (operators with fused
activations, `fuse.py`) are scheduled across controllers and devices (`schedule.py`), each target's
memory is planned by liveness (`memory.py`), and symbolic steps are resolved to buffer references
(`resolve.py`), giving the programs of `program.py`.
"""

from __future__ import annotations

import dataclasses

from hetgen.errors import HetgenError, ModelError, PlacementError
from hetgen.ir import Graph
from hetgen.lower.fuse import Unit, kernel_units, op_instance
from hetgen.lower.invocation import one_unit_per_invocation
from hetgen.lower.memory import ALIGNMENT, Interval, MemoryPlan, check_sizes, plan_memory
from hetgen.lower.prepack import apply_prepacked
from hetgen.lower.program import (
    GroupEstimate,
    KernelUnit,
    Lowered,
    Program,
    ProgramRole,
    TensorSpec,
    WeightEntry,
    Weights,
)
from hetgen.lower.resolve import Resolver, device_model
from hetgen.lower.schedule import Scheduler, SCopyOut, UnitInfo
from hetgen.lower.workspace import plan_workspaces, simulated_devices
from hetgen.names import target_prefix, unique_c_identifiers
from hetgen.ops.base import Kernel, Unsupported
from hetgen.ops.registry import op_def
from hetgen.platform.model import Platform, Role, Runtime

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
        where = f"{graph.source}: " if graph.source else ""
        raise ModelError(
            f"{where}the model uses operators hetgen cannot generate code for:\n  " + "\n  ".join(problems)
        )
    return tuple(kernels)


def tensor_specs(names: tuple[str, ...], graph: Graph) -> tuple[TensorSpec, ...]:
    c_names = unique_c_identifiers(names, "tensor")
    return tuple(TensorSpec(name, c_name, graph.types[name]) for name, c_name in zip(names, c_names))


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


def target_prefixes(platform: Platform) -> dict[str, str]:
    """Each target's C prefix (target path -> prefix); refused when two targets' prefixes meet."""
    prefixes: dict[str, str] = {}
    for target in platform.targets():
        prefix = target_prefix(platform.name, target.path)
        clash = next((path for path, other in prefixes.items() if other.lower() == prefix.lower()), None)
        if clash is not None:
            raise HetgenError(
                f"{platform.file}: targets {clash} and {target.path_str} would both be named {prefix} in C; "
                "rename one of them"
            )
        prefixes[target.path_str] = prefix
    return prefixes


class _Overflow(Exception):
    def __init__(self, path: str, error: PlacementError):
        self.path, self.error = path, error


def lower(graph: Graph, platform: Platform, placement=None) -> Lowered:
    """Lower the placed graph; accelerators cut their work into invocations by the rule the cost
    model prices (`invocation.py`), never by a retry after memory overflowed."""
    isolated = frozenset(t.path_str for t in platform.targets() if one_unit_per_invocation(t))
    try:
        return _lower(graph, platform, placement, isolated)
    except _Overflow as overflow:
        raise overflow.error from None


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


def plan_target(path, target, schedule, units_on_target, kernels, graph, is_root) -> tuple[MemoryPlan, Weights]:
    """One target's arena (by liveness over the schedule) and weights; raise _Overflow past capacity."""
    keep_out = set(graph.inputs) | set(graph.outputs) if is_root else set()  # the caller's buffers
    on_chip_weights = target.role is Role.ACCELERATOR  # accelerators load weights into local memory
    intervals = [
        Interval(tensor, graph.types[tensor].nbytes, min(times), max(times))
        for tensor, times in sorted(schedule.events.get(path, {}).items())
        if tensor not in keep_out and (on_chip_weights or tensor not in graph.constants)
    ]
    intervals += [
        Interval(f"scratch:{index}", kernels[index].scratch_bytes, index, index)
        for index, _ in units_on_target
        if kernels[index].scratch_bytes
    ]
    plan = plan_memory(intervals)
    used: list[str] = []
    for _, info in units_on_target:
        used += [name for name in info.inputs if name in graph.constants and name not in used]
    if is_root:
        used += [name for name in graph.outputs if name in graph.constants and name not in used]
    capacity = target.memory_bytes
    if capacity is not None and plan.arena_size > capacity:
        raise _Overflow(
            path,
            PlacementError(
                f"{path}: the work placed here needs {plan.arena_size} bytes of local memory "
                f"(liveness lower bound {plan.lower_bound}); the device has {capacity} bytes. "
                "Give it more memory (e.g. sram_kib) or pin the large layers elsewhere"
            ),
        )
    touched = set(schedule.events.get(path, {})) | (keep_out & set(graph.types))
    check_sizes(
        target, plan, sum(graph.types[name].nbytes for name in used), {t: graph.types[t].nbytes for t in touched}
    )
    return plan, pack_weights(used, graph)


def _lower(graph: Graph, platform: Platform, placement, isolated: frozenset[str]) -> Lowered:
    root = platform.root.controller()
    root_path = root.path_str
    nodes, assignment = ordered_nodes(graph, placement)
    assignment = assignment or {node.name: root_path for node in nodes}
    ordered = dataclasses.replace(graph, nodes=tuple(nodes))
    all_units = kernel_units(ordered, assignment)
    units, kernels, unit_inputs = drop_aliases(all_units, lower_units(all_units, graph), graph)
    graph, kernels, unit_inputs = apply_prepacked(graph, units, kernels, unit_inputs, assignment, platform)
    infos = [UnitInfo(assignment[u.head.name], inputs, u.outputs) for u, inputs in zip(units, unit_inputs)]
    schedule = Scheduler(infos, root, set(graph.constants), set(graph.outputs), set(graph.inputs), isolated).run()

    targets = {t.path_str: t for t in platform.targets()}
    executing = [path for path in targets if path == root_path or path in schedule.entries]
    plans: dict[str, MemoryPlan] = {}
    weights: dict[str, Weights] = {}
    for path in executing:
        on_target = [(index, info) for index, info in enumerate(infos) if info.target == path]
        plans[path], weights[path] = plan_target(
            path, targets[path], schedule, on_target, kernels, graph, path == root_path
        )

    prefixes = target_prefixes(platform)
    functions = {}
    for index, (unit, kernel) in enumerate(zip(units, kernels)):
        fn = f"{prefixes[infos[index].target]}_k_{unit.head.name}"
        label = " + ".join(node.label for node in unit.nodes)
        functions[index] = KernelUnit(fn, tuple(node.name for node in unit.nodes), label, kernel)
    written_at_root = {name for info in infos if info.target == root_path for name in info.outputs if name}
    written_at_root |= {
        step.dst.tensor for entry in schedule.entries.get(root_path, []) for step in entry if isinstance(step, SCopyOut)
    }
    resolver = Resolver(graph, targets, plans, weights, root_path, functions, written_at_root)

    estimates: dict[str, float] = {}
    for group in placement.groups if placement is not None else ():
        estimates[group.target] = estimates.get(group.target, 0.0) + group.cost_us
    programs = []
    for path in executing:
        target = targets[path]
        entries = [tuple(resolver.step(path, step) for step in entry) for entry in schedule.entries.get(path, [[]])]
        if path == root_path:
            entries[0] += tuple(resolver.output_copies())
            role = ProgramRole.ROOT
        else:
            role = ProgramRole.ACCELERATOR if target.role is Role.ACCELERATOR else ProgramRole.COPROCESSOR
        programs.append(
            Program(
                target=target,
                role=role,
                runtime=target.runtime or Runtime.GRAPH,
                units=tuple(functions[i] for i, info in enumerate(infos) if info.target == path),
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
    layouts = plan_workspaces(programs)
    programs = [dataclasses.replace(p, workspace=layouts[p.target.path_str]) for p in programs]
    return Lowered(
        platform.name, graph.name, tuple(programs), simulated_devices(programs, layouts), placement_estimates(placement)
    )


def placement_estimates(placement) -> tuple[GroupEstimate, ...]:
    """The cost model's figure for each group and transfer, kept for `hetgen bench` to compare."""
    if placement is None:
        return ()
    groups = [GroupEstimate(g.name, g.target, tuple(g.nodes), g.label, g.cost_us) for g in placement.groups]
    transfers = [
        GroupEstimate(f"{t.tensor} -> {t.dst}", t.dst, (), "transfer", t.cost_us, t.tensor, t.src)
        for t in placement.transfers
    ]
    return tuple(groups + transfers)
