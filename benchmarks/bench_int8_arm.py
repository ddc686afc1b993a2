"""int8 beside float32 on aarch64: emulated instructions per inference of the board build, for a core
with the dot-product extension (the cortex-a55 kind: -mcpu=cortex-a55, SDOT) and the plain aarch64
kind (portable NEON), each model quantized as bench_int8.py does it (QDQ, int8 activations,
per-channel int8 weights: onnxruntime's quantize_static).

    python benchmarks/bench_int8_arm.py [--models resnet,mobilenet_v2] [--size 64] [--symbols N]

Instructions are counted by qemu-aarch64 itself (-cpu max -singlestep -d exec,nochain: one log line
per executed instruction, as benchmarks/bench_vector_isa.py counts riscv64), one run's worth: a
process doing 2 runs less one doing 1, so start-up and I/O cancel. Each int8 build is also checked
against onnxruntime under emulation (hetgen verify --emulate's comparison: the dequantized int8
output in steps of its scale; within one step matches, verify's default), and the int8 SDOT program is
disassembled to count its `sdot` instructions. `--symbols N` also prints each build's N functions
that ran the most instructions (qemu names the symbol of every executed address). These are EMULATED instruction counts, not time: a
vector instruction counts as one however many lanes it has.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx

import hetgen
from hetgen.models import cnn, lenet, tiny
from hetgen.models.quantized import quantized
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.reference import ort_session
from hetgen.runtime.verify import compare, dequantized_outputs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODELS = {
    "resnet_tiny": lambda size: onnx.load(str(EXAMPLES / "resnet_tiny.onnx")),
    "ds_cnn": lambda size: onnx.load(str(EXAMPLES / "ds_cnn.onnx")),
    "resnet8": lambda size: onnx.load(str(EXAMPLES / "resnet8.onnx")),
    "lenet5": lambda size: lenet.lenet5(),
    "tiny_cnn": lambda size: tiny.tiny_cnn(size=size // 2),
    "resnet": lambda size: cnn.resnet(size=size),
    "mobilenet_v2": lambda size: cnn.mobilenet_v2(size=size),
    "squeezenet": lambda size: cnn.squeezenet(size=size),
}
KINDS = {"a55 sdot": "cortex-a55", "aarch64 neon": "aarch64"}


def program(out: Path) -> Path:
    return out / json.loads((out / "hetgen.json").read_text())["board"]["programs"][0]["path"]


def instructions(out: Path, inputs: Path) -> collections.Counter:
    """Instructions of one run under qemu-aarch64 -cpu max by function, counted from its execution
    log (each line ends with the symbol qemu finds for the instruction's address)."""
    counts = []
    for runs in (1, 2):
        command = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-cpu", "max", "-singlestep"]
        command += [
            "-d",
            "exec,nochain",
            "-D",
            "/dev/stderr",
            str(program(out)),
            str(inputs),
            f"{inputs}.out",
            str(runs),
        ]
        with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as process:
            symbols = (line.rsplit("]", 1)[-1].strip() for line in process.stderr if line.startswith("Trace"))
            counts.append(collections.Counter(symbol or "?" for symbol in symbols))
        if process.returncode:
            raise SystemExit(f"{program(out)} failed under qemu-aarch64")
    counts[1].subtract(counts[0])
    return +counts[1]  # the second run's instructions; start-up and I/O cancel


def by_symbol(label: str, counts: collections.Counter, most: int) -> str:
    """The `most` functions that ran the most instructions, one line each."""
    lines = [f"    {label}: {count:10,} {symbol}" for symbol, count in counts.most_common(most)]
    return "\n".join(lines)


def sdot_count(out: Path) -> int:
    listing = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", str(program(out))], capture_output=True, text=True, check=True
    ).stdout
    return sum(1 for line in listing.splitlines() if "\tsdot\t" in line)


def steps_off(out: Path, model: onnx.ModelProto, feeds: dict) -> float:
    """The board program's largest difference from onnxruntime under emulation, as `hetgen verify`
    measures it: in quantization steps of the outputs a DequantizeLinear makes (the QDQ model's)."""
    got = EmulatedModel(out).run(feeds)
    expected = ort_session(model.SerializeToString()).run(None, feeds)
    quanta = dequantized_outputs(model)
    names = [o.name for o in model.graph.output]
    errors = [compare(n, got[n], np.asarray(e), 1e-4, 1e-5, 1, quanta.get(n)) for n, e in zip(names, expected)]
    if not all(error.in_steps for error in errors):
        raise SystemExit(f"{out}: an output that is not a dequantized int8 tensor")
    return max(error.max_abs for error in errors)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--size", type=int, default=64, help="the image's side (default 64)")
    parser.add_argument("--symbols", type=int, default=0, metavar="N", help="also each build's N busiest functions")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    print(
        f"{'model':16} {'kind':13} {'f32 insns':>12} {'i8 insns':>12} {'i8/f32':>7} {'sdot':>6}  "
        "i8 vs ort (steps; matches: within 1, verify's default)"
    )
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-int8-arm-") as tmp:
        tmp = Path(tmp)
        platforms = {}
        for label, kind in KINDS.items():
            platforms[label] = tmp / f"{kind}.yaml"
            platforms[label].write_text(f"name: {kind.replace('-', '_')}\ntarget: {kind}\n")
        for name in args.models.split(","):
            float_model = MODELS[name](args.size)
            int8_model = quantized(float_model, "QDQ", per_channel=True)
            info = float_model.graph.input[0]
            shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
            feeds = {info.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
            inputs = tmp / f"{name}.bin"
            inputs.write_bytes(feeds[info.name].tobytes())
            for label, platform in platforms.items():
                f32 = hetgen.compile(platform, float_model, out=tmp / f"{name}_{label}_f32".replace(" ", "_"))
                i8 = hetgen.compile(platform, int8_model, out=tmp / f"{name}_{label}_i8".replace(" ", "_"))
                by_f32, by_i8 = instructions(f32, inputs), instructions(i8, inputs)
                n_f32, n_i8 = by_f32.total(), by_i8.total()
                off = steps_off(i8, int8_model, feeds)
                print(
                    f"{name:16} {label:13} {n_f32:12,} {n_i8:12,} {n_i8 / n_f32:7.3f} {sdot_count(i8):6}  "
                    f"{off:g} {'matches' if off <= 1 else 'MISMATCH'}",
                    flush=True,
                )
                if args.symbols:
                    print(by_symbol("f32", by_f32, args.symbols), by_symbol("i8 ", by_i8, args.symbols), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
