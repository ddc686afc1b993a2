"""Recurrent sequence classifiers: hetgen beside onnxruntime at its defaults, 1 and 2 threads.

    python benchmarks/bench_recurrent.py [--runs 30] [--threads 1,2] [--models gru_classifier,...]

onnxruntime runs with its default session options (graph optimisations on: the yardstick a user
comparing the two would pick), `intra_op_num_threads` = T; hetgen with HG_THREADS=T (one build, each
count loaded as its own copy with its own pool). Every model and count of both run interleaved in
one loop, a few runs each per round, so all see the same noise; medians over rounds. The agreement
column is against onnxruntime with its optimiser off (hetgen/runtime/reference.py), the numerical
reference. Models: hetgen/models/suite.py's recurrent entries, plus two crossed shapes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hetgen  # noqa: E402
from hetgen.models import recurrent  # noqa: E402
from hetgen.models.suite import BENCH_MODELS  # noqa: E402
from hetgen.runtime.loader import checked_input, load  # noqa: E402
from hetgen.runtime.reference import ort_session  # noqa: E402
from hetgen.runtime.verify import MODEL_COPY, feeds_for  # noqa: E402

MODELS = {
    **{
        name: builder
        for name, builder in BENCH_MODELS.items()
        if name.endswith(("gru_classifier", "lstm_classifier", "rnn_classifier"))
    },
    "gru@50x64x256": lambda: recurrent.gru_classifier(seq=50, inputs=64, hidden=256),
    "lstm@100x40x128": lambda: recurrent.lstm_classifier(seq=100, inputs=40, hidden=128),
}
RUNS_PER_ROUND = 3


def default_session(path: Path, threads: int) -> ort.InferenceSession:
    """onnxruntime at its defaults (ORT_ENABLE_ALL), `threads` intra-op threads."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def measure(out: Path, runs: int, counts: list[int]) -> dict[int, tuple[float, float, float]]:
    """Per thread count: (hetgen ms, onnxruntime ms, max |difference| / max |reference|)."""
    models, sessions = {}, {}
    feeds = inputs = None
    outputs = {}
    for count in counts:
        os.environ["HG_THREADS"] = str(count)  # read when this copy's pool starts, at its first run
        models[count] = load(out)
        if feeds is None:
            feeds = feeds_for(models[count], out, 0)[0]
            inputs = [checked_input(t, feeds[t.name]) for t in models[count].inputs]
        outputs[count] = [np.empty(t.shape, dtype=t.dtype) for t in models[count].outputs]
        models[count].run_into(inputs, outputs[count])
        sessions[count] = default_session(out / MODEL_COPY, count)
    os.environ.pop("HG_THREADS")
    reference = ort_session(str(out / MODEL_COPY), threads=1).run(None, feeds)
    errors = {
        count: max(
            float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-30)
            for got, want in zip(outputs[count], reference)
        )
        for count in counts
    }
    for count in counts:  # warm both
        for _ in range(3):
            models[count].run_into(inputs, outputs[count])
            sessions[count].run(None, feeds)
    ours: dict[int, list[float]] = {count: [] for count in counts}
    theirs: dict[int, list[float]] = {count: [] for count in counts}
    for _ in range(runs):
        for count in counts:
            for _ in range(RUNS_PER_ROUND):
                start = time.perf_counter()
                models[count].run_into(inputs, outputs[count])
                ours[count].append((time.perf_counter() - start) * 1e3)
            for _ in range(RUNS_PER_ROUND):
                start = time.perf_counter()
                sessions[count].run(None, feeds)
                theirs[count].append((time.perf_counter() - start) * 1e3)
    return {
        count: (statistics.median(ours[count]), statistics.median(theirs[count]), errors[count]) for count in counts
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="rounds (each: 3 runs of each, per thread count)")
    parser.add_argument("--platform", default="host")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; accepted: {', '.join(MODELS)}")
    counts = [int(c) for c in args.threads.split(",")]
    print(f"onnxruntime {ort.__version__} at its defaults (ORT_ENABLE_ALL); ratio = hetgen / onnxruntime")
    print(f"{'model':18} {'threads':>7} {'hetgen ms':>10} {'ort ms':>10} {'ratio':>6} {'rel err':>9}")
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-rnn-") as tmp:
        for name in names:
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(MODELS[name](), path)
            out = hetgen.compile(args.platform, path, out=Path(tmp) / path.stem, native_only=True)
            for count, (ours, theirs, error) in measure(out, args.runs, counts).items():
                print(f"{name:18} {count:7d} {ours:10.3f} {theirs:10.3f} {ours / theirs:6.2f} {error:9.1e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
