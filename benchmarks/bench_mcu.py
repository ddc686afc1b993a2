"""Bare-metal image sizes and run time under emulation, for the shipped models on the Cortex-M4 board.

    python benchmarks/bench_mcu.py [--opt -O3 -Os] [--json]

For each model on platforms/mcu.yaml (the MPS2-AN386 under qemu-system-arm; resnet_tiny also on
platforms/mcu-npu.yaml, the same core driving a simulated NPU) and each optimisation level:

- the ELF's text / data / bss (as binutils' `size` counts them; the stack apart), the weights it
  holds (const, in flash: part of text) and so its code and other constants (text - weights), and
  its peak RAM (data + bss + the reserved stack; the arena is in bss) and the stack it really used;
- instructions per run: the ELF runs under `qemu-system-arm -icount shift=0`, where the emulated
  core executes one instruction per nanosecond of virtual time, and reads SysTick (the board's
  25 MHz clock) around its runs, so instructions = ticks * 40. It is deterministic; the difference
  between a process doing 3 runs and one doing 1 removes start-up and I/O. qemu counts instructions,
  not cycles: a Cortex-M4 at 25 MHz takes more cycles than instructions (loads, FPU latencies), so
  `ms@25MHz` (instructions / 25e6) is a lower bound on the board's time, set beside the cost model's
  estimate for the same platform.
- with `--reference`, an onnx2c-style single C file for the same model (benchmarks/mcu_reference.py:
  one function per layer with its shapes baked in, weights as const arrays, one static buffer per
  tensor), checked against onnxruntime on this machine, cross-compiled with the same flags and
  linked with the same board support: its code size and RAM beside hetgen's.
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
from hetgen.build.baremetal import image_sizes
from hetgen.models import mlp, tiny_cnn
from hetgen.runtime.emulate import EmulatedModel, board_report, semihosting_command

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
# Each qemu board's system clock, which SysTick counts (tests/test_mlperf_tiny.py checks the M7's and
# M55's); with -icount shift=0 one instruction takes one ns, so a tick is 1e9 / hz instructions.
SYSTICK_HZ = {"mps2-an385": 25_000_000, "mps2-an386": 25_000_000, "mps2-an500": 25_000_000, "mps3-an547": 32_000_000}

MODELS = {
    "resnet_tiny": lambda: REPO / "examples/resnet_tiny.onnx",
    "transformer_tiny": lambda: REPO / "examples/transformer_tiny.onnx",
    "mlp": lambda: mlp(seed=3),
    "tiny_cnn": lambda: tiny_cnn(seed=2),
}
CASES = [(name, "mcu") for name in MODELS] + [("resnet_tiny", "mcu-npu")]


def instructions_per_run(out: Path, feeds: dict) -> tuple[float, dict]:
    """Instructions of one run (3 runs less 1 run, under -icount shift=0), and the 1-run report."""
    model = EmulatedModel(out)
    *emulator, elf = model.command
    board = emulator[emulator.index("-M") + 1]
    counted = (*emulator, "-icount", "shift=0", elf)
    with tempfile.TemporaryDirectory() as folder:
        inputs = Path(folder) / "in.bin"
        inputs.write_bytes(model._input_bytes(feeds))
        reports = []
        for runs in (1, 3):
            command = semihosting_command(counted, model.program["name"], [str(inputs), f"{folder}/o.bin", str(runs)])
            result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
            reports.append(board_report(result.stdout))
    ticks = (reports[1]["ticks"] - reports[0]["ticks"]) / 2
    return ticks * 1e9 / SYSTICK_HZ[board], reports[0]


def measure(name: str, platform: str, opt: str, folder: Path) -> dict:
    out = hetgen.compile(
        REPO / f"platforms/{platform}.yaml", MODELS[name](), out=folder / f"{name}-{platform}{opt}", opt=(opt,)
    )
    manifest = json.loads((out / "hetgen.json").read_text())
    (program,) = manifest["board"]["programs"]
    sizes = image_sizes(out / program["path"])
    weights = sum(target["weights_bytes"] for target in manifest["targets"])
    model = EmulatedModel(out)
    rng = np.random.default_rng(0)
    feeds = {info.name: rng.standard_normal(info.shape).astype(info.dtype) for info in model.inputs}
    instructions, report = instructions_per_run(out, feeds)
    estimate_us = sum(target["estimated_us"] for target in manifest["targets"])
    return {
        "model": name,
        "platform": platform,
        "opt": opt,
        "text": sizes.text,
        "data": sizes.data,
        "bss": sizes.bss,
        "weights": weights,
        "code_and_constants": sizes.text - weights,
        "arena": manifest["targets"][0]["arena_size"],
        "peak_ram": sizes.peak_ram,
        "stack_used": report["stack"],
        "instructions": round(instructions),
        "ms_at_25mhz_one_per_cycle": round(instructions / SYSTICK_HZ["mps2-an386"] * 1e3, 2),
        "cost_model_ms": round(estimate_us / 1e3, 2),
        "npu_invocations": sum(device["invocations"] for device in report.get("devices", [])),
    }


def reference_row(name: str, opt: str, folder: Path) -> dict | None:
    from mcu_reference import build_reference

    return build_reference(name, MODELS[name](), opt, folder / f"ref-{name}{opt}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opt", nargs="+", default=["-O3", "-Os"])
    parser.add_argument("--models", nargs="+", default=sorted(MODELS))
    parser.add_argument("--reference", action="store_true", help="also build the onnx2c-style reference")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, references = [], []
    with tempfile.TemporaryDirectory(prefix="bench-mcu-") as tmp:
        folder = Path(tmp)
        for opt in args.opt:
            for name, platform in CASES:
                if name in args.models:
                    rows.append(measure(name, platform, opt, folder))
                    if args.reference and platform == "mcu":
                        reference = reference_row(name, opt, folder)
                        if reference is not None:
                            references.append(reference)
    if args.json:
        print(json.dumps({"hetgen": rows, "reference": references}, indent=2))
        return 0
    header = (
        f"{'model':17} {'platform':8} {'opt':4} {'text':>8} {'data':>5} {'bss':>8} {'weights':>8} {'code':>7} "
        f"{'peak RAM':>9} {'stack':>6} {'instr/run':>11} {'ms@25MHz':>9} {'model ms':>9}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['model']:17} {r['platform']:8} {r['opt']:4} {r['text']:8} {r['data']:5} {r['bss']:8} {r['weights']:8} "
            f"{r['code_and_constants']:7} {r['peak_ram']:9} {r['stack_used']:6} {r['instructions']:11} "
            f"{r['ms_at_25mhz_one_per_cycle']:9} {r['cost_model_ms']:9}"
        )
    if references:
        print("\nonnx2c-style reference (benchmarks/mcu_reference.py), same flags and board support:")
        print(
            f"{'model':17} {'opt':4} {'text':>8} {'bss':>8} {'weights':>8} {'code':>7} {'peak RAM':>9} {'instr/run':>11}"
        )
        for r in references:
            print(
                f"{r['model']:17} {r['opt']:4} {r['text']:8} {r['bss']:8} {r['weights']:8} {r['code_and_constants']:7} "
                f"{r['peak_ram']:9} {r['instructions']:11}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
