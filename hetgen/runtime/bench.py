"""`hetgen bench`: latency of the built library beside onnxruntime (one thread each), side by side."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetgen.runtime.loader import checked_input, load
from hetgen.runtime.reference import ort_session
from hetgen.runtime.verify import MODEL_COPY, feeds_for


@dataclass(frozen=True)
class BenchResult:
    hetgen_ms: float  # median
    ort_ms: float  # median
    runs: int

    @property
    def ratio(self) -> float:
        """hetgen latency / onnxruntime latency (below 1 = hetgen faster)."""
        return self.hetgen_ms / self.ort_ms if self.ort_ms else float("inf")


def _time_ms(function, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def bench(out_dir: Path, runs: int = 20, warmup: int = 3, seed: int = 0) -> BenchResult:
    model = load(out_dir)
    session = ort_session(str(Path(out_dir) / MODEL_COPY), threads=1)
    feeds = feeds_for(model, out_dir, seed)[0]
    inputs = [checked_input(t, feeds[t.name]) for t in model.inputs]
    outputs = [np.empty(t.shape, dtype=t.dtype) for t in model.outputs]

    def run_hetgen():
        model.run_into(inputs, outputs)

    def run_ort():
        session.run(None, feeds)

    for _ in range(warmup):
        run_hetgen()
        run_ort()
    hetgen_samples, ort_samples = [], []
    # Interleave in rounds so both see the same machine noise.
    for _ in range(runs):
        hetgen_samples += _time_ms(run_hetgen, 1)
        ort_samples += _time_ms(run_ort, 1)
    return BenchResult(statistics.median(hetgen_samples), statistics.median(ort_samples), runs)
