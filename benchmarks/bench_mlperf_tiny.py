"""MLPerf Tiny's four reference networks on three Cortex-M boards: instructions per inference, code,
weights and RAM, each checked against onnxruntime under emulation.

    python benchmarks/bench_mlperf_tiny.py [--models ds_cnn_int8 ...] [--boards mcu mcu-m7 mcu-m55]
                                           [--float] [--opt -O3] [--json]

The models are hetgen/models/mlperf_tiny.py's (the published layer lists, seeded weights; int8 by
onnxruntime's quantize_static, QDQ, per-channel), the same as examples/*.onnx. `--float` adds the
float32 versions (those whose weights do not fit a board are reported as refused). The boards:

- platforms/mcu.yaml: Cortex-M4F, `qemu-system-arm -M mps2-an386`, SysTick at 25 MHz;
- platforms/mcu-m7.yaml: Cortex-M7, `-M mps2-an500`, SysTick at 25 MHz;
- platforms/mcu-m55.yaml: Cortex-M55 with Helium, `-M mps3-an547`, SysTick at 32 MHz (the TCMs:
  512 KiB of code and weights, 512 KiB of RAM).

For each model and board:

- the ELF's text / data / bss (binutils' `size`), the weights it holds (const, in flash: part of
  text), its code and other constants (text - weights), the arena, the peak RAM (data + bss + the
  reserved stack) and the stack it really used;
- instructions per inference under `qemu-system-arm -icount shift=0` (one instruction per
  nanosecond of virtual time), from SysTick's ticks around the runs: a process doing 3 runs less
  one doing 1, halved, so start-up and I/O cancel (as benchmarks/bench_mcu.py counts them; the
  SysTick clocks are checked by tests/test_mlperf_tiny.py with a loop of known length). These are
  EMULATED instruction counts, not cycles: qemu models no pipeline or memory wait states, and a
  Helium instruction counts as one however many lanes it has;
- the check: `hetgen verify --emulate` (hetgen.runtime.verify with emulate=True, two seeded
  inputs) against onnxruntime with every optimisation off, the largest difference printed (for
  the int8 models also in steps of the output's quantization).

The published Cortex-M4 yardsticks (MLPerf Tiny results at 120 MHz, PUBLISHED, NOT measured here)
are printed beside the M4 rows: keyword spotting 43.2 ms (5.2 M cycles, X-CUBE-AI) and 181.9 ms
(TFLM with CMSIS-NN), visual wake words 88.9 ms and 600.6 ms; hetgen's column beside them is its
instruction count as cycles at one instruction per cycle at 120 MHz, a lower bound on its time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

import hetgen
from hetgen.build.baremetal import image_sizes
from hetgen.errors import HetgenError
from hetgen.models.mlperf_tiny import PUBLISHED_M4_MS
from hetgen.models.suite import MLPERF_TINY_MODELS
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.verify import dequantized_outputs, verify

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_mcu import instructions_per_run  # noqa: E402  (one instruction counter for the boards)

BOARDS = {"mcu": "cortex-m4", "mcu-m7": "cortex-m7", "mcu-m55": "cortex-m55"}
PUBLISHED_MHZ = 120  # the clock of the published Cortex-M4 results


def measure(name: str, board: str, opt: str, folder: Path) -> dict:
    proto = MLPERF_TINY_MODELS[name]()
    row = {"model": name, "board": board, "kind": BOARDS[board], "opt": opt}
    try:
        out = hetgen.compile(REPO / f"platforms/{board}.yaml", proto, out=folder / f"{name}-{board}{opt}", opt=(opt,))
    except HetgenError as error:  # a model that does not fit the board's memory is refused before the build
        return {**row, "refused": str(error).split(": ", 2)[-1].split(". ")[0]}
    manifest = json.loads((out / "hetgen.json").read_text())
    (program,) = manifest["board"]["programs"]
    sizes = image_sizes(out / program["path"])
    weights = sum(target["weights_bytes"] for target in manifest["targets"])
    model = EmulatedModel(out)
    rng = np.random.default_rng(0)
    feeds = {info.name: rng.standard_normal(info.shape).astype(info.dtype) for info in model.inputs}
    instructions, report = instructions_per_run(out, feeds)
    # int8: the dequantized output in steps, bit for bit; float32: verify's rtol/atol
    (error,) = verify(out, seed=0, emulate=True, steps=0)
    quantum = dequantized_outputs(proto).get(proto.graph.output[0].name)
    return {
        **row,
        "text": sizes.text,
        "data": sizes.data,
        "bss": sizes.bss,
        "weights": weights,
        "code_and_constants": sizes.text - weights,
        "arena": manifest["targets"][0]["arena_size"],
        "peak_ram": sizes.peak_ram,
        "stack_used": report["stack"],
        "instructions": round(instructions),
        "cost_model_ms": round(sum(target["estimated_us"] for target in manifest["targets"]) / 1e3, 2),
        "max_abs_error": error.max_abs * quantum.scale if quantum else error.max_abs,
        "error_steps": round(error.max_abs, 3) if quantum else None,
        "matches": error.ok,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    int8 = [name for name in MLPERF_TINY_MODELS if name.endswith("_int8")]
    parser.add_argument("--models", nargs="+", default=int8, choices=sorted(MLPERF_TINY_MODELS))
    parser.add_argument("--boards", nargs="+", default=list(BOARDS), choices=list(BOARDS))
    parser.add_argument("--float", action="store_true", help="also the float32 models")
    parser.add_argument("--opt", default="-O3")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = list(args.models)
    if args.float:
        names += [name.removesuffix("_int8") for name in names if name.endswith("_int8")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-mlperf-tiny-") as tmp:
        for name in names:
            for board in args.boards:
                rows.append(measure(name, board, args.opt, Path(tmp)))
                print(f"measured {name} on {board}", file=sys.stderr)
    if args.json:
        print(json.dumps({"rows": rows, "published_m4_120mhz_ms": PUBLISHED_M4_MS}, indent=2))
        return 0
    print(f"hetgen, {args.opt}: EMULATED instructions per inference (qemu-system-arm -icount), not cycles")
    print(
        f"{'model':22} {'board':8} {'kind':10} {'text':>7} {'weights':>7} {'code':>6} {'data+bss':>8} {'arena':>7} "
        f"{'peak RAM':>8} {'stack':>5} {'instr/inf':>11} {'check vs onnxruntime':>22}"
    )
    for r in rows:
        if "refused" in r:
            print(f"{r['model']:22} {r['board']:8} {r['kind']:10} refused: {r['refused']}")
            continue
        if r["error_steps"] is not None:
            check = "bit-exact" if r["max_abs_error"] == 0 else f"{r['error_steps']:g} step(s) off"
        else:
            check = f"max abs {r['max_abs_error']:.2g} " + ("ok" if r["matches"] else "MISMATCH")
        print(
            f"{r['model']:22} {r['board']:8} {r['kind']:10} {r['text']:7} {r['weights']:7} "
            f"{r['code_and_constants']:6} {r['data'] + r['bss']:8} {r['arena']:7} {r['peak_ram']:8} "
            f"{r['stack_used']:5} {r['instructions']:11,} {check:>22}"
        )
    print(f"\nPUBLISHED Cortex-M4 results at {PUBLISHED_MHZ} MHz (MLPerf Tiny; not measured here) beside hetgen's M4")
    print("instruction count read as cycles at one instruction per cycle (a lower bound on hetgen's time):")
    for model, published in PUBLISHED_M4_MS.items():
        for r in rows:
            if r["model"] == f"{model}_int8" and r["board"] == "mcu" and "instructions" in r:
                ours = r["instructions"] / (PUBLISHED_MHZ * 1e3)
                yardsticks = ", ".join(
                    f"{who} {ms} ms ({ms * PUBLISHED_MHZ / 1e3:.1f} M cycles)" for who, ms in published.items()
                )
                print(
                    f"  {model:18} published: {yardsticks}; hetgen: {r['instructions'] / 1e6:.2f} M instructions "
                    f"= {ours:.1f} ms at {PUBLISHED_MHZ} MHz if one per cycle"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
