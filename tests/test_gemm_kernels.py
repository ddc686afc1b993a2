"""The GEMM micro-kernels of every ISA, and weights packed at generate time.

`tests/c/gemm_check.c` runs hg_sgemm_ex on one shape in every operand mode (strided, transposed,
A or B packed by `hetgen.ops._gemm_plan` in Python, B packed by a caller's function) and compares
with numpy. It is compiled by each toolchain with the flags that pick an ISA: the board kinds'
own flags (aarch64 -> NEON under qemu, riscv64 rv64gc -> portable C under qemu), x86-64 levels
(baseline -> portable, v3 -> AVX2+FMA, v4 -> AVX-512, each where this CPU can run it), clang, and
the native build under ASan/UBSan. Then: a model's constant weights reach the library packed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from gemm_support import gemm_operands
from hetgen.build import BuildOptions
from hetgen.build.toolchain import board_toolchain
from hetgen.ops import _gemm_plan
from hetgen.pipeline import resolve_platform
from hetgen.runtime.verify import verify
from kernel_text import kernel_functions
from verify_support import verify_matches

REPO = Path(__file__).resolve().parent.parent
RUNTIME = REPO / "templates" / "runtime"
HARNESS = REPO / "tests" / "c" / "gemm_check.c"
STRICT = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror")
CPU_FLAGS = set(re.findall(r"\w+", Path("/proc/cpuinfo").read_text())) if Path("/proc/cpuinfo").exists() else set()

# Edges of every blocking level: 1x1x1, k = 0, full tiles, partial tiles in m and n, n <= 16 (the
# half-width AVX-512 tile), m > MC, n > NC, k > 2 KC. The last columns of a row of tiles take each
# AVX-512 width, full and masked: 1, 6, 7 and 8 (8 lanes), 12 and 16 (16), 17 and 24 (16 + 8), 25
# (32, masked). 40 x 49 x 320: a 7 x 7 plane's 17 last columns, 32 rows with the rows in the lanes
# (hg_sgemm_tile_t, both k blocks: the second adds and finishes), 8-row tiles for rows 32-39.
SHAPES = [
    (1, 1, 1),
    (5, 7, 0),
    (8, 32, 256),
    (13, 70, 300),
    (130, 40, 10),
    (9, 1100, 3),
    (17, 16, 513),
    (64, 49, 27),
    (16, 57, 33),
    (16, 24, 19),
    (40, 49, 320),
]


def board(kind: str):
    """(compiler, flags, emulator) the board build uses for the `kind` board's controller."""
    target = resolve_platform(REPO / f"platforms/board-{kind}.yaml").root.controller()
    toolchain = board_toolchain(target, BuildOptions(opt=("-O2",)))
    return toolchain.cc, (*toolchain.cflags, "-Werror", "-static"), tuple(toolchain.emulator)


def builds() -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...], str, bool]]:
    """name -> (compiler, flags, launcher, the ISA those flags must select, runnable here)."""
    native_isa = "avx512" if "avx512f" in CPU_FLAGS else "avx2" if {"avx2", "fma"} <= CPU_FLAGS else "portable"
    sanitize = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
    # the sanitizers check what the kernels do, not the optimiser (the gcc builds above check -O2's warnings)
    sanitized = (*(flag for flag in STRICT if flag != "-O2"), "-O1", "-march=native", *sanitize)
    table = {
        "x86-64 baseline": ("gcc", (*STRICT, "-march=x86-64"), (), "portable", True),
        "x86-64-v3": ("gcc", (*STRICT, "-march=x86-64-v3"), (), "avx2", {"avx2", "fma"} <= CPU_FLAGS),
        "x86-64-v4": ("gcc", (*STRICT, "-march=x86-64-v4"), (), "avx512", "avx512f" in CPU_FLAGS),
        "clang native": ("clang", (*STRICT, "-march=native"), (), native_isa, True),
        "native asan+ubsan": ("gcc", sanitized, (), native_isa, True),
    }
    for kind, isa in (("aarch64", "neon"), ("riscv64", "portable")):
        cc, flags, emulator = board(kind)
        table[f"{kind} board"] = (cc, flags, emulator, isa, True)
    return table


BUILDS = builds()


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[tuple[int, int, int], Path]:
    """Per shape, a folder of operands, Python-packed panels and numpy's product."""
    return gemm_operands(tmp_path_factory, SHAPES, seed=7)


@pytest.mark.cc
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.external) if n.endswith(" board") else n for n in sorted(BUILDS)]
)
def test_micro_kernels_of_every_isa_match_numpy_in_every_operand_mode(name, cases, tmp_path):
    cc, flags, launcher, isa, runnable = BUILDS[name]
    needed = [cc, *launcher[:1]]
    if any(shutil.which(tool) is None for tool in needed):
        pytest.skip(f"needs {' and '.join(needed)}")
    if not runnable:
        pytest.skip(f"this CPU cannot run {name} code")
    program = tmp_path / "gemm_check"
    # the worker pool at two threads: the 13x70x300 product is split between them
    (tmp_path / "hg_threads_config.h").write_text("#define HG_THREADS_DEFAULT 2\n#define HG_THREADS_POOL 1\n")
    sources = [str(HARNESS), str(RUNTIME / "hg_gemm.c"), str(RUNTIME / "hg_threads.c")]
    compiled = subprocess.run(
        [cc, *flags, f"-I{RUNTIME}", f"-I{tmp_path}", *sources, "-pthread", "-lm", "-o", str(program)],
        capture_output=True,
        text=True,
    )
    assert compiled.returncode == 0, f"{name}: {compiled.stderr[-3000:]}"
    for (m, n, k), folder in cases.items():
        run = subprocess.run(
            [*launcher, str(program), str(m), str(n), str(k), str(folder)], capture_output=True, text=True, timeout=120
        )
        lines = run.stdout.splitlines()
        assert lines and lines[0] == f"isa {isa}", f"{name}: the flags {flags} should select {isa}: {run.stdout}"
        assert run.returncode == 0, f"{name} on {m}x{n}x{k}:\n{run.stdout}{run.stderr[-2000:]}"
        assert len(lines) == 19  # the ISA, then 6 modes x (store, accumulate, finish)


def test_panels_are_the_layout_the_kernels_read():
    a = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    panels = _gemm_plan.a_panels(a).reshape(2, 3, 8)
    assert panels[0, 2, 5] == a[5, 2] and panels[1, 1, 1] == a[9, 1] and not panels[1, :, 2:].any()
    b = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
    panels = _gemm_plan.b_panels(b).reshape(2, 3, 32)
    assert panels[1, 2, 7] == b[2, 39] and panels[0, 1, 31] == b[1, 31] and not panels[1, :, 8:].any()


def conv_gemm_matmul_model() -> onnx.ModelProto:
    """Conv (3x3, padded, strided) + Relu, Conv 1x1, grouped Conv, MatMul and Gemm with transB, all
    with constant weights whose packed sizes differ from the model's (odd channel counts)."""
    rng = np.random.default_rng(3)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c3", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w4"], ["m4"]),
        helper.make_node("Gemm", ["m4", "w5", "b5"], ["y"], transB=1, alpha=0.5),
    ]
    inits = [
        weight("w1", 11, 3, 3, 3),
        weight("b1", 11),
        weight("w2", 6, 11, 1, 1),
        weight("w3", 10, 3, 3, 3),
        weight("b3", 10),
        numpy_helper.from_array(np.array([1, 10 * 5 * 5], np.int64), "shape"),
        weight("w4", 250, 37),
        weight("w5", 9, 37),
        weight("b5", 9),
    ]
    graph = helper.make_graph(
        nodes,
        "packed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 9])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def kernel_sources(out: Path) -> dict[str, str]:
    """Generated kernel functions by node name (hg_host_k_n0_conv -> n0_conv)."""
    return {name.removeprefix("hg_host_k_"): text for name, (_, text) in kernel_functions(out).items()}


@pytest.mark.cc
def test_constant_weights_reach_the_library_packed(tmp_path):
    out = hetgen.compile("host", conv_gemm_matmul_model(), out=tmp_path / "out", native_only=True, werror=True)
    sources = kernel_sources(out)
    # the small strided 3x3 one reads the model's layout in its direct loop (hetgen/ops/_conv_small.py)
    assert "Direct convolution of small planes" in sources["n0_conv"]
    conv = [sources[name] for name in ("n2_conv", "n3_conv")]
    assert all(".a_panels = w" in text for text in conv)
    assert all(".b_panels = b" in sources[name] for name in ("n5_matmul", "n6_gemm"))
    # no operand of the model's layout is packed at run time: no strided A or B for the constants
    assert not any(".a_rs" in text for text in conv)
    errors = verify(out, seed=1)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.cc
def test_weights_given_at_run_time_are_packed_by_the_kernel(tmp_path):
    model = conv_gemm_matmul_model()
    graph = model.graph
    w1 = next(init for init in graph.initializer if init.name == "w1")
    graph.initializer.remove(w1)
    graph.input.append(helper.make_tensor_value_info("w1", TensorProto.FLOAT, list(w1.dims)))
    out = hetgen.compile("host", model, out=tmp_path / "out", native_only=True, werror=True)
    sources = kernel_sources(out)
    assert ".a = w" in sources["n0_conv"] and ".a_panels = w" in sources["n2_conv"]
    errors = verify(out, seed=2)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.cc
def test_packed_kernels_are_clean_under_asan_and_ubsan(tmp_path):
    """Generate-time panels, the small-plane direct convolution and the epilogues, in a sanitized
    native build (implicit im2col: the run-time weights' test)."""
    model = tmp_path / "packed.onnx"
    onnx.save(conv_gemm_matmul_model(), model)
    out = tmp_path / "out"
    hetgen.compile(
        "host", model, out=out, native_only=True, werror=True, sanitize=("address", "undefined"), opt=("-O1",)
    )
    verify_matches(out, 1)


def winograd_model() -> onnx.ModelProto:
    """Two 3x3 stride-1 convolutions that take Winograd F(2x2, 3x3): batch 2, odd output sizes
    (partial tiles), several chunks of tile rows (the last one partial), symmetric and asymmetric
    padding, with and without bias, a fused Relu."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[0, 2, 1, 0]),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((24, 16, 3, 3)).astype(np.float32) * 0.2, "w1"),
        numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((16, 24, 3, 3)).astype(np.float32) * 0.2, "w2"),
    ]
    graph = helper.make_graph(
        nodes,
        "winograd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 151, 61])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 150, 61])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def fast_host(tmp_path: Path) -> Path:
    """The host with `options: {memory: fast}`: Winograd wherever it is faster, whatever its memory
    (the default, lean, declines it where its workspace would pass the memory bound)."""
    path = tmp_path / "fast.yaml"
    path.write_text("name: host\ntarget: {kind: native, runtime: aot}\noptions: {memory: fast}\n")
    return path


@pytest.mark.cc
def test_winograd_convolutions_match_onnxruntime(tmp_path):
    out = hetgen.compile(fast_host(tmp_path), winograd_model(), out=tmp_path / "out", native_only=True, werror=True)
    sources = kernel_sources(out)
    assert all("Winograd F(2x2, 3x3)" in sources[name] for name in ("n0_conv", "n2_conv"))
    # 76 rows of 31 tiles an image: the pool's tasks, 16 an image of 5 rows (the last of 1), both images in one call
    assert "(5 rows of them)" in sources["n0_conv"] and "hg_parallel_for(32u, " in sources["n0_conv"]
    errors = verify(out, seed=3)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.cc
def test_winograd_is_clean_under_asan_and_ubsan(tmp_path):
    model = tmp_path / "winograd.onnx"
    onnx.save(winograd_model(), model)
    out = tmp_path / "out"
    hetgen.compile(
        fast_host(tmp_path),
        model,
        out=out,
        native_only=True,
        werror=True,
        sanitize=("address", "undefined"),
        opt=("-O1",),
    )
    verify_matches(out, 1)
