"""`hetgen bench`: latency of the built library beside onnxruntime at its defaults (graph
optimisations on, the same thread count: the speed yardstick, `speed_session`), interleaved.

onnxruntime with optimisations off (`ort_session`) is the numerical reference only: its outputs
check the optimised session's, and where those disagree (onnxruntime's optimiser gave a wrong
result) the comparison is skipped and the result says why, instead of timing a wrong program.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetgen.runtime.loader import checked_input, load
from hetgen.runtime.reference import optimiser_error, ort_session, speed_session, wrong_result_message
from hetgen.runtime.verify import MODEL_COPY, feeds_for


@dataclass(frozen=True)
class BenchResult:
    hetgen_ms: float  # median
    ort_ms: float | None  # median of onnxruntime at its defaults; None where its optimiser's result was wrong
    runs: int
    threads: int = 1
    optimiser_error: float = 0.0  # max |optimised - reference| / max |reference|
    skipped: str | None = None  # why there is no onnxruntime figure

    @property
    def ratio(self) -> float | None:
        """hetgen latency / onnxruntime latency (below 1 = hetgen faster); None where skipped."""
        if self.ort_ms is None:
            return None
        return self.hetgen_ms / self.ort_ms if self.ort_ms else float("inf")


def _time_ms(function, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def bench(out_dir: Path, runs: int = 20, warmup: int = 3, seed: int = 0, threads: int = 1) -> BenchResult:
    previous = os.environ.get("HG_THREADS")
    os.environ["HG_THREADS"] = str(threads)  # read when the library's pool starts, at its first run
    try:
        model = load(out_dir)
        feeds = feeds_for(model, out_dir, seed)[0]
        inputs = [checked_input(t, feeds[t.name]) for t in model.inputs]
        outputs = [np.empty(t.shape, dtype=t.dtype) for t in model.outputs]
        model.run_into(inputs, outputs)
    finally:
        if previous is None:
            os.environ.pop("HG_THREADS", None)
        else:
            os.environ["HG_THREADS"] = previous
    path = str(Path(out_dir) / MODEL_COPY)
    session = speed_session(path, threads=threads)
    error = optimiser_error(session.run(None, feeds), ort_session(path, threads=threads).run(None, feeds))
    skipped = wrong_result_message(Path(out_dir).name, error)

    def run_hetgen():
        model.run_into(inputs, outputs)

    def run_ort():
        session.run(None, feeds)

    for _ in range(warmup):
        run_hetgen()
        if not skipped:
            run_ort()
    hetgen_samples, ort_samples = [], []
    # Interleave in rounds so both see the same machine noise.
    for _ in range(runs):
        hetgen_samples += _time_ms(run_hetgen, 1)
        if not skipped:
            ort_samples += _time_ms(run_ort, 1)
    ort_ms = None if skipped else statistics.median(ort_samples)
    return BenchResult(statistics.median(hetgen_samples), ort_ms, runs, threads, error, skipped)
