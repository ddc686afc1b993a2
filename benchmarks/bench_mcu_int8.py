"""int8 beside fp32 on the Cortex-M boards (platforms/mcu.yaml, the M4 on MPS2-AN386 under
qemu-system-arm, the default; mcu-m7.yaml, mcu-m55.yaml with --boards).

    python benchmarks/bench_mcu_int8.py [--opt -Os -O3] [--models lenet5 kws_cnn ...] [--boards mcu mcu-m7 mcu-m55] [--json]

For each model, its float32 build and its int8 build (onnxruntime's `quantize_static`, QDQ, int8
activations and weights: hetgen/models/quantized.py), at each optimisation level: instructions per
inference (qemu `-icount shift=0`, 3 runs less 1, deterministic: benchmarks/bench_mcu.py), code
(text less weights), weights (flash), and RAM as CMSIS-NN's figures count it: data + bss + the stack
really used (bss holds the arena, the example's input/output buffers and the semihosting command
line). Every build runs under emulation against onnxruntime; the int8 build's largest difference is
printed (0: bit for bit).

Models: LeNet-5 (hetgen/models/lenet.py: the CMSIS-NN comparison: 2.83 M instructions at -Os,
2.18 M at -O3, 10.8 KB of RAM), a keyword-spotting CNN in the shape of TensorFlow Lite Micro's
micro_speech (49 x 40 spectrogram, conv 10x8 stride 2 of 8 filters, 4 classes; defined here),
tiny_cnn, and the DS-CNN keyword spotter of MLPerf Tiny where hetgen/models/mlperf_tiny.py provides it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_mcu  # noqa: E402

from hetgen.models import lenet5, tiny_cnn  # noqa: E402
from hetgen.models._builder import Builder  # noqa: E402
from hetgen.runtime.verify import verify  # noqa: E402


def kws_cnn(seed: int = 0) -> onnx.ModelProto:
    """micro_speech's tiny_conv: [1, 1, 49, 40] -> conv 10x8 stride 2 (8) -> Relu -> FC 4."""
    b = Builder("kws_cnn", 17, seed)
    x = b.input("input", (1, 1, 49, 40))
    w = b.weight((8, 1, 10, 8), "conv_w")
    h = b.op("Conv", [x, w, b.bias(8, "conv_b")], kernel_shape=[10, 8], strides=[2, 2], pads=[4, 3, 5, 4])
    h = b.op("Flatten", [b.op("Relu", [h])])
    b.output(b.gemm(h, 8 * 25 * 20, 4), (1, 4))
    return b.model()


def _models() -> dict:
    models = {"lenet5": lambda: lenet5(seed=1), "kws_cnn": kws_cnn, "tiny_cnn": lambda: tiny_cnn(seed=2)}
    try:
        from hetgen.models import mlperf_tiny
    except ImportError:
        return models
    models["ds_cnn"] = mlperf_tiny.ds_cnn
    return models


def row(name: str, precision: str, opt: str, model: onnx.ModelProto, folder: Path, board: str = "mcu") -> dict:
    path = folder / f"{name}-{precision}.onnx"
    onnx.save(model, path)
    bench_mcu.MODELS[f"{name}-{precision}"] = lambda: path
    measured = bench_mcu.measure(f"{name}-{precision}", board, opt, folder)
    out = folder / f"{name}-{precision}-{board}{opt}"
    errors = verify(out, seed=3, emulate=True, steps=0)
    if not errors:
        raise SystemExit(f"{name} {precision} {opt}: no outputs compared")
    return {
        "model": name,
        "board": board,
        "precision": precision,
        "opt": opt,
        "instructions": measured["instructions"],
        "code": measured["code_and_constants"],
        "weights": measured["weights"],
        "ram": measured["data"] + measured["bss"] + measured["stack_used"],
        "arena": measured["arena"],
        "stack": measured["stack_used"],
        "max_abs_vs_onnxruntime": max(e.max_abs for e in errors),
    }


def main() -> int:
    from hetgen.models.quantized import quantized

    models = _models()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opt", nargs="+", default=["-Os", "-O3"])
    parser.add_argument("--models", nargs="+", default=list(models), choices=list(models))
    parser.add_argument("--boards", nargs="+", default=["mcu"], choices=["mcu", "mcu-m7", "mcu-m55"])
    parser.add_argument(
        "--cmsis-nn", type=Path, metavar="PATH", help="CMSIS-NN's source tree: also its LeNet-5 (cmsis_nn_lenet.py)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, peers = [], []
    with tempfile.TemporaryDirectory(prefix="bench-mcu-int8-") as tmp:
        for name in args.models:
            float_model = models[name]()
            int8_model = quantized(float_model, "QDQ")
            for board in args.boards:
                for opt in args.opt:
                    for precision, model in (("fp32", float_model), ("int8", int8_model)):
                        rows.append(row(name, precision, opt, model, Path(tmp), board))
                    if name == "lenet5" and args.cmsis_nn:
                        peers.append(cmsis_row(int8_model, opt, Path(tmp), board, args.cmsis_nn))
    if args.json:
        print(json.dumps({"rows": rows, "cmsis_nn": peers}, indent=2))
        return 0
    print(
        f"{'model':9} {'board':7} {'opt':4} {'fp32 instr':>11} {'int8 instr':>11} {'ratio':>6} {'fp32 code':>9} {'int8 code':>9} "
        f"{'fp32 wts':>9} {'int8 wts':>9} {'fp32 RAM':>9} {'int8 RAM':>9} {'i8 vs ort':>9}"
    )
    by_key = {(r["model"], r["board"], r["opt"], r["precision"]): r for r in rows}
    for name in args.models:
        for board, opt in itertools.product(args.boards, args.opt):
            f, q = by_key[(name, board, opt, "fp32")], by_key[(name, board, opt, "int8")]
            print(
                f"{name:9} {board:7} {opt:4} {f['instructions']:11} {q['instructions']:11} "
                f"{q['instructions'] / f['instructions']:6.2f} {f['code']:9} {q['code']:9} {f['weights']:9} "
                f"{q['weights']:9} {f['ram']:9} {q['ram']:9} {q['max_abs_vs_onnxruntime']:9.3g}"
            )
    print(
        "\nRAM = data + bss + stack used (bytes); instr = instructions per inference under qemu -icount; "
        "i8 vs ort: the int8 build's largest difference from onnxruntime under emulation (its outputs are "
        "dequantized floats; 0: bit for bit)"
    )
    if peers:
        print("\nint8 LeNet-5, hetgen beside CMSIS-NN (the same model and harness: benchmarks/cmsis_nn_lenet.py)")
        print(
            f"{'board':7} {'opt':4} {'hetgen instr':>12} {'CMSIS-NN':>10} {'ratio':>6} {'hetgen RAM':>10} {'CMSIS RAM':>9} "
            f"{'hetgen code':>11} {'CMSIS code':>10} {'CMSIS vs ort':>12}"
        )
        for p in peers:
            h = by_key[("lenet5", p["board"], p["opt"], "int8")]
            print(
                f"{p['board']:7} {p['opt']:4} {h['instructions']:12} {p['instructions']:10} "
                f"{h['instructions'] / p['instructions']:6.2f} {h['ram']:10} {p['ram']:9} {h['code']:11} {p['code']:10} "
                f"{p['steps_vs_onnxruntime']:>6g} steps"
            )
        print("(code = text - weights; CMSIS vs ort: its largest difference from onnxruntime in output steps, seed 3)")
    return 0


def cmsis_row(int8_model: onnx.ModelProto, opt: str, folder: Path, board: str, cmsis_nn: Path) -> dict:
    """CMSIS-NN's LeNet-5 in a copy of hetgen's int8 project (its board program, startup, linker
    script, flags): instructions, RAM and code as hetgen's row counts them, and its agreement with
    onnxruntime in output quantization steps."""
    import numpy as np
    from cmsis_nn_lenet import build

    from hetgen.build.baremetal import image_sizes
    from hetgen.runtime.emulate import EmulatedModel

    out = build(folder / f"lenet5-int8-{board}{opt}", int8_model, cmsis_nn, folder / f"cmsis-lenet5-{board}{opt}")
    model = EmulatedModel(out)
    rng = np.random.default_rng(0)
    feeds = {info.name: rng.standard_normal(info.shape).astype(info.dtype) for info in model.inputs}
    instructions, report = bench_mcu.instructions_per_run(out, feeds)
    sizes = image_sizes(out / model.program["path"])
    weights = sum(_cmsis_weight_bytes(int8_model))
    errors = verify(out, seed=3, emulate=True, steps=1)  # the dequantized output, in steps of its scale
    return {
        "board": board,
        "opt": opt,
        "instructions": round(instructions),
        "ram": sizes.data + sizes.bss + report["stack"],
        "code": sizes.text - weights,
        "steps_vs_onnxruntime": round(max(e.max_abs for e in errors), 3),
    }


def _cmsis_weight_bytes(model: onnx.ModelProto):
    """The bytes of its constant tensors that the CMSIS-NN file holds: int8 weights, int32 biases."""
    from onnx import numpy_helper

    for init in model.graph.initializer:
        value = numpy_helper.to_array(init)
        if value.ndim >= 1 and value.size > 16 and value.dtype.kind in "iu":
            yield value.nbytes


if __name__ == "__main__":
    sys.exit(main())
