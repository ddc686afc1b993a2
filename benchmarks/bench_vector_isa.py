"""Emulated instructions per inference with and without each cross target's vector unit.

    python benchmarks/bench_vector_isa.py [--size 16] [--opt -O3]

A small ResNet (hetgen.models.resnet, widths 16 and 32) is built for:

- a riscv64 core with `vector: none` (rv64gc, portable C kernels) and with `vector: rvv` (RVV 1.0
  kernels), run under qemu-riscv64 at VLEN 128 and 256. Instructions are counted by qemu itself:
  `-singlestep -d exec,nochain` logs one line per executed instruction.
- a Cortex-M55 with Helium (the kind's own -mcpu=cortex-m55) and the same core with Helium's
  floating point switched off (-mcpu=cortex-m55+nomve.fp: the portable C kernels), and the Cortex-M4,
  under qemu-system-arm `-icount shift=0` (one instruction per nanosecond of virtual time), reading
  SysTick around the runs: instructions = ticks * 1e9 / the board's SysTick clock (MPS2-AN386:
  25 MHz, MPS3-AN547: 32 MHz; both checked with a loop of known length, as
  tests/test_baremetal.py does for the AN386).

Each count is one run's: a process doing 3 runs less one doing 1, halved, so start-up and I/O
cancel. These are EMULATED instruction counts, not time: a vector instruction counts as one however
many lanes it has, and qemu models no pipeline, so they say how much work the kernels issue, not how
fast a board runs it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import hetgen
from hetgen.models import resnet
from hetgen.runtime.emulate import EmulatedModel, board_report, semihosting_command

CORTEX_M55_PORTABLE = "[-mthumb, -mcpu=cortex-m55+nomve.fp, -mfloat-abi=hard, -ffunction-sections, -fdata-sections]"
RISCV = {"riscv64 rv64gc": ("none", None), "riscv64 rvv VLEN=128": ("rvv", 128), "riscv64 rvv VLEN=256": ("rvv", 256)}
CORTEX_M = {
    "cortex-m55 helium": "{kind: cortex-m55, runtime: aot}",
    "cortex-m55 portable": f"{{kind: cortex-m55, runtime: aot, toolchain: {{cflags: {CORTEX_M55_PORTABLE}}}}}",
    "cortex-m4": "{kind: cortex-m4, runtime: aot}",
}
SYSTICK_HZ = {"mps2-an386": 25_000_000, "mps3-an547": 32_000_000}  # the clock SysTick counts, per qemu board


def riscv_instructions(out: Path, inputs: Path, vlen: int | None) -> int:
    """Instructions of one run under qemu-riscv64, counted from its execution log."""
    program = out / json.loads((out / "hetgen.json").read_text())["board"]["programs"][0]["path"]
    cpu = ["-cpu", f"rv64,v=true,vext_spec=v1.0,vlen={vlen},elen=64"] if vlen else []
    counts = []
    for runs in (1, 3):
        command = ["qemu-riscv64", *cpu, "-singlestep", "-d", "exec,nochain", "-D", "/dev/stderr"]
        command += [str(program), str(inputs), str(inputs.with_suffix(".out")), str(runs)]
        with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as process:
            counts.append(sum(1 for line in process.stderr if line.startswith("Trace")))
        if process.returncode:
            raise SystemExit(f"{program} failed under {' '.join(command[:3])}")
    return (counts[1] - counts[0]) // 2


def cortex_m_instructions(out: Path, inputs: Path) -> int:
    """Instructions of one run under qemu-system-arm -icount shift=0, from SysTick's ticks."""
    model = EmulatedModel(out)
    *emulator, elf = model.command
    board = emulator[emulator.index("-M") + 1]
    counted = (*emulator, "-icount", "shift=0", elf)
    ticks = []
    for runs in (1, 3):
        command = semihosting_command(counted, model.program["name"], [str(inputs), f"{inputs}.out", str(runs)])
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
        ticks.append(board_report(result.stdout)["ticks"])
    return round((ticks[1] - ticks[0]) / 2 * 1e9 / SYSTICK_HZ[board])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=16, help="the image's side (default 16)")
    parser.add_argument("--opt", default="-O3", help="the board build's optimisation (default -O3)")
    args = parser.parse_args()
    model = resnet(widths=(16, 32), size=args.size, seed=1)
    image = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="hg_bench_isa_") as folder:
        tmp = Path(folder)
        inputs = tmp / "in.bin"
        inputs.write_bytes(image.tobytes())
        rows = []
        for name, (vector, vlen) in RISCV.items():
            platform = tmp / f"rv_{vector}.yaml"
            platform.write_text(f"name: rv_{vector}\ntarget: {{kind: riscv64, runtime: graph, vector: {vector}}}\n")
            out = tmp / f"rv_{vector}"
            if not out.exists():
                hetgen.compile(platform, model, out=out, opt=(args.opt,), native_tuning=False)
            rows.append((name, riscv_instructions(out, inputs, vlen)))
        for index, (name, target) in enumerate(CORTEX_M.items()):
            platform = tmp / f"mcu{index}.yaml"
            platform.write_text(f"name: mcu\ntarget: {target}\n")
            out = hetgen.compile(platform, model, out=tmp / f"mcu{index}", opt=(args.opt,), native_tuning=False)
            rows.append((name, cortex_m_instructions(out, inputs)))
    print(f"resnet widths (16, 32), 1x3x{args.size}x{args.size}, {args.opt}; EMULATED counts per inference")
    for name, count in rows:
        print(f"  {name:24} {count:>12,} instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
