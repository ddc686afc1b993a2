"""int8 beside float32: latency, weight and arena bytes of hetgen's generated code for quantized CNNs,
beside onnxruntime's float32 and int8 runs (one thread each).

    python benchmarks/bench_int8.py [--runs 30] [--platform host] [--models resnet,mobilenet_v2] [--npu soc]

Printed per model: the medians of hetgen float32, hetgen int8, onnxruntime float32 and onnxruntime
int8, then 'i8/f32' (hetgen int8 over hetgen float32: below 1 where int8 pays) and 'i8/ort' (hetgen
int8 over onnxruntime int8: below 1 where hetgen is faster).

Each float model is quantized as users do it (onnxruntime's quant_pre_process + quantize_static,
QDQ format, int8 activations, per-channel int8 weights; hetgen/models/quantized.py). onnxruntime
runs both at its defaults (graph optimisations on: they fold and fuse the float model, and turn QDQ
into its integer kernels; off, QDQ runs as float with fake quantisation), one thread.
hetgen lowers QDQ to integer kernels itself. Both run on the calling thread (hetgen's host build
has one thread, onnxruntime intra_op_num_threads=1), so each run is timed by that thread's CPU time
(`time.thread_time`: it leaves out the time the thread waits to be scheduled, which on a shared,
loaded machine moves wall-clock medians by 2-4x); runs are interleaved and medians are quoted.

`--npu PLATFORM` adds, for a platform with a simulated npu, the simulated time of one run of the
float32 and of the int8 model, each placed by cost (`hetgen bench`'s simulated_us: the program
replayed with its devices concurrent, each device's work as the simulator counts it, the
controllers' kernels at their estimate), and how many groups went to the simulated devices.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

import hetgen
from hetgen.models import cnn, tiny
from hetgen.models.quantized import quantized
from hetgen.runtime.devices import simulation_report
from hetgen.runtime.loader import checked_input
from hetgen.runtime.reference import speed_session

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

MODELS = {
    "resnet_tiny": lambda: onnx.load(str(EXAMPLES / "resnet_tiny.onnx")),
    # MLPerf Tiny's float networks (hetgen/models/mlperf_tiny.py): the depthwise-separable keyword
    # spotter, the visual-wake-words MobileNet, ResNet-8 and the anomaly-detection autoencoder
    "ds_cnn": lambda: onnx.load(str(EXAMPLES / "ds_cnn.onnx")),
    "mobilenet_v1_vww": lambda: onnx.load(str(EXAMPLES / "mobilenet_v1_vww.onnx")),
    "resnet8": lambda: onnx.load(str(EXAMPLES / "resnet8.onnx")),
    "fc_autoencoder": lambda: onnx.load(str(EXAMPLES / "fc_autoencoder.onnx")),
    "tiny_cnn": lambda: tiny.tiny_cnn(size=32),
    "resnet": lambda: cnn.resnet(size=64),
    "mobilenet_v2": lambda: cnn.mobilenet_v2(size=64),
    "squeezenet": lambda: cnn.squeezenet(size=64),
    "resnet18": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=64),
    "vgg": lambda: cnn.vgg(widths=(64, 128, 256), size=64),
}


def ort_default_session(model: onnx.ModelProto):
    """The speed yardstick every benchmark times (hetgen/runtime/reference.py), one thread."""
    return speed_session(model.SerializeToString(), threads=1)


def built(model: onnx.ModelProto, platform: str, out: Path):
    """The loaded library and its root's (weights bytes, arena bytes)."""
    project = hetgen.compile(platform, model, out=out, native_only=True)
    manifest = json.loads((project / "hetgen.json").read_text())
    weights = sum(t["weights_bytes"] for t in manifest["targets"])
    return hetgen.load(project), weights, manifest["workspace_size"]


def median_ms(runners: dict, runs: int, warmup: int = 3) -> dict[str, float]:
    for run in runners.values():
        for _ in range(warmup):
            run()
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(runs):  # interleaved: every runner sees the same machine noise
        for name, run in runners.items():
            start = time.thread_time()
            run()
            samples[name].append((time.thread_time() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def measure(name: str, platform: str, runs: int, tmp: Path) -> dict:
    float_model = MODELS[name]()
    int8_model = quantized(float_model, "QDQ", per_channel=True)
    info = float_model.graph.input[0]
    shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
    feeds = {info.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    float_lib, float_weights, float_arena = built(float_model, platform, tmp / f"{name}_f32")
    int8_lib, int8_weights, int8_arena = built(int8_model, platform, tmp / f"{name}_int8")
    ort_float = ort_default_session(float_model)
    ort_int8 = ort_default_session(int8_model)

    def runner(library):
        inputs = [checked_input(t, feeds[t.name]) for t in library.inputs]
        outputs = [np.empty(t.shape, dtype=t.dtype) for t in library.outputs]
        return lambda: library.run_into(inputs, outputs)

    times = median_ms(
        {
            "hetgen f32": runner(float_lib),
            "hetgen int8": runner(int8_lib),
            "ort f32": lambda: ort_float.run(None, feeds),
            "ort int8": lambda: ort_int8.run(None, feeds),
        },
        runs,
    )
    step = max_error_steps(int8_lib, int8_model, ort_int8, feeds)
    return {
        "model": f"{name} {'x'.join(map(str, shape[1:]))}",
        **times,
        "weights f32": float_weights,
        "weights int8": int8_weights,
        "arena f32": float_arena,
        "arena int8": int8_arena,
        "steps off": step,
    }


def max_error_steps(library, model: onnx.ModelProto, session, feeds) -> float:
    """hetgen's int8 output against onnxruntime's int8 run, in output quantisation steps."""
    producers = {out: node for node in model.graph.node for out in node.output}
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    got = library.run(feeds)
    worst = 0.0
    for output, expected in zip(session.get_outputs(), session.run(None, feeds)):
        scale = float(inits[producers[output.name].input[1]].reshape(-1)[0])
        worst = max(worst, float(np.abs(got[output.name].astype(np.float64) - expected).max() / scale))
    return worst


def simulated(model: onnx.ModelProto, platform: str, out: Path) -> str:
    """The simulated time of one run of `model` placed on `platform` by cost (the whole program,
    `SimulationReport.simulated_us`), and how many of its groups went to the simulated devices."""
    report = simulation_report(hetgen.compile(platform, model, out=out, native_only=True))
    devices = {device.path for device in report.devices}
    placed = sum(1 for group in report.groups if group.target in devices)
    return f"{report.simulated_us:7.1f} us ({placed:2} groups)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--platform", default="host")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--npu", default=None, help="a platform with a simulated npu: adds its simulated time")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # quantize_static's advice to pre-process (done)
    header = (
        f"{'model':22} {'hetgen f32':>10} {'hetgen i8':>10} {'ort f32':>8} {'ort i8':>8}  "
        f"{'i8/f32':>6} {'i8/ort':>6}  {'weights f32/i8 kB':>18} {'arena f32/i8 kB':>16} {'i8 vs ort':>9}"
    )
    print(
        f"{header}\n(ms of the calling thread's CPU time, median of runs; "
        "'i8 vs ort': largest difference from onnxruntime int8, in output steps)"
    )
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-int8-") as tmp:
        for name in args.models.split(","):
            r = measure(name, args.platform, args.runs, Path(tmp))
            npu = ""
            if args.npu:
                float_model = MODELS[name]()
                int8_model = quantized(float_model, "QDQ", per_channel=True)
                f32 = simulated(float_model, args.npu, Path(tmp) / f"{name}_npu_f32")
                i8 = simulated(int8_model, args.npu, Path(tmp) / f"{name}_npu_i8")
                npu = f"  npu f32 {f32} / i8 {i8}"
            print(
                f"{r['model']:22} {r['hetgen f32']:10.3f} {r['hetgen int8']:10.3f} {r['ort f32']:8.3f} "
                f"{r['ort int8']:8.3f} {r['hetgen int8'] / r['hetgen f32']:6.2f} {r['hetgen int8'] / r['ort int8']:6.2f}  "
                f"{r['weights f32'] / 1e3:8.1f} /{r['weights int8'] / 1e3:7.1f} "
                f"{r['arena f32'] / 1e3:7.1f} /{r['arena int8'] / 1e3:6.1f} {r['steps off']:9.2f}{npu}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
