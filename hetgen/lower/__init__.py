"""The lower stage: a placed graph becomes per-target programs over planned memory.

Entry point: `lower(graph, assignment, platform) -> Lowered`.
"""

from __future__ import annotations

from typing import Mapping

from hetgen.errors import ModelError
from hetgen.frontend.onnx_import import c_identifier
from hetgen.ir import Graph
from hetgen.lower.fuse import Unit, kernel_units, op_instance
from hetgen.lower.memory import ALIGNMENT, Interval, plan_memory
from hetgen.lower.program import (
    BufferRef,
    Call,
    Copy,
    KernelUnit,
    Lowered,
    Program,
    Region,
    TensorSpec,
    WeightEntry,
    Weights,
)
from hetgen.ops.base import Kernel, Unsupported
from hetgen.ops.registry import op_def
from hetgen.platform.model import Platform, Runtime

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


def lower_single(graph: Graph, platform: Platform, prefix: str) -> Program:
    """All nodes on the root controller: one program."""
    target = platform.root.controller()
    assignment = {node.name: target.path_str for node in graph.nodes}
    units = kernel_units(graph, assignment)
    kernels = lower_units(units, graph)

    inputs = {name: index for index, name in enumerate(graph.inputs)}
    outputs = {}
    for index, name in enumerate(graph.outputs):
        outputs.setdefault(name, index)
    produced = {out for unit in units for out in unit.outputs if out}

    weight_names: list[str] = []
    first_use: dict[str, int] = {}
    last_use: dict[str, int] = {}
    intervals: list[Interval] = []
    for step, (unit, kernel) in enumerate(zip(units, kernels)):
        for name in unit.inputs:
            if not name:
                continue
            if name in graph.constants:
                if name not in weight_names:
                    weight_names.append(name)
            elif name not in inputs and name not in outputs:
                last_use[name] = step
        for name in unit.outputs:
            if name and name not in outputs:
                first_use.setdefault(name, step)
        if kernel.scratch_bytes:
            intervals.append(Interval(f"scratch:{step}", kernel.scratch_bytes, step, step))
    for name, first in first_use.items():
        intervals.append(Interval(name, graph.types[name].nbytes, first, max(first, last_use.get(name, first))))
    for name in graph.outputs:  # folded constant outputs are copied out of the weights blob
        if name in graph.constants and name not in produced and name not in weight_names:
            weight_names.append(name)
    memory = plan_memory(intervals)
    weights = pack_weights(weight_names, graph)
    weight_offsets = {entry.tensor: entry.offset for entry in weights.entries}

    def ref(name: str) -> BufferRef:
        if not name:
            return BufferRef(Region.NONE, 0)
        if name in outputs and name in produced:
            return BufferRef(Region.OUTPUT, outputs[name], name)
        if name in inputs:
            return BufferRef(Region.INPUT, inputs[name], name)
        if name in weight_offsets:
            return BufferRef(Region.WEIGHTS, weight_offsets[name], name)
        return BufferRef(Region.ARENA, memory.offset(name), name)

    steps, kernel_units_out = [], []
    for step, (unit, kernel) in enumerate(zip(units, kernels)):
        fn = f"{prefix}_k_{unit.head.name}"
        label = " + ".join(node.label for node in unit.nodes)
        kernel_unit = KernelUnit(fn, tuple(node.name for node in unit.nodes), label, kernel)
        kernel_units_out.append(kernel_unit)
        args = [ref(name) for name in unit.inputs] + [ref(name) for name in unit.outputs]
        if kernel.scratch_bytes:
            args.append(BufferRef(Region.ARENA, memory.offset(f"scratch:{step}"), "scratch"))
        steps.append(Call(kernel_unit, tuple(args)))
    steps.extend(_output_copies(graph, produced, inputs, weight_names, weights))
    return Program(
        target=target,
        runtime=target.runtime or Runtime.AOT,
        units=tuple(kernel_units_out),
        steps=tuple(steps),
        memory=memory,
        weights=weights,
        inputs=tensor_specs(graph.inputs, graph),
        outputs=tensor_specs(graph.outputs, graph),
    )


def _output_copies(graph, produced, inputs, weight_names, weights):
    """Outputs no kernel writes (a model input passed through, a folded constant) are copied."""
    copies = []
    offsets = {entry.tensor: entry.offset for entry in weights.entries}
    for index, name in enumerate(graph.outputs):
        if name in produced and graph.outputs.index(name) == index:
            continue
        nbytes = graph.types[name].nbytes
        if name in inputs:
            src = BufferRef(Region.INPUT, inputs[name], name)
        elif name in produced:
            src = BufferRef(Region.OUTPUT, graph.outputs.index(name), name)
        else:
            src = BufferRef(Region.WEIGHTS, offsets[name], name)
        copies.append(Copy(src, BufferRef(Region.OUTPUT, index, name), nbytes))
    return copies


def lower(graph: Graph, platform: Platform, assignment: Mapping[str, str] | None = None) -> Lowered:
    prefix = f"hg_{platform.name}"
    root = lower_single(graph, platform, prefix)
    return Lowered(name=platform.name, model_name=graph.name, programs=(root,))

