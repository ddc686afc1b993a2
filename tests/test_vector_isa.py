"""Micro-kernels per vector ISA on the cross targets, under emulation: RVV 1.0 on a riscv64 core whose
kind says `vector: rvv` (qemu-riscv64 with a vector unit), Helium on the Cortex-M55 (qemu-system-arm
mps3-an547), and no vector instruction at all on the targets whose kind has no vector unit (riscv64
`vector: none`, Cortex-M4 and M7), checked in the linked programs' disassembly.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import hetgen
from gemm_support import gemm_operands
from hetgen.build import BuildOptions
from hetgen.build.toolchain import board_toolchain
from hetgen.errors import HetgenError
from hetgen.models import resnet, tiny_cnn
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.verify import verify

REPO = Path(__file__).resolve().parent.parent
RUNTIME = REPO / "templates" / "runtime"
FAST = {"opt": ("-O2",), "native_tuning": False}
RISCV = ("riscv64-linux-gnu-gcc", "riscv64-linux-gnu-objdump", "qemu-riscv64")
ARM = ("arm-none-eabi-gcc", "arm-none-eabi-objdump", "qemu-system-arm")
needs_riscv = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in RISCV),
    reason="needs gcc-riscv64-linux-gnu and qemu-user (the README's set-up installs them)",
)
needs_arm = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ARM),
    reason="needs gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm (the README's set-up installs them)",
)
# A RISC-V instruction whose mnemonic starts with v is a vector instruction (no scalar one does).
RISCV_VECTOR = re.compile(r"^\s*[0-9a-f]+:\s+(?:[0-9a-f]{4,8}\s+)+(v[a-z0-9.]+)\s", re.MULTILINE)
# An Arm instruction naming a Q register is Helium's (Armv7E-M FPUs have S and D registers only).
ARM_VECTOR = re.compile(r"^\s*[0-9a-f]+:\s+(?:[0-9a-f]{4}\s+)+([a-z][a-z0-9.]*)[^\S\n][^;@\n]*\bq[0-7]\b", re.MULTILINE)


def riscv_platform(tmp_path: Path, vector: str, extra: str = "") -> Path:
    path = tmp_path / f"rv_{vector}.yaml"
    path.write_text(f"name: rv_{vector}\ntarget: {{kind: riscv64, runtime: graph, vector: {vector}{extra}}}\n")
    return path


def board_program(out: Path) -> dict:
    (program,) = json.loads((out / "hetgen.json").read_text())["board"]["programs"]
    return program


def disassembly(objdump: str, program: Path, *options: str) -> str:
    return subprocess.run([objdump, "-d", *options, str(program)], capture_output=True, text=True, check=True).stdout


def small_resnet():
    """Convolutions through every GEMM path (Winograd, 1x1 strided, the Gemm head; on bare metal, 3x3
    implicit too: application cores run the small strided 3x3 layers direct, hetgen/ops/_conv_small.py)."""
    return resnet(widths=(16, 32), size=16, seed=1)


# ---- RVV -------------------------------------------------------------------------------------


def test_vector_attribute_takes_effect_in_march_and_the_emulator():
    def toolchain(extra: str):
        platform = load_platform_text(f"name: rv\ntarget: {{kind: riscv64, runtime: graph{extra}}}\n")
        return board_toolchain(platform.root, BuildOptions())

    plain = toolchain("")
    assert "-march=rv64gc" in plain.cflags and "-cpu" not in plain.emulator
    rvv = toolchain(", vector: rvv, vlen_bits: 256")
    assert "-march=rv64gcv" in rvv.cflags and "-march=rv64gc" not in rvv.cflags
    assert rvv.emulator[:3] == ("qemu-riscv64", "-cpu", "rv64,v=true,vext_spec=v1.0,vlen=256,elen=64")
    # a board's own ISA string keeps its extensions; V goes where the canonical order puts it
    own = toolchain(", vector: rvv, toolchain: {cflags: [-march=rv64imafdc_zba_zbb, -mabi=lp64d]}")
    assert "-march=rv64imafdcv_zba_zbb" in own.cflags
    # an emulator that already names a CPU is the platform's choice
    named = toolchain(", vector: rvv, toolchain: {emulator: [qemu-riscv64, -cpu, 'rv64,v=true,vlen=512']}")
    assert named.emulator == ("qemu-riscv64", "-cpu", "rv64,v=true,vlen=512")


def test_unknown_or_contradicted_vector_unit_is_refused(tmp_path):
    with pytest.raises(HetgenError, match=r"'vector' of target 'rv' .* must be one of: none, rvv"):
        load_platform_text("name: rv\ntarget: {kind: riscv64, runtime: graph, vector: sve}\n")
    out = tmp_path / "out"
    contradiction = riscv_platform(tmp_path, "none", ", toolchain: {cflags: [-march=rv64gcv, -mabi=lp64d]}")
    with pytest.raises(HetgenError, match=r"declares vector: none but its cflags' '-march=rv64gcv' enables"):
        hetgen.compile(contradiction, tiny_cnn(seed=1), out=out, **FAST)
    assert not out.exists()  # refused before anything was generated


@pytest.fixture(scope="module")
def gemm_cases(tmp_path_factory) -> dict[tuple[int, int, int], Path]:
    """Per shape (m, n, k), operands, Python-packed panels and numpy's product for gemm_check.c:
    partial tiles in both directions (edge tiles, strips shorter than vl), 16 columns, k = 0,
    k across two KC blocks."""
    return gemm_operands(
        tmp_path_factory, [(1, 1, 1), (5, 7, 0), (8, 32, 40), (13, 70, 300), (17, 16, 513), (64, 49, 27)], seed=11
    )


@pytest.mark.external
@needs_riscv
@pytest.mark.parametrize("compiler", ["riscv64-linux-gnu-gcc", "clang"])
def test_rvv_micro_kernel_matches_numpy_in_every_operand_mode_at_every_vector_length(tmp_path, gemm_cases, compiler):
    """tests/c/gemm_check.c built with the rvv kind's board flags, by the kind's gcc (which knows no
    vector registers) and by clang (which allocates them itself, so the asm block's clobbers count);
    the kernel is vector-length agnostic, so one binary must be right with 128-, 256- and 1024-bit
    vector registers."""
    if shutil.which(compiler) is None:
        pytest.skip(f"needs {compiler}")
    platform = load_platform_text("name: rv\ntarget: {kind: riscv64, runtime: graph, vector: rvv}\n")
    toolchain = board_toolchain(platform.root, BuildOptions(opt=("-O2",)))
    target = ["--target=riscv64-linux-gnu"] if compiler == "clang" else []
    (tmp_path / "hg_threads_config.h").write_text("#define HG_THREADS_DEFAULT 1\n")
    program = tmp_path / "gemm_check"
    sources = [REPO / "tests/c/gemm_check.c", RUNTIME / "hg_gemm.c", RUNTIME / "hg_threads.c"]
    subprocess.run(
        [compiler, *target, *toolchain.cflags, "-Werror", "-static", f"-I{RUNTIME}", f"-I{tmp_path}"]
        + [*map(str, sources), "-pthread", "-lm", "-o", str(program)],
        check=True,
    )
    vector_unit = toolchain.emulator.index("-cpu") + 1
    for vlen in (128, 256, 1024):
        emulator = list(toolchain.emulator)
        emulator[vector_unit] = emulator[vector_unit].replace("vlen=128", f"vlen={vlen}")
        for (m, n, k), folder in gemm_cases.items():
            run = subprocess.run(
                [*emulator, str(program), str(m), str(n), str(k), str(folder)], capture_output=True, text=True
            )
            lines = run.stdout.splitlines()
            assert lines and lines[0] == "isa rvv", run.stdout + run.stderr
            assert run.returncode == 0 and len(lines) == 19, f"VLEN {vlen}, {m}x{n}x{k}:\n{run.stdout}{run.stderr}"


@pytest.fixture(scope="module")
def riscv_builds(tmp_path_factory) -> dict[str, Path]:
    """The small ResNet built for a riscv64 core with and without a vector unit."""
    if any(shutil.which(tool) is None for tool in RISCV):
        pytest.skip("needs gcc-riscv64-linux-gnu and qemu-user (the README's set-up installs them)")
    tmp = tmp_path_factory.mktemp("riscv")
    return {
        vector: hetgen.compile(riscv_platform(tmp, vector), small_resnet(), out=tmp / vector, werror=True, **FAST)
        for vector in ("rvv", "none")
    }


@pytest.mark.external
@needs_riscv
@pytest.mark.parametrize("vector", ["rvv", "none"])
def test_riscv64_cnn_under_qemu_matches_onnxruntime(riscv_builds, vector):
    out = riscv_builds[vector]
    program = board_program(out)
    commands = json.loads((out / "compile_commands.json").read_text())
    board = [c["arguments"] for c in commands if c["output"].startswith("board/")]
    march = "-march=rv64gcv" if vector == "rvv" else "-march=rv64gc"
    assert board and all(march in arguments for arguments in board)
    assert ("-cpu" in program["emulator"]) == (vector == "rvv")
    errors = verify(out, seed=5, emulate=True)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.external
@needs_riscv
def test_only_the_rvv_core_receives_vector_instructions(riscv_builds, tmp_path):
    found = {}
    for vector, out in riscv_builds.items():
        listing = disassembly("riscv64-linux-gnu-objdump", out / board_program(out)["path"])
        found[vector] = set(RISCV_VECTOR.findall(listing))
    assert found["none"] == set()  # not one vector instruction, in the kernels or the C library
    assert {"vsetvli", "vle32.v", "vfmacc.vf", "vse32.v"} <= found["rvv"]
    # and they run: without a vector unit the rvv program dies on its first vector instruction
    out = riscv_builds["rvv"]
    inputs = tmp_path / "in.bin"
    inputs.write_bytes(np.zeros((1, 3, 16, 16), np.float32).tobytes())
    program = [str(out / board_program(out)["path"]), str(inputs), str(tmp_path / "out.bin")]
    assert subprocess.run(["qemu-riscv64", *program], capture_output=True).returncode == -4  # SIGILL
    with_unit = subprocess.run(["qemu-riscv64", "-cpu", "rv64,v=true,vext_spec=v1.0", *program], capture_output=True)
    assert with_unit.returncode == 0, with_unit.stderr


# ---- Helium (Cortex-M55) and the Cortex-M cores without it ---------------------------------------


def mcu_platform(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.yaml"
    path.write_text(f"name: mcu\ntarget: {{kind: {kind}, runtime: aot}}\n")
    return path


def arm_listing(out: Path) -> str:
    """The ELF's disassembly decoded as Armv8.1-M, so Helium instructions show by name wherever they are."""
    return disassembly("arm-none-eabi-objdump", out / board_program(out)["path"], "-m", "armv8.1-m.main")


@pytest.mark.external
@needs_arm
@pytest.mark.parametrize("kind", ["cortex-m55", "cortex-m4", "cortex-m7"])
def test_cortex_m_cnn_under_qemu_matches_onnxruntime_with_helium_only_on_the_m55(tmp_path, kind):
    out = hetgen.compile(mcu_platform(tmp_path, kind), small_resnet(), out=tmp_path / "out", werror=True, **FAST)
    helium = set(ARM_VECTOR.findall(arm_listing(out)))
    if kind == "cortex-m55":
        assert board_program(out)["emulator"] == ["qemu-system-arm", "-M", "mps3-an547"]
        assert {"vfma.f32", "vldrw.u32", "vstrw.32"} <= helium  # the micro-kernel's multiply-adds
    else:
        assert helium == set()
    errors = verify(out, seed=5, emulate=True)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.external
@needs_arm
@pytest.mark.parametrize(("kind", "dot"), [("cortex-m55", "vmlava"), ("cortex-m4", "smlad")])
def test_int8_dot_products_use_helium_on_the_m55_and_smlad_on_the_m4(tmp_path, kind, dot):
    pytest.importorskip("onnxruntime.quantization")
    from hetgen.models.quantized import quantized

    model = quantized(tiny_cnn(seed=2), "QOperator")  # QLinearConv and QGemm: hg_igemm_s16
    out = hetgen.compile(mcu_platform(tmp_path, kind), model, out=tmp_path / "out", werror=True, **FAST)
    listing = arm_listing(out)
    assert re.search(rf"\b{dot}", listing) and not re.search(rf"\b{'smlad' if dot == 'vmlava' else 'vmlava'}", listing)
    errors = verify(out, seed=5, emulate=True)
    assert errors and all(e.ok and e.max_abs == 0 for e in errors), errors
