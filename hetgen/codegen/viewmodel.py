"""Prepare every name, number and table the program templates lay out (Python decides; Jinja lays out).

Model names reach the templates only escaped for where they land (`hetgen.names`): `comment` and
`*_comment` fields through `c_comment`; `name_escaped`, and the arena buffers' `name`, through
`c_string`. The Jinja environment refuses any printed value that is not printable ASCII.
"""

from __future__ import annotations

import enum

from hetgen.lower.program import (
    BufferRef,
    Call,
    Copy,
    DeviceCopyIn,
    DeviceCopyOut,
    DeviceModel,
    Invoke,
    Program,
    ProgramRole,
    Region,
    Wait,
)
from hetgen.lower.work import Engine
from hetgen.lower.workspace import STATE_HEADER_SIZE
from hetgen.names import c_comment, c_string


class Opcode(enum.IntEnum):
    """`enum hg_opcode` of templates/runtime/hg_runtime.h: the VM's bytecode and the graph node table
    both encode with these numbers (tests/test_truth.py checks them against the header)."""

    END = 0
    CALL = 1
    COPY = 2
    COPY_IN = 3
    COPY_OUT = 4
    INVOKE = 5
    WAIT = 6

    @property
    def c_name(self) -> str:
        return f"HG_OP_{self.name}"


# `enum hg_region`: Region's values are the C enum's (checked against the header like Opcode).
REGION_C = {region: f"HG_REGION_{region.name}" for region in Region}
OPCODES = {op.name: op.value for op in Opcode}


def c_expression(ref: BufferRef) -> str:
    """The C expression of a buffer inside `<prefix>_run`, where `memory` is in scope."""
    if ref.region is Region.ARENA:
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


def vm_code(steps, kernel_index: dict[str, int]) -> list[tuple[list[int], str]]:
    """The VM program: one (words, comment) per instruction."""
    code = []
    for step in steps:
        if isinstance(step, Call):
            words = [Opcode.CALL.value, kernel_index[step.unit.fn], len(step.args)]
            for ref in step.args:
                words += ref_words(ref)
            code.append((words, f"call {step.unit.label}"))
        elif isinstance(step, Copy):
            words = [Opcode.COPY.value, *ref_words(step.src), *ref_words(step.dst), *u64_words(step.nbytes)]
            code.append((words, f"copy {step.dst.tensor}"))
        elif isinstance(step, DeviceCopyIn):
            words = [Opcode.COPY_IN.value, step.device, *ref_words(step.src), *u64_words(step.dst_offset)]
            code.append((words + u64_words(step.nbytes), f"copy {step.tensor} to device {step.device}"))
        elif isinstance(step, DeviceCopyOut):
            words = [Opcode.COPY_OUT.value, step.device, *u64_words(step.src_offset), *ref_words(step.dst)]
            code.append((words + u64_words(step.nbytes), f"copy {step.tensor} from device {step.device}"))
        elif isinstance(step, Invoke):
            code.append(([Opcode.INVOKE.value, step.device, step.program], f"invoke device {step.device}"))
        elif isinstance(step, Wait):
            code.append(([Opcode.WAIT.value, step.device], f"wait for device {step.device}"))
    code.append(([Opcode.END.value], "end"))
    return code


def tensor_view(spec) -> dict:
    shape = list(spec.type.shape)
    return {
        "name_comment": c_comment(spec.name),
        "name_escaped": c_string(spec.name),
        "c_name": spec.c_name,
        "dtype_code": spec.type.dtype.onnx_code,
        "dtype_label": spec.type.dtype.label,
        "rank": len(shape),
        "shape_padded": (shape + [0] * 8)[:8] if shape else [0],
        "shape_text": "x".join(map(str, shape)) or "scalar",
        "nbytes": spec.type.nbytes,
    }


def _graph_arg(ref: BufferRef) -> dict:
    indexed = ref.region in (Region.INPUT, Region.OUTPUT)
    return {
        "region": REGION_C[ref.region],
        "index": ref.position if indexed else 0,
        "offset": 0 if indexed else ref.position,
        "comment": c_comment(ref.tensor or "-"),
    }


def _device_ref(offset: int, tensor: str) -> BufferRef:
    return BufferRef(Region.DEVICE, offset, tensor)


def graph_tables(steps) -> tuple[list[dict], list[dict]]:
    """The graph runtime's node and argument tables for one step list."""
    nodes, args = [], []

    def node(op, device=0, fn="NULL", refs=(), nbytes=0, first_arg=None, comment=""):
        entry = {
            "op": Opcode[op].c_name,
            "device": device,
            "fn": fn,
            "first_arg": len(args) if first_arg is None else first_arg,
            "num_args": len(refs),
            "bytes": nbytes,
            "comment": c_comment(comment),
        }
        nodes.append(entry)
        args.extend(_graph_arg(ref) for ref in refs)

    for step in steps:
        if isinstance(step, Call):
            node("CALL", fn=step.unit.fn, refs=step.args, comment=step.unit.label)
        elif isinstance(step, Copy):
            node(
                "COPY",
                refs=(step.src, step.dst),
                nbytes=step.nbytes,
                comment=f"copy {step.dst.tensor}",
            )
        elif isinstance(step, DeviceCopyIn):
            node(
                "COPY_IN",
                step.device,
                refs=(step.src, _device_ref(step.dst_offset, step.tensor)),
                nbytes=step.nbytes,
                comment=f"{step.tensor} to device {step.device}",
            )
        elif isinstance(step, DeviceCopyOut):
            node(
                "COPY_OUT",
                step.device,
                refs=(_device_ref(step.src_offset, step.tensor), step.dst),
                nbytes=step.nbytes,
                comment=f"{step.tensor} from device {step.device}",
            )
        elif isinstance(step, Invoke):
            node(
                "INVOKE",
                step.device,
                first_arg=step.program,
                comment=f"run program {step.program} on device {step.device}",
            )
        elif isinstance(step, Wait):
            node("WAIT", step.device, first_arg=0, comment=f"wait for device {step.device}")
    return nodes, args


ENGINE_C = {Engine.MAC_ARRAY: "HG_SIM_MAC_ARRAY", Engine.VECTOR: "HG_SIM_VECTOR", Engine.DMA: "HG_SIM_DMA"}
ENGINE_C[Engine.MAC_ARRAY_INT8] = "HG_SIM_MAC_ARRAY_INT8"


def work_table(steps) -> list[dict]:
    """A simulated accelerator's work descriptors, one per node of graph_tables(steps)."""
    table = []
    for step in steps:
        work = getattr(step, "work", None)
        if work is None:
            table.append(
                {"engine": "HG_SIM_NONE", "batch": 0, "m": 0, "n": 0, "k": 0, "bytes": 0, "after": 0}
                | {"src_stride": 0, "dst_stride": 0, "comment": "-"}
            )
            continue
        what = step.unit.label if isinstance(step, Call) else f"load {step.dst.tensor}"
        if isinstance(step, Copy) and "sram:" in step.src.tensor + step.dst.tensor:
            what = f"tile DMA {step.src.tensor} -> {step.dst.tensor}"
        shape = dict(batch=work.batch, m=work.m, n=work.n, k=work.k, bytes=work.bytes)
        strides = dict(after=work.after, src_stride=work.src_stride, dst_stride=work.dst_stride)
        table.append({"engine": ENGINE_C[work.engine], **shape, **strides, "comment": c_comment(what)})
    return table


def aot_steps(steps) -> list[dict]:
    out = []
    for step in steps:
        if isinstance(step, Call):
            out.append(
                {
                    "kind": "call",
                    "fn": step.unit.fn,
                    "args": [c_expression(r) for r in step.args] or ["NULL"],
                    "comment": c_comment(step.unit.label),
                }
            )
        elif isinstance(step, Copy):
            out.append(
                {
                    "kind": "copy",
                    "src": c_expression(step.src),
                    "dst": c_expression(step.dst),
                    "nbytes": step.nbytes,
                    "comment": c_comment(f"copy {step.dst.tensor}"),
                }
            )
        elif isinstance(step, DeviceCopyIn):
            out.append(
                {
                    "kind": "copy_in",
                    "device": step.device,
                    "offset": step.dst_offset,
                    "src": c_expression(step.src),
                    "nbytes": step.nbytes,
                    "comment": c_comment(step.tensor),
                }
            )
        elif isinstance(step, DeviceCopyOut):
            out.append(
                {
                    "kind": "copy_out",
                    "device": step.device,
                    "offset": step.src_offset,
                    "dst": c_expression(step.dst),
                    "nbytes": step.nbytes,
                    "comment": c_comment(step.tensor),
                }
            )
        elif isinstance(step, Invoke):
            out.append({"kind": "invoke", "device": step.device, "program": step.program})
        elif isinstance(step, Wait):
            out.append({"kind": "wait", "device": step.device})
    return out


def _byte_list(tensors) -> str:
    """A C initializer of buffer sizes (one 0 when there are none: C has no empty arrays)."""
    return ", ".join(f"{spec.type.nbytes}u" for spec in tensors) or "0u"


def program_view(
    program: Program,
    model_name: str,
    prefix: str,
    runtime_version: int,
    children: list[dict],
    simulated_devices: list[dict] = (),
) -> dict:
    """`children`: each device's prefix, path, block offset and size; `simulated_devices` (root only):
    every simulated accelerator below, with its prefix and its block's offset in the workspace."""
    kernel_fns = [unit.fn for unit in program.units]
    kernel_index = {fn: index for index, fn in enumerate(kernel_fns)}
    entries = []
    first_counter = 0
    for index, steps in enumerate(program.entries):
        nodes, args = graph_tables(steps)
        vm_lines = [
            ", ".join(f"{w}u" for w in words) + f", /* {c_comment(c)} */" for words, c in vm_code(steps, kernel_index)
        ]
        entries.append(
            {
                "index": index,
                "steps": aot_steps(steps),
                "graph_nodes": nodes,
                "graph_args": args,
                "vm_code_lines": vm_lines,
                "work": work_table(steps) if program.role is ProgramRole.ACCELERATOR else [],
                "first_counter": first_counter,
            }
        )
        first_counter += len(steps)
    arena_buffers = [
        {"name": c_string(name), "offset": offset, "nbytes": nbytes} for name, offset, nbytes in program.memory.buffers
    ]
    model = program.device_model
    return {
        "prefix": prefix,
        "PREFIX": prefix.upper(),
        "header": f"{prefix}.h" if program.role is ProgramRole.ROOT else f"{prefix}_device.h",
        "is_root": program.role is ProgramRole.ROOT,
        "model_name": c_comment(model_name),
        "target_path": c_comment(program.target.path_str),
        "runtime": program.runtime.value,
        "runtime_version": runtime_version,
        "inputs": [tensor_view(t) for t in program.inputs],
        "outputs": [tensor_view(t) for t in program.outputs],
        "arena_size": program.memory.arena_size,
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
        "arena_storage": max(program.memory.arena_size, 64),
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
        "sim": _simulator_view(model, first_counter) if model else None,
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


def _simulator_view(model: DeviceModel, num_counters: int) -> dict:
    """The simulated device's parameters (hg_sim_params) and where its counters sit."""
    return {
        "mac_rows": model.mac_rows,
        "mac_cols": model.mac_cols,
        "int8_mac_cols": model.int8_mac_cols,
        "vector_lanes": model.vector_lanes,
        "command_cycles": model.command_cycles,
        "dma_setup_cycles": model.dma_setup_cycles,
        "sram_bytes_per_cycle": repr(float(model.sram_bytes_per_cycle)),
        "dma_bytes_per_cycle": repr(float(model.dma_bytes_per_cycle)),
        "invoke_cycles": model.invoke_cycles,
        "link_latency_cycles": repr(float(model.link_latency_cycles)),
        "link_bytes_per_cycle": repr(float(model.link_bytes_per_cycle)),
        "counters_offset": STATE_HEADER_SIZE,
        "num_counters": num_counters,
    }
