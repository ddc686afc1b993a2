"""Prepare every name, number and table the program templates lay out (Python decides; Jinja lays out)."""

from __future__ import annotations

from hetgen.lower.program import BufferRef, Call, Copy, DeviceCopyIn, DeviceCopyOut, Invoke, Program, Region, Wait

REGION_C = {
    Region.NONE: "HG_REGION_NONE",
    Region.ARENA: "HG_REGION_ARENA",
    Region.WEIGHTS: "HG_REGION_WEIGHTS",
    Region.INPUT: "HG_REGION_INPUT",
    Region.OUTPUT: "HG_REGION_OUTPUT",
    Region.DEVICE: "HG_REGION_DEVICE",
}
OPCODES = {"END": 0, "CALL": 1, "COPY": 2, "COPY_IN": 3, "COPY_OUT": 4, "INVOKE": 5, "WAIT": 6}


def c_string(text: str) -> str:
    """Escape text for a C string literal (tensor names may hold any character)."""
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif 32 <= ord(char) < 127 and char != "?":
            out.append(char)
        else:
            out.extend(f"\\{byte:03o}" for byte in char.encode())
    return "".join(out)


def comment_text(text: str) -> str:
    return text.replace("*/", "* /").replace("\n", " ")


def c_expression(ref: BufferRef) -> str:
    """The C expression of a buffer inside `<prefix>_run`, where `memory` is in scope."""
    if ref.region is Region.ARENA:
        return f"memory.arena + {ref.position}u"
    if ref.region is Region.WEIGHTS:
        return f"(void *)(uintptr_t)(memory.weights + {ref.position}u)"
    if ref.region is Region.INPUT:
        return f"(void *)(uintptr_t)memory.inputs[{ref.position}]"
    if ref.region is Region.OUTPUT:
        return f"memory.outputs[{ref.position}]"
    return "NULL"


def ref_words(ref: BufferRef) -> list[int]:
    """A buffer reference as 4 bytecode words: region, index, offset low, offset high."""
    indexed = ref.region in (Region.INPUT, Region.OUTPUT)
    offset = 0 if indexed else ref.position
    return [ref.region.value, ref.position if indexed else 0, offset & 0xFFFFFFFF, offset >> 32]


def u64_words(value: int) -> list[int]:
    return [value & 0xFFFFFFFF, value >> 32]


def vm_code(program: Program, kernel_index: dict[str, int]) -> list[tuple[list[int], str]]:
    """The VM program: one (words, comment) per instruction."""
    code = []
    for step in program.steps:
        if isinstance(step, Call):
            words = [OPCODES["CALL"], kernel_index[step.unit.fn], len(step.args)]
            for ref in step.args:
                words += ref_words(ref)
            code.append((words, f"call {step.unit.label}"))
        elif isinstance(step, Copy):
            words = [OPCODES["COPY"], *ref_words(step.src), *ref_words(step.dst), *u64_words(step.nbytes)]
            code.append((words, f"copy {step.dst.tensor}"))
        elif isinstance(step, DeviceCopyIn):
            words = [OPCODES["COPY_IN"], step.device, *ref_words(step.src), *u64_words(step.dst_offset)]
            code.append((words + u64_words(step.nbytes), f"copy {step.tensor} to device {step.device}"))
        elif isinstance(step, DeviceCopyOut):
            words = [OPCODES["COPY_OUT"], step.device, *u64_words(step.src_offset), *ref_words(step.dst)]
            code.append((words + u64_words(step.nbytes), f"copy {step.tensor} from device {step.device}"))
        elif isinstance(step, Invoke):
            code.append(([OPCODES["INVOKE"], step.device, step.program], f"invoke device {step.device}"))
        elif isinstance(step, Wait):
            code.append(([OPCODES["WAIT"], step.device], f"wait for device {step.device}"))
    code.append(([OPCODES["END"]], "end"))
    return code


def tensor_view(spec) -> dict:
    shape = list(spec.type.shape)
    return {
        "name": spec.name,
        "name_escaped": c_string(spec.name),
        "c_name": spec.c_name,
        "dtype_code": spec.type.dtype.onnx_code,
        "dtype_label": spec.type.dtype.label,
        "rank": len(shape),
        "shape_padded": (shape + [0] * 8)[:8] if shape else [0],
        "shape_text": "x".join(map(str, shape)) or "scalar",
        "nbytes": spec.type.nbytes,
    }


def program_view(program: Program, model_name: str, prefix: str, runtime_version: int) -> dict:
    kernel_fns = [unit.fn for unit in program.units]
    kernel_index = {fn: index for index, fn in enumerate(kernel_fns)}
    steps, graph_nodes, graph_args = [], [], []
    for step in program.steps:
        if isinstance(step, Call):
            steps.append(
                {
                    "kind": "call",
                    "fn": step.unit.fn,
                    "args": [c_expression(ref) for ref in step.args] or ["NULL"],
                    "comment": comment_text(step.unit.label),
                }
            )
            graph_nodes.append({"fn": step.unit.fn, "first_arg": len(graph_args), "num_args": len(step.args)})
            for ref in step.args:
                indexed = ref.region in (Region.INPUT, Region.OUTPUT)
                graph_args.append(
                    {
                        "region": REGION_C[ref.region],
                        "index": ref.position if indexed else 0,
                        "offset": 0 if indexed else ref.position,
                        "comment": comment_text(ref.tensor or "-"),
                    }
                )
        elif isinstance(step, Copy):
            steps.append(
                {
                    "kind": "copy",
                    "src": c_expression(step.src),
                    "dst": c_expression(step.dst),
                    "nbytes": step.nbytes,
                    "comment": comment_text(f"output {step.dst.tensor}"),
                }
            )
    vm_lines = [", ".join(f"{w}u" for w in words) + f", /* {comment_text(c)} */" for words, c in vm_code(program, kernel_index)]
    arena_buffers = [
        {"name": c_string(name), "offset": offset, "nbytes": nbytes}
        for name, offset, nbytes in program.memory.buffers
    ]
    return {
        "prefix": prefix,
        "PREFIX": prefix.upper(),
        "model_name": comment_text(model_name),
        "target_path": program.target.path_str,
        "runtime": program.runtime.value,
        "runtime_version": runtime_version,
        "inputs": [tensor_view(t) for t in program.inputs],
        "outputs": [tensor_view(t) for t in program.outputs],
        "workspace_size": program.memory.arena_size,
        "arena_storage": max(program.memory.arena_size, 64),
        "weights_size": program.weights.size,
        "kernel_fns": kernel_fns,
        "steps": steps,
        "graph_nodes": graph_nodes,
        "graph_args": graph_args,
        "vm_code_lines": vm_lines,
        "arena_buffers": arena_buffers,
        "num_devices": len(program.devices),
    }
