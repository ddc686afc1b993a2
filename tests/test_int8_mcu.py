"""The int8 arithmetic on Cortex-M, under qemu-system-arm: with the DSP extension (Cortex-M4) the
integer GEMM uses SMLAD, two 16-bit multiply-accumulates per instruction; without it (Cortex-M3)
the plain loop. Both must give the reference sums and MLAS's rounding (tests/c/quant_cortex_m.c).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hetgen.templates_dir import templates_dir

pytestmark = pytest.mark.external  # every test here builds for Cortex-M and runs it under qemu-system-arm

HERE = Path(__file__).parent / "c"
CC, QEMU = "arm-none-eabi-gcc", "qemu-system-arm"


@pytest.mark.skipif(not (shutil.which(CC) and shutil.which(QEMU)), reason=f"needs {CC} and {QEMU}")
@pytest.mark.parametrize(
    ("cpu", "machine", "dsp"), [("cortex-m4", "mps2-an386", True), ("cortex-m3", "mps2-an385", False)]
)
def test_int8_gemm_and_rounding_on_cortex_m(tmp_path, cpu, machine, dsp):
    elf = tmp_path / "quant.elf"
    flags = [f"-mcpu={cpu}", "-mthumb", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-ffreestanding", "-nostdlib"]
    subprocess.run(
        [CC, *flags, "-I", str(templates_dir() / "runtime"), "-T", str(HERE / "quant_cortex_m.ld")]
        + [str(HERE / "quant_cortex_m.c"), "-o", str(elf), "-lgcc"],
        check=True,
    )
    listing = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True).stdout
    assert ("smlad" in listing) == dsp  # the DSP path is the one compiled where the core has it
    run = subprocess.run(
        [QEMU, "-M", machine, "-nographic", "-semihosting", "-kernel", str(elf)], capture_output=True, timeout=60
    )
    assert run.returncode == 0, f"check {run.returncode} failed on {cpu} (see tests/c/quant_cortex_m.c)"
