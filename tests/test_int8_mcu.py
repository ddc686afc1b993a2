"""The int8 arithmetic on Cortex-M, under qemu-system-arm: with the DSP extension (Cortex-M4) the
integer GEMM uses SMLAD, two 16-bit multiply-accumulates per instruction; with Helium (Cortex-M55)
VMLADAVA; without either (Cortex-M3) the plain loop. Each must give the reference sums (the GEMM,
the in-place dot products over int8 and uint8 weights, a fully connected layer's over int8 and
uint8 inputs) and MLAS's rounding (tests/c/quant_cortex_m.c).
Whole int8 models (LeNet-5) on the M4, M7 and M55 boards: bit for bit with onnxruntime, made of
each core's dot products (SXTB16 + SMLAD, Helium's VMLADAVA), and on the M4 within CMSIS-NN's
instructions and RAM.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hetgen.templates_dir import templates_dir

pytestmark = pytest.mark.external  # every test here builds for Cortex-M and runs it under qemu-system-arm

HERE = Path(__file__).parent / "c"
REPO = Path(__file__).resolve().parent.parent
CC, QEMU = "arm-none-eabi-gcc", "qemu-system-arm"


@pytest.mark.skipif(not (shutil.which(CC) and shutil.which(QEMU)), reason=f"needs {CC} and {QEMU}")
@pytest.mark.parametrize(
    ("cpu", "machine", "dot"),
    [("cortex-m4", "mps2-an386", "smlad"), ("cortex-m3", "mps2-an385", None), ("cortex-m55", "mps3-an547", "vmlav")],
)
def test_int8_gemm_and_rounding_on_cortex_m(tmp_path, cpu, machine, dot):
    elf = tmp_path / "quant.elf"
    flags = [f"-mcpu={cpu}", "-mthumb", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-ffreestanding", "-nostdlib"]
    flags += ["-mfloat-abi=hard"] if cpu == "cortex-m55" else []  # Helium's registers are the FPU's
    subprocess.run(
        [CC, *flags, "-I", str(templates_dir() / "runtime"), "-T", str(HERE / "quant_cortex_m.ld")]
        + [str(HERE / "quant_cortex_m.c"), "-o", str(elf), "-lgcc"],
        check=True,
    )
    objdump = ["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)]  # decodes Helium too
    listing = subprocess.run(objdump, capture_output=True, text=True).stdout
    # the DSP path (Helium's on the M55) is the one compiled where the core has it, plain loops elsewhere
    assert dot in listing if dot else "smlad" not in listing
    run = subprocess.run(
        [QEMU, "-M", machine, "-nographic", "-semihosting", "-kernel", str(elf)], capture_output=True, timeout=60
    )
    assert run.returncode == 0, f"check {run.returncode} failed on {cpu} (see tests/c/quant_cortex_m.c)"


# -- whole int8 models on Cortex-M boards: bit for bit, weights read in place, CMSIS-NN's figures ----

ARM_TOOLS = ("arm-none-eabi-gcc", "arm-none-eabi-objdump", "arm-none-eabi-size", "qemu-system-arm")
needs_arm = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ARM_TOOLS),
    reason="needs gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm (the README's set-up installs them)",
)
# What each core's int8 products must be made of: SXTB16 + SMLAD with the DSP extension (M4, M7,
# M33), Helium's widening byte loads and VMLADAVA on the M55.
DOT_INSTRUCTIONS = {
    "cortex-m4": ("smlad", "sxtb16"),
    "cortex-m7": ("smlad", "sxtb16"),
    "cortex-m33": ("smlad", "sxtb16"),
    "cortex-m55": ("vmlava", "vldrb"),  # objdump names VMLADAVA (no exchange) VMLAVA
}
# The cortex-m33 kind has no emulator of its own: qemu's mps2-an505 runs it linked at that board's
# Secure aliases (tests/test_boards.py); the other kinds run on their default boards.
BOARD_MAPS = {
    "cortex-m33": "  flash_origin: 0x10000000\n  flash_kib: 4096\n  ram_origin: 0x38000000\n  ram_kib: 2048\n"
    "  toolchain:\n    emulator: [qemu-system-arm, -M, mps2-an505]\n"
}


def _lenet_int8(tmp_path: Path) -> Path:
    pytest.importorskip("onnxruntime.quantization")
    import onnx

    from hetgen.models import lenet5
    from hetgen.models.quantized import quantized

    path = tmp_path / "lenet5_int8.onnx"
    onnx.save(quantized(lenet5(seed=1), "QDQ"), path)
    return path


def _listing(out: Path) -> str:
    (program,) = json.loads((out / "hetgen.json").read_text())["board"]["programs"]
    return subprocess.run(
        ["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(out / program["path"])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@needs_arm
@pytest.mark.parametrize("kind", sorted(DOT_INSTRUCTIONS))
def test_int8_lenet_is_bit_exact_under_qemu_with_each_cores_dot_products(tmp_path, kind):
    import hetgen
    from hetgen.runtime.verify import verify

    platform = tmp_path / f"{kind}.yaml"
    platform.write_text(f"name: mcu\ntarget:\n  kind: {kind}\n  runtime: aot\n{BOARD_MAPS.get(kind, '')}")
    out = hetgen.compile(platform, _lenet_int8(tmp_path), out=tmp_path / "out", opt=("-O2",), werror=True)
    listing = _listing(out)
    for instruction in DOT_INSTRUCTIONS[kind]:
        assert re.search(rf"\b{re.escape(instruction)}", listing), f"no {instruction} on the {kind}"
    errors = verify(out, seed=7, emulate=True, steps=0)
    assert errors and all(e.ok and e.max_abs == 0 for e in errors), errors


@needs_arm
# hetgen measures 1.19 M and 1.10 M (benchmarks/bench_mcu_int8.py), CMSIS-NN 2.80 M and 2.18 M
@pytest.mark.parametrize(("opt", "most_instructions"), [("-Os", 1_450_000), ("-O3", 1_300_000)])
def test_int8_lenet_on_the_m4_within_cmsis_nn_instructions_and_ram(tmp_path, opt, most_instructions):
    """CMSIS-NN's int8 LeNet-5 on the same harness: 2.83 M instructions at -Os, 2.18 M at -O3, 10.8 KB
    of RAM (data + bss + the stack used); the RAM is also held to the activations' liveness bound."""
    import hetgen
    from hetgen.build.baremetal import image_sizes

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_mcu import instructions_per_run

    out = hetgen.compile(REPO / "platforms/mcu.yaml", _lenet_int8(tmp_path), out=tmp_path / "out", opt=(opt,))
    (program,) = json.loads((out / "hetgen.json").read_text())["board"]["programs"]
    sizes = image_sizes(out / program["path"])
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 1, 32, 32)).astype(np.float32)}
    instructions, report = instructions_per_run(out, feeds)
    ram = sizes.data + sizes.bss + report["stack"]
    assert instructions <= most_instructions, f"{instructions:.0f} instructions per run at {opt}"
    # 11 KB read as 11,000 bytes, the stricter reading (10,936 at -Os, 10,964 at -O3)
    assert ram <= 11_000, f"{ram} bytes of RAM ({sizes.data} data, {sizes.bss} bss, {report['stack']} stack)"


def _few_channel_cnn():
    """One layer for each Cortex-M unfolding (hetgen/ops/qlinear.py _mcu_offer): a 3x3 convolution
    with padding (the tap table inside, the checked rows at the border; 27 taps, a tail of 3), rows
    of 8 taps at stride 2 with asymmetric padding (SXTB16 rows in the dot product's order), a
    pointwise layer of 6 input channels (pairs of columns, a tail of 2), a depthwise 3x3 at stride 2
    (the band of widened rows), a fully connected layer (its input read in place: hg_qvec_*) and a
    MatMul with a constant B (B transposed at generate time, then the same dot products)."""
    from hetgen.models._builder import Builder

    b = Builder("few_channels", 17, 5)
    x = b.input("input", (1, 3, 12, 16))
    h = b.op("Conv", [x, b.weight((8, 3, 3, 3), "c1_w"), b.bias(8, "c1_b")], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    h = b.op("Relu", [h])
    h = b.op(
        "Conv",
        [h, b.weight((6, 8, 2, 8), "c2_w"), b.bias(6, "c2_b")],
        kernel_shape=[2, 8],
        strides=[1, 2],
        pads=[1, 3, 0, 4],
    )
    h = b.op("Relu", [h])
    h = b.op("Conv", [h, b.weight((8, 6, 1, 1), "c3_w"), b.bias(8, "c3_b")], kernel_shape=[1, 1])
    h = b.op(
        "Conv",
        [h, b.weight((8, 1, 3, 3), "c4_w"), b.bias(8, "c4_b")],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        group=8,
    )
    h = b.op("Flatten", [b.op("Relu", [h])])
    h = b.gemm(h, 8 * 6 * 4, 10)
    b.output(b.op("MatMul", [h, b.weight((10, 6), "m_w")]), (1, 6))
    return b.model()


@needs_arm
@pytest.mark.parametrize("kind", ["cortex-m4", "cortex-m55"])
def test_int8_few_channel_paths_bit_exact_and_float_helium_tails(tmp_path, kind):
    """Each Cortex-M int8 unfolding (rows by SXTB16, the tap table, pointwise pairs, the depthwise
    band) bit for bit with onnxruntime on the M4 (SMLAD) and the M55 (Helium); the float build of
    the same layers (depths of 27 and 6: Helium's predicated tails) within float tolerance."""
    pytest.importorskip("onnxruntime.quantization")
    import onnx

    import hetgen
    from hetgen.models.quantized import quantized
    from hetgen.runtime.verify import verify

    platform = tmp_path / f"{kind}.yaml"
    platform.write_text(f"name: mcu\ntarget: {{kind: {kind}, runtime: aot}}\n")
    model = _few_channel_cnn()
    for precision, graph in (("int8", quantized(model, "QDQ")), ("fp32", model)):
        path = tmp_path / f"{precision}.onnx"
        onnx.save(graph, path)
        out = hetgen.compile(platform, path, out=tmp_path / precision, opt=("-O2",), werror=True)
        if precision == "int8":
            kernels = "".join(p.read_text() for p in (out / "mcu" / "kernels").glob("*.c"))
            for marker in (
                "hg_q15_widen_s8(d, src + iw0",
                "corner[taps[p]]",
                "_pair(xg, j, col",
                "int16_t *band",
                "hg_requantize(",
                "hg_qvec_s8_s8_2x1(wg",
                "hg_qvec_s8_s8_2x1(bt",
            ):
                assert marker in kernels, f"no {marker!r}: that Cortex-M path was not taken"
        errors = verify(out, seed=11, emulate=True, steps=0)
        assert errors and all(e.ok for e in errors), errors
        if precision == "int8":
            assert all(e.max_abs == 0 for e in errors), errors
