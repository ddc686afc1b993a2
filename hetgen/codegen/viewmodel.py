"""Prepare every name, number and table the program templates lay out (Python decides; Jinja lays out).

Model names reach the templates only escaped for where they land (`hetgen.names`): `comment` and
`*_comment` fields through `c_comment`; `name_escaped`, and the arena buffers' `name`, through
`c_string`. The Jinja environment refuses any printed value that is not printable ASCII.
"""

from __future__ import annotations

from collections.abc import Mapping

from hetgen.bounded import bounded_note
from hetgen.codegen.banks import spill_banks, workspace_attributes
from hetgen.codegen.encode import Instruction, Opcode, encode_steps
from hetgen.codegen.kernel_files import ProgramKernels
from hetgen.errors import InternalError
from hetgen.ir import MAX_RANK
from hetgen.lower.program import BufferRef, Call, Copy, DeviceModel, Program, ProgramRole, Region
from hetgen.lower.work import Engine
from hetgen.lower.workspace import STATE_HEADER_SIZE
from hetgen.names import c_comment, c_string
from hetgen.platform.model import Runtime
from hetgen.spec.frames import stage_bounds, stage_submissions

# `enum hg_region`: Region's values are the C enum's (checked against the header like Opcode).
REGION_C = {region: f"HG_REGION_{region.name}" for region in Region}
OPCODES = {op.name: op.value for op in Opcode}
# Each runtime's part of a controller's model.c: how its entries run (included by model/model.c.j2).
ENTRIES_TEMPLATES = {
    Runtime.VM: "model/entries_vm.c.j2",
    Runtime.GRAPH: "model/entries_graph.c.j2",
    Runtime.AOT: "model/entries_aot.c.j2",
}


def c_expression(ref: BufferRef, spills: list[dict] = ()) -> str:
    """The C expression of a buffer inside `<prefix>_run`, where `memory` is in scope; `spills`: a
    banked root's spill banks (hetgen/codegen/banks.py), whose offsets name their own storage."""
    if ref.region is Region.ARENA:
        for bank in spills:
            if bank["base"] <= ref.position < bank["end"]:
                return f"{bank['symbol']} + {ref.position - bank['base']}u"
        return f"memory->arena + {ref.position}u"
    if ref.region is Region.WEIGHTS:
        return f"(void *)(uintptr_t)(memory->weights + {ref.position}u)"
    if ref.region is Region.INPUT:
        return f"(void *)(uintptr_t)memory->inputs[{ref.position}]"
    if ref.region is Region.OUTPUT:
        return f"memory->outputs[{ref.position}]"
    return "NULL"


def ref_words(ref: BufferRef) -> list[int]:
    """A buffer reference as 4 bytecode words: region, index, offset low, offset high."""
    indexed = ref.region in (Region.INPUT, Region.OUTPUT)
    offset = 0 if indexed else ref.position
    return [ref.region.value, ref.position if indexed else 0, offset & 0xFFFFFFFF, offset >> 32]


def u64_words(value: int) -> list[int]:
    return [value & 0xFFFFFFFF, value >> 32]


VM_COMMENTS = {
    Opcode.CALL: "call {subject}",
    Opcode.COPY: "copy {subject}",
    Opcode.COPY_IN: "copy {subject} to device {device}",
    Opcode.COPY_OUT: "copy {subject} from device {device}",
    Opcode.INVOKE: "invoke device {device}",
    Opcode.WAIT: "wait for device {device}",
}


def vm_words(ins: Instruction, kernel_index: dict[str, int]) -> list[int]:
    """One instruction as the VM's bytecode words (hg_vm.c decodes them)."""
    if ins.opcode is Opcode.CALL:
        return [ins.opcode.value, kernel_index[ins.fn], len(ins.refs), *(w for ref in ins.refs for w in ref_words(ref))]
    if ins.opcode is Opcode.COPY:
        src, dst = ins.refs
        return [ins.opcode.value, *ref_words(src), *ref_words(dst), *u64_words(ins.nbytes)]
    if ins.opcode is Opcode.COPY_IN:
        src, device_memory = ins.refs
        return [
            ins.opcode.value,
            ins.device,
            *ref_words(src),
            *u64_words(device_memory.position),
            *u64_words(ins.nbytes),
        ]
    if ins.opcode is Opcode.COPY_OUT:
        device_memory, dst = ins.refs
        return [
            ins.opcode.value,
            ins.device,
            *u64_words(device_memory.position),
            *ref_words(dst),
            *u64_words(ins.nbytes),
        ]
    if ins.opcode is Opcode.INVOKE:
        return [ins.opcode.value, ins.device, ins.program]
    return [ins.opcode.value, ins.device]


def vm_code(steps, kernel_index: dict[str, int]) -> list[tuple[list[int], str]]:
    """The VM program: one (words, comment) per instruction."""
    code = [
        (vm_words(ins, kernel_index), VM_COMMENTS[ins.opcode].format(subject=ins.subject, device=ins.device))
        for ins in encode_steps(steps)
    ]
    code.append(([Opcode.END.value], "end"))
    return code


def tensor_view(spec) -> dict:
    shape = list(spec.type.shape)
    if len(shape) > MAX_RANK:  # the frontend refuses such models (check.py)
        raise InternalError(f"tensor {spec.name!r} has rank {len(shape)}, past HG_MAX_RANK {MAX_RANK}")
    return {
        "name_comment": c_comment(spec.name),
        "name_escaped": c_string(spec.name),
        "c_name": spec.c_name,
        "dtype_code": spec.type.dtype.onnx_code,
        "dtype_label": spec.type.dtype.label,
        "rank": len(shape),
        "shape_padded": shape + [0] * (MAX_RANK - len(shape)) if shape else [0],
        "shape_text": "x".join(map(str, shape)) or "scalar",
        "nbytes": spec.type.nbytes,
        "note": c_comment(bounded_note(spec.name)),  # run-time lengths (hetgen/bounded.py)
    }


def _graph_arg(ref: BufferRef) -> dict:
    indexed = ref.region in (Region.INPUT, Region.OUTPUT)
    return {
        "region": REGION_C[ref.region],
        "index": ref.position if indexed else 0,
        "offset": 0 if indexed else ref.position,
        "comment": c_comment(ref.tensor or "-"),
    }


GRAPH_COMMENTS = {
    Opcode.CALL: "{subject}",
    Opcode.COPY: "copy {subject}",
    Opcode.COPY_IN: "{subject} to device {device}",
    Opcode.COPY_OUT: "{subject} from device {device}",
    Opcode.INVOKE: "run program {program} on device {device}",
    Opcode.WAIT: "wait for device {device}",
}


def graph_tables(steps, names: Mapping[str, str] | None = None) -> tuple[list[dict], list[dict]]:
    """The graph runtime's node and argument tables for one step list; `names` maps a unit's fn to
    the (shared) function that computes it (hetgen/codegen/kernel_files.py), by default itself."""
    nodes, args = [], []
    for ins in encode_steps(steps):
        # An invocation's node carries its sub-program where other nodes point at their arguments.
        first_arg = {Opcode.INVOKE: ins.program, Opcode.WAIT: 0}.get(ins.opcode, len(args))
        comment = GRAPH_COMMENTS[ins.opcode].format(subject=ins.subject, device=ins.device, program=ins.program)
        nodes.append(
            {
                "op": ins.opcode.c_name,
                "device": ins.device,
                "fn": _function(ins.fn, names) or "NULL",
                "first_arg": first_arg,
                "num_args": len(ins.refs),
                "bytes": ins.nbytes,
                "comment": c_comment(comment),
            }
        )
        args.extend(_graph_arg(ref) for ref in ins.refs)
    return nodes, args


ENGINE_C = {Engine.MAC_ARRAY: "HG_SIM_MAC_ARRAY", Engine.VECTOR: "HG_SIM_VECTOR", Engine.DMA: "HG_SIM_DMA"}
ENGINE_C[Engine.MAC_ARRAY_INT8] = "HG_SIM_MAC_ARRAY_INT8"
ENGINE_C[Engine.MAC_ARRAY_RESIDUAL] = "HG_SIM_MAC_ARRAY_RESIDUAL"
ENGINE_C[Engine.MAC_ARRAY_INT8_RESIDUAL] = "HG_SIM_MAC_ARRAY_INT8_RESIDUAL"
ENGINE_C[Engine.MOVE] = "HG_SIM_MOVE"


def work_table(steps) -> list[dict]:
    """A simulated accelerator's work descriptors, one per node of graph_tables(steps)."""
    table = []
    for step in steps:
        work = getattr(step, "work", None)
        if work is None:
            table.append(
                {"engine": "HG_SIM_NONE", "batch": 0, "m": 0, "n": 0, "k": 0, "bytes": 0, "after": 0}
                | {"src_stride": 0, "dst_stride": 0, "taps": 0, "linear": 0, "element_bytes": 0, "comment": "-"}
            )
            continue
        what = step.unit.label if isinstance(step, Call) else f"load {step.dst.tensor}"
        if isinstance(step, Copy) and "sram:" in step.src.tensor + step.dst.tensor:
            what = f"tile DMA {step.src.tensor} -> {step.dst.tensor}"
        if work.engine is Engine.MOVE:
            what = f"SRAM move {step.src.tensor} -> {step.dst.tensor}"
        shape = dict(batch=work.batch, m=work.m, n=work.n, k=work.k, bytes=work.bytes)
        strides = dict(
            after=work.after,
            src_stride=work.src_stride,
            dst_stride=work.dst_stride,
            taps=work.taps,
            linear=work.linear,
            element_bytes=work.element_bytes,
        )
        table.append({"engine": ENGINE_C[work.engine], **shape, **strides, "comment": c_comment(what)})
    return table


def _function(fn: str, names: Mapping[str, str] | None) -> str:
    return names.get(fn, fn) if names is not None else fn


def aot_step(ins: Instruction, names: Mapping[str, str] | None = None, spills: list[dict] = ()) -> dict:
    """One instruction as a statement of the straight-line C (`aot`)."""
    if ins.opcode is Opcode.CALL:
        args = [c_expression(ref, spills) for ref in ins.refs] or ["NULL"]
        return {"kind": "call", "fn": _function(ins.fn, names), "args": args, "comment": c_comment(ins.subject)}
    if ins.opcode is Opcode.COPY:
        src, dst = (c_expression(ref, spills) for ref in ins.refs)
        comment = c_comment(f"copy {ins.subject}")
        return {"kind": "copy", "src": src, "dst": dst, "nbytes": ins.nbytes, "comment": comment}
    if ins.opcode in (Opcode.COPY_IN, Opcode.COPY_OUT):
        incoming = ins.opcode is Opcode.COPY_IN
        host, device_memory = ins.refs if incoming else reversed(ins.refs)
        return {
            "kind": "copy_in" if incoming else "copy_out",
            "device": ins.device,
            "offset": device_memory.position,
            "src" if incoming else "dst": c_expression(host, spills),
            "nbytes": ins.nbytes,
            "comment": c_comment(ins.subject),
        }
    if ins.opcode is Opcode.INVOKE:
        return {"kind": "invoke", "device": ins.device, "program": ins.program}
    return {"kind": "wait", "device": ins.device}


AOT_PART_STEPS = 256  # an aot entry longer than this is cut into functions of this many steps


def aot_steps(steps, names: Mapping[str, str] | None = None, spills: list[dict] = ()) -> list[dict]:
    return [aot_step(ins, names, spills) for ins in encode_steps(steps)]


def _byte_list(tensors) -> str:
    """A C initializer of buffer sizes (one 0 when there are none: C has no empty arrays)."""
    return ", ".join(f"{spec.type.nbytes}u" for spec in tensors) or "0u"


DEVICE_STEP_KINDS = {Opcode.INVOKE: "invoke", Opcode.WAIT: "wait", Opcode.COPY_IN: "copy", Opcode.COPY_OUT: "copy"}


def _frame_stages(steps, vm_lines: list[str]) -> list[dict]:
    """Entry 0 cut as hetgen/spec/frames.py cuts the timed steps (before each run of waits), for
    each runtime (one instruction a VM line, a graph node, an aot step): each stage's VM lines
    ended by END, its range of nodes and steps, and the devices whose invocations its end hands to
    their workers (a bit each)."""
    *body, end = vm_lines
    kinds = [
        (DEVICE_STEP_KINDS[ins.opcode], ins.device) if ins.opcode in DEVICE_STEP_KINDS else ("", None)
        for ins in encode_steps(steps)
    ]
    bounds = stage_bounds(["wait" if kind == "wait" else "" for kind, _ in kinds])
    return [
        {
            "index": k,
            "lines": [*body[a:b], end],
            "first": a,
            "count": b - a,
            "submit_mask": sum(1 << d for d in submitted),
        }
        for k, ((a, b), submitted) in enumerate(zip(bounds, stage_submissions(kinds)))
    ]


def _aot_parts(aot: list[dict], stages: list[dict]) -> tuple[list[list[dict]], list[list[int]]]:
    """An aot entry cut into functions of at most AOT_PART_STEPS steps, and also where each stage
    begins (entry 0 of a root that runs frames), with each stage's parts."""
    cuts = sorted({*range(0, len(aot), AOT_PART_STEPS), *(stage["first"] for stage in stages)} - {len(aot)})
    if not cuts:
        return [[]], [[0] for _ in stages]
    parts = [aot[a:b] for a, b in zip(cuts, [*cuts[1:], len(aot)])]
    return parts, [
        [p for p, cut in enumerate(cuts) if stage["first"] <= cut < stage["first"] + stage["count"]] for stage in stages
    ]


def program_view(
    program: Program,
    model_name: str,
    prefix: str,
    runtime_version: int,
    children: list[dict],
    simulated_devices: list[dict] = (),
    kernels: ProgramKernels | None = None,
    frames: bool = False,
) -> dict:
    """`frames`: a root that also runs frames pipelined (objective throughput; a root without
    spilled banks): its entry 0 cut into stages (hetgen/spec/frames.py).
    `children`: each device's prefix, path, block offset and size; `simulated_devices` (root only):
    every simulated accelerator below, with its prefix and its block's offset in the workspace;
    `kernels`: the functions that compute the units (shared where identical), by default one each."""
    if kernels is None:
        kernel_fns, names = [unit.fn for unit in program.units], None
    else:
        kernel_fns, names = [function.name for function in kernels.functions], kernels.names
    position = {fn: index for index, fn in enumerate(kernel_fns)}
    kernel_index = {unit.fn: position[_function(unit.fn, names)] for unit in program.units}
    entries = []
    first_counter = 0
    spills = spill_banks(program, prefix)
    workspace_arena = program.workspace_arena_size
    frame_stages = []
    for index, steps in enumerate(program.entries):
        nodes, args = graph_tables(steps, names)
        code = vm_code(steps, kernel_index)
        vm_lines = [", ".join(f"{w}u" for w in words) + f", /* {c_comment(c)} */" for words, c in code]
        aot = aot_steps(steps, names, spills)
        parts = [aot[i : i + AOT_PART_STEPS] for i in range(0, len(aot), AOT_PART_STEPS)] or [[]]
        if frames and index == 0:
            frame_stages = _frame_stages(steps, vm_lines)
            parts, stage_parts = _aot_parts(aot, frame_stages)
            for stage, its_parts in zip(frame_stages, stage_parts):
                stage["parts"] = its_parts
        entries.append(
            {
                "index": index,
                "steps": aot,
                "parts": parts,
                "graph_nodes": nodes,
                "graph_args": args,
                "vm_code_lines": vm_lines,
                "work": work_table(steps) if program.role is ProgramRole.ACCELERATOR else [],
                "first_counter": first_counter,
            }
        )
        first_counter += len(steps)
    arena_buffers = [
        {"name": c_string(name), "offset": offset, "nbytes": nbytes}
        for name, offset, nbytes in program.memory.buffers
        if not program.banks or offset < program.banks[0].end
    ]
    for bank in spills:
        bank["buffers"] = [dict(buffer, name=c_string(buffer["name"])) for buffer in bank["buffers"]]
    model = program.device_model
    return {
        "prefix": prefix,
        "PREFIX": prefix.upper(),
        "header": f"{prefix}.h" if program.role is ProgramRole.ROOT else f"{prefix}_device.h",
        "is_root": program.role is ProgramRole.ROOT,
        "model_name": c_comment(model_name),
        "target_path": c_comment(program.target.path_str),
        "runtime": program.runtime.value,
        "entries_template": ENTRIES_TEMPLATES[program.runtime],
        "runtime_version": runtime_version,
        "inputs": [tensor_view(t) for t in program.inputs],
        "outputs": [tensor_view(t) for t in program.outputs],
        "arena_size": workspace_arena,
        "spill_banks": spills,
        "frame_stages": [] if spills or program.role is not ProgramRole.ROOT else frame_stages,
        "workspace_attributes": workspace_attributes(program),
        "workspace_size": program.workspace.size,
        "block": {
            "size": program.workspace.size,
            "header_size": program.workspace.header_size,
            "arena_offset": program.workspace.arena_offset,
        },
        "input_bytes": _byte_list(program.inputs),
        "output_bytes": _byte_list(program.outputs),
        "simulated_devices": list(simulated_devices),
        "total_bytes": program.memory.total_bytes,
        "lower_bound": program.memory.lower_bound,
        "arena_storage": max(workspace_arena, 64),
        "weights_size": program.weights.size,
        "kernel_fns": kernel_fns,
        "entries": entries,
        "arena_buffers": arena_buffers,
        "children": children,
        "simulated": program.role is ProgramRole.ACCELERATOR,
        "counts_link": program.counted_link is not None,
        "link": _link_view(program.counted_link),
        "capacity": model.capacity if model else 0,
        # Kernels compute only below this offset of local memory: a tiled device's SRAM.
        "sram_size": (program.sram_size or program.memory.arena_size) if model else 0,
        "emulation_scratch": program.emulation_scratch,
        "clock_mhz": model.clock_mhz if model else 0,
        "sim": _simulator_view(model, first_counter, program) if model else None,
    }


def _link_view(link) -> dict:
    """hg_link's initializer for a co-processor that counts its link (0 bytes per cycle: none)."""
    if link is None:
        return {"latency_cycles": "0.0", "bytes_per_cycle": "0.0", "clock_mhz": 0}
    return {
        "latency_cycles": repr(float(link.latency_cycles)),
        "bytes_per_cycle": repr(float(link.bytes_per_cycle)),
        "clock_mhz": link.clock_mhz,
    }


def _simulator_view(model: DeviceModel, num_counters: int, program: Program) -> dict:
    """The simulated device's parameters (hg_sim_params) and where its counters sit. Weights DMA'd
    from a memory of their own (the device model's weights_apart: Vela's Shared_Sram, or
    Dedicated_Sram with the feature maps in its cache) get their rate, setup and hidden setup,
    which the simulator counts for a DMA from the weights region; 0 bytes a cycle otherwise."""
    apart = model.weights_apart
    return {
        "mac_rows": model.mac_rows,
        "mac_cols": model.mac_cols,
        "int8_mac_cols": model.int8_mac_cols,
        "int8_mac_depth": model.int8_mac_depth,
        "vector_lanes": model.vector_lanes,
        "command_cycles": model.command_cycles,
        "dma_setup_cycles": model.dma_setup_cycles,
        "dma_hidden_cycles": model.dma_hidden_cycles,
        "mac_depth_block": model.mac_depth_block,
        "dma_brick_channels": model.dma_brick_channels,
        "linear_burst_bytes": model.linear_burst_bytes,
        "linear_write_bytes": model.linear_write_bytes,
        "sram_bytes_per_cycle": repr(float(model.sram_bytes_per_cycle)),
        "output_cycles_per_element": repr(float(model.output_cycles_per_element)),
        "dma_bytes_per_cycle": repr(float(model.dma_bytes_per_cycle)),
        "weight_dma_bytes_per_cycle": repr(float(model.weight_dma_bytes_per_cycle if apart else 0.0)),
        "weight_dma_setup_cycles": model.weight_dma_setup_cycles if apart else 0,
        "weight_dma_hidden_cycles": model.weight_dma_hidden_cycles if apart else 0,
        "invoke_cycles": model.invoke_cycles,
        "link_latency_cycles": repr(float(model.link_latency_cycles)),
        "link_bytes_per_cycle": repr(float(model.link_bytes_per_cycle)),
        "counters_offset": STATE_HEADER_SIZE,
        "num_counters": num_counters,
    }
