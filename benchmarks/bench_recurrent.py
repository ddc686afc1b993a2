"""Recurrent sequence classifiers: hetgen beside onnxruntime at its defaults, 1 and 2 threads.

    python benchmarks/bench_recurrent.py [--runs 30] [--threads 1,2] [--models gru_classifier,...]

onnxruntime runs with its default session options (graph optimisations on: the yardstick a user
comparing the two would pick), `intra_op_num_threads` = T; hetgen with HG_THREADS=T (one build, each
count loaded as its own copy with its own pool). Every model and count of both run interleaved in
one loop, a few runs each per round, so all see the same noise; medians over rounds
(bench_models.measure_threads, onnxruntime's session `speed_session`). The agreement column is
against onnxruntime with its optimiser off (hetgen/runtime/reference.py), the numerical reference;
where the optimised session's result differs from it, the model says so and its comparison is
skipped. Models: hetgen/models/suite.py's recurrent entries, plus two crossed shapes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import measure_threads  # noqa: E402

import hetgen  # noqa: E402
from hetgen.models import recurrent  # noqa: E402
from hetgen.models.suite import BENCH_MODELS  # noqa: E402
from hetgen.runtime.reference import REFERENCE_SESSION, SPEED_SESSION  # noqa: E402

MODELS = {
    **{
        name: builder
        for name, builder in BENCH_MODELS.items()
        if name.endswith(("gru_classifier", "lstm_classifier", "rnn_classifier"))
    },
    "gru@50x64x256": lambda: recurrent.gru_classifier(seq=50, inputs=64, hidden=256),
    "lstm@100x40x128": lambda: recurrent.lstm_classifier(seq=100, inputs=40, hidden=128),
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
    print(f"onnxruntime {ort.__version__}: {SPEED_SESSION}; rel err: hetgen against {REFERENCE_SESSION}")
    print(f"{'model':18} {'threads':>7} {'hetgen ms':>10} {'ort ms':>10} {'ratio':>6} {'rel err':>9}")
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-rnn-") as tmp:
        for name in names:
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(MODELS[name](), path)
            out = hetgen.compile(args.platform, path, out=Path(tmp) / path.stem, native_only=True)
            for count, figures in measure_threads(out, args.runs, counts, name).items():
                if figures.skipped:
                    print(figures.skipped)
                theirs = "skipped" if figures.theirs is None else f"{figures.theirs:.3f}"
                ratio = "-" if figures.ratio is None else f"{figures.ratio:.2f}"
                print(
                    f"{name:18} {count:7d} {figures.ours:10.3f} {theirs:>10} {ratio:>6} {figures.error:9.1e}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
