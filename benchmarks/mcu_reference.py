"""An onnx2c-style reference for bench_mcu.py: the same model as ONE C file, the way single-file
generators (onnx2c and its kin) write it, to set hetgen's code size beside.

What makes it that style: one `static void` function per ONNX node with every shape, stride and
padding baked in as constants and plain nested loops (no shared kernel library, no packing); every
initializer a `static const float` array (flash); every intermediate tensor its own static buffer
(RAM: no liveness reuse); an entry point calling the nodes in order. BatchNormalization is its own
node function (not folded into the convolution).

It exposes the same C API as hetgen's generated header (`hg_mcu_init`, `hg_mcu_run`,
`hg_mcu_inputs`/`hg_mcu_outputs`), so it links with the very objects of hetgen's bare-metal board
program (board_main.c, hg_board.c) and linker script: the two images differ only in the model code.
Checked against onnxruntime on this machine (cc, ctypes) and under qemu before its size is quoted.
Operators: Conv (group 1), BatchNormalization, Relu, Add (same shape), MaxPool, GlobalAveragePool,
Flatten, Gemm, MatMul (2-D), Softmax (last axis): enough for resnet_tiny, mlp and tiny_cnn; another
model returns None (the transformer is not covered).
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from hetgen.build.baremetal import image_sizes
from hetgen.runtime.emulate import board_report, semihosting_command
from hetgen.runtime.reference import ort_session

REPO = Path(__file__).resolve().parent.parent
SUPPORTED = {"Conv", "BatchNormalization", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm", "MatMul"}
SUPPORTED |= {"Softmax"}


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _name(text: str, names: dict) -> str:
    return names.setdefault(text, f"t{len(names)}")


def _node_c(index: int, node, shapes: dict, names: dict) -> tuple[str, str]:
    """The node's function, and its call."""
    a = _attrs(node)
    ins = [_name(i, names) for i in node.input if i]
    out = _name(node.output[0], names)
    x = shapes[node.input[0]]
    y = shapes[node.output[0]]
    fn = f"node{index}_{node.op_type.lower()}"
    params = ", ".join(f"const float *restrict in{i}" for i in range(len(ins))) + ", float *restrict out"
    op = node.op_type
    if op == "Conv":
        (n, c, h, w), (_, m, oh, ow) = x, y
        kh, kw = a["kernel_shape"]
        sh, sw = a.get("strides", [1, 1])
        ph, pw = a.get("pads", [0, 0, 0, 0])[:2]
        bias = "in2[o]" if len(ins) > 2 else "0.0f"
        body = f"""for (int o = 0; o < {m}; ++o) for (int i = 0; i < {oh}; ++i) for (int j = 0; j < {ow}; ++j) {{
        float s = {bias};
        for (int ci = 0; ci < {c}; ++ci) for (int u = 0; u < {kh}; ++u) for (int v = 0; v < {kw}; ++v) {{
            const int r = i * {sh} - {ph} + u, q = j * {sw} - {pw} + v;
            if (r >= 0 && r < {h} && q >= 0 && q < {w}) s += in0[(ci * {h} + r) * {w} + q] * in1[((o * {c} + ci) * {kh} + u) * {kw} + v];
        }}
        out[(o * {oh} + i) * {ow} + j] = s;
    }}"""
    elif op == "BatchNormalization":
        c, hw = x[1], int(np.prod(x[2:]))
        eps = a.get("epsilon", 1e-5)
        body = f"""for (int ch = 0; ch < {c}; ++ch) {{
        const float k = in1[ch] / sqrtf(in4[ch] + {eps!r}f), b = in2[ch] - in3[ch] * k;
        for (int i = 0; i < {hw}; ++i) out[ch * {hw} + i] = in0[ch * {hw} + i] * k + b;
    }}"""
    elif op == "Relu":
        body = f"for (int i = 0; i < {int(np.prod(y))}; ++i) out[i] = in0[i] > 0.0f ? in0[i] : 0.0f;"
    elif op == "Add":
        if shapes[node.input[0]] == shapes[node.input[1]]:
            body = f"for (int i = 0; i < {int(np.prod(y))}; ++i) out[i] = in0[i] + in1[i];"
        elif int(np.prod(shapes[node.input[1]])) == y[-1]:
            body = f"for (int i = 0; i < {int(np.prod(y))}; ++i) out[i] = in0[i] + in1[i % {y[-1]}];"
        else:
            return None
    elif op == "MaxPool":
        (n, c, h, w), (_, _, oh, ow) = x, y
        kh, kw = a["kernel_shape"]
        sh, sw = a.get("strides", [1, 1])
        ph, pw = a.get("pads", [0, 0, 0, 0])[:2]
        body = f"""for (int ch = 0; ch < {c}; ++ch) for (int i = 0; i < {oh}; ++i) for (int j = 0; j < {ow}; ++j) {{
        float s = -INFINITY;
        for (int u = 0; u < {kh}; ++u) for (int v = 0; v < {kw}; ++v) {{
            const int r = i * {sh} - {ph} + u, q = j * {sw} - {pw} + v;
            if (r >= 0 && r < {h} && q >= 0 && q < {w} && in0[(ch * {h} + r) * {w} + q] > s) s = in0[(ch * {h} + r) * {w} + q];
        }}
        out[(ch * {oh} + i) * {ow} + j] = s;
    }}"""
    elif op == "GlobalAveragePool":
        c, hw = x[1], int(np.prod(x[2:]))
        body = f"""for (int ch = 0; ch < {c}; ++ch) {{
        float s = 0.0f;
        for (int i = 0; i < {hw}; ++i) s += in0[ch * {hw} + i];
        out[ch] = s / {hw}.0f;
    }}"""
    elif op == "Flatten":
        body = f"for (int i = 0; i < {int(np.prod(y))}; ++i) out[i] = in0[i];"
    elif op in ("Gemm", "MatMul"):
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or len(x) != 2:
            return None
        m, k = x
        n = y[1]
        weight = f"in1[j * {k} + p]" if a.get("transB", 0) else f"in1[p * {n} + j]"
        bias = f"in2[j % {int(np.prod(shapes[node.input[2]]))}]" if len(ins) > 2 else "0.0f"
        body = f"""for (int i = 0; i < {m}; ++i) for (int j = 0; j < {n}; ++j) {{
        float s = {bias};
        for (int p = 0; p < {k}; ++p) s += in0[i * {k} + p] * {weight};
        out[i * {n} + j] = s;
    }}"""
    elif op == "Softmax":
        if a.get("axis", -1) not in (-1, len(x) - 1):
            return None
        rows, n = int(np.prod(x[:-1])), x[-1]
        body = f"""for (int r = 0; r < {rows}; ++r) {{
        float top = -INFINITY, sum = 0.0f;
        for (int i = 0; i < {n}; ++i) top = in0[r * {n} + i] > top ? in0[r * {n} + i] : top;
        for (int i = 0; i < {n}; ++i) sum += out[r * {n} + i] = expf(in0[r * {n} + i] - top);
        for (int i = 0; i < {n}; ++i) out[r * {n} + i] /= sum;
    }}"""
    else:
        return None
    call = f"    {fn}({', '.join(ins)}, {out});"
    return f"static void {fn}({params})\n{{\n    {body}\n}}\n", call


def reference_c(model: onnx.ModelProto) -> str | None:
    """The model as one onnx2c-style C file, or None when it uses an operator not covered here."""
    model = shape_inference.infer_shapes(model)
    graph = model.graph
    if any(node.op_type not in SUPPORTED for node in graph.node) or len(graph.input) != 1 or len(graph.output) != 1:
        return None
    shapes = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        shapes[value.name] = [d.dim_value for d in value.type.tensor_type.shape.dim]
    initializers = {t.name: numpy_helper.to_array(t).astype(np.float32) for t in graph.initializer}
    for name, array in initializers.items():
        shapes[name] = list(array.shape)
    names: dict[str, str] = {}
    parts = [
        "/* onnx2c-style reference (benchmarks/mcu_reference.py) */",
        "#include <math.h>",
        '#include "hg_runtime.h"',
    ]
    for name, array in initializers.items():
        values = ", ".join(f"{v!r}f" if np.isfinite(v) else "0.0f" for v in array.ravel().tolist())
        parts.append(f"static const float {_name(name, names)}[{max(array.size, 1)}] = {{ {values} }};")
    functions, calls = [], []
    for index, node in enumerate(graph.node):
        made = _node_c(index, node, shapes, names)
        if made is None:
            return None
        functions.append(made[0])
        calls.append(made[1])
    inp, outp = graph.input[0].name, graph.output[0].name
    for node in graph.node:
        for tensor in node.output:
            if tensor != outp:
                parts.append(f"static float {_name(tensor, names)}[{int(np.prod(shapes[tensor]))}];")
    parts += functions
    x_shape, y_shape = shapes[inp], shapes[outp]

    def info(tensor: str, shape: list[int]) -> str:
        padded = ", ".join(str(d) for d in (shape + [0] * 8)[:8])
        return f'{{"{tensor}", 1, {len(shape)}u, {{ {padded} }}, {4 * int(np.prod(shape))}u}}'

    parts += [
        f"const hg_tensor_info hg_mcu_inputs[] = {{ {info(inp, x_shape)} }};",
        f"const hg_tensor_info hg_mcu_outputs[] = {{ {info(outp, y_shape)} }};",
        "int hg_mcu_init(void) { return HG_OK; }",
        "int hg_mcu_run(const void *const *inputs, void *const *outputs, void *workspace)",
        "{",
        f"    const float *{names[inp]} = inputs[0];",
        f"    float *{names[outp]} = outputs[0];",
        "    (void)workspace;",
        *calls,
        "    return HG_OK;",
        "}",
    ]
    return "\n".join(parts) + "\n"


def _check_native(source: Path, runtime: Path, model: onnx.ModelProto, folder: Path) -> None:
    library = folder / "ref.so"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-std=c11", "-I", str(runtime), str(source), "-o", str(library), "-lm"],
        check=True,
    )
    lib = ctypes.CDLL(str(library))
    graph = model.graph
    x_shape = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    y_shape = [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    y = np.zeros(y_shape, np.float32)
    pointers = (ctypes.c_void_p * 1)(x.ctypes.data)
    outputs = (ctypes.c_void_p * 1)(y.ctypes.data)
    lib.hg_mcu_run(pointers, outputs, None)
    expected = ort_session(model.SerializeToString()).run(None, {graph.input[0].name: x})[0]
    if not np.allclose(y, expected, rtol=1e-4, atol=1e-4):
        raise AssertionError(f"the reference disagrees with onnxruntime: {np.abs(y - expected).max()}")


def build_reference(name: str, model, opt: str, folder: Path) -> dict | None:
    """Build the reference ELF beside a hetgen mcu project of the same model; its sizes and speed."""
    import hetgen

    proto = onnx.load(str(model)) if isinstance(model, (str, Path)) else model
    source_text = reference_c(proto)
    if source_text is None:
        return None
    project = hetgen.compile(REPO / "platforms/mcu.yaml", proto, out=folder / "hetgen", opt=(opt,))
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "ref.c"
    source.write_text(source_text)
    _check_native(source, project / "runtime", proto, folder)
    commands = json.loads((project / "compile_commands.json").read_text())
    board_main = next(c for c in commands if c["file"].endswith("board_main.c"))
    flags = [f for f in board_main["arguments"][1:] if f.startswith(("-m", "-O", "-f", "-std"))]
    objects = [project / "board/obj/mcu/board_main.c.o", project / "board/obj/mcu/runtime/hg_board.c.o"]
    elf = folder / "ref.elf"
    subprocess.run(
        ["arm-none-eabi-gcc", *flags, "-I", str(project / "runtime"), "-c", str(source), "-o", str(folder / "ref.o")],
        check=True,
    )
    subprocess.run(
        ["arm-none-eabi-gcc", *flags, "-nostartfiles", "-Wl,--gc-sections", "-T", str(project / "mcu/link.ld")]
        + [str(o) for o in (*objects, folder / "ref.o")]
        + ["-lm", "-o", str(elf)],
        check=True,
    )
    weights = sum(numpy_helper.to_array(t).size * 4 for t in proto.graph.initializer)
    sizes = image_sizes(elf)
    instructions, outputs = _run(elf, proto, folder)
    x_shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    expected = ort_session(proto.SerializeToString()).run(None, {proto.graph.input[0].name: x})[0]
    if not np.allclose(outputs.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4):
        raise AssertionError("the reference ELF disagrees with onnxruntime under qemu")
    return {
        "model": name,
        "opt": opt,
        "text": sizes.text,
        "data": sizes.data,
        "bss": sizes.bss,
        "weights": weights,
        "code_and_constants": sizes.text - weights,
        "peak_ram": sizes.peak_ram,
        "instructions": round(instructions),
    }


def _run(elf: Path, proto, folder: Path) -> tuple[float, np.ndarray]:
    x_shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "in.bin").write_bytes(x.astype("<f4").tobytes())
        ticks = []
        for runs in (1, 3):
            command = semihosting_command(
                ("qemu-system-arm", "-M", "mps2-an386", "-icount", "shift=0", str(elf)),
                "ref.elf",
                [f"{tmp}/in.bin", f"{tmp}/out.bin", str(runs)],
            )
            result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
            ticks.append(board_report(result.stdout)["ticks"])
        outputs = np.frombuffer((Path(tmp) / "out.bin").read_bytes(), dtype="<f4")
    return (ticks[1] - ticks[0]) / 2 * 40, outputs
