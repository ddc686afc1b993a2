"""Frames through a project built for throughput, simulated frame by frame: the library's
`_run_frames` runs them pipelined (each frame in flight in its own workspace), and the program's
timed steps run through the pipelined interpreter (hetgen/spec/frames.py) at what the devices
counted (each accelerator's invocations at its cycle counters, each copy at its counted DMA and link
cycles; the controllers' kernels, which run natively, at their estimates): the simulated period and
frames per second, beside the estimate's period the manifest recorded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetgen.errors import HetgenError
from hetgen.runtime.devices import copy_scales, counted_timing
from hetgen.runtime.loader import load
from hetgen.runtime.verify import feeds_for
from hetgen.spec.frames import frames_for, frames_timeline, resource_busy, stages
from hetgen.spec.timeline import run_timeline


@dataclass(frozen=True)
class FramesReport:
    frames: int
    depth: int
    latency_us: float  # one frame alone, simulated (the program's replay)
    period_us: float  # the simulated pipeline's steady-state period
    frame_latency_us: float  # one frame's start to finish inside the simulated pipeline
    busy_us: dict  # resource -> its simulated work per frame
    estimate_period_us: float  # the estimate's pipelined period (the manifest's)
    estimate_latency_us: float  # the estimate's single-frame latency
    outputs: tuple = ()  # each frame's outputs, for checking
    workers: dict | None = None  # what `_run_frames`'s device workers did (hg_frames_stats); None: not run

    @property
    def fps(self) -> float:
        return 1e6 / self.period_us if self.period_us > 0 else 0.0

    @property
    def estimate_fps(self) -> float:
        return 1e6 / self.estimate_period_us if self.estimate_period_us > 0 else 0.0


def frames_report(out_dir: Path, frames: int | None = None, seed: int = 0, timed_only: bool = False) -> FramesReport:
    """`frames` frames (default: enough for a steady state) through the project's `_run_frames`,
    timed frame by frame at the devices' counts. `timed_only`: a project built for latency (no
    `_run_frames`): one frame runs through `_run` for the counts, and its program is timed as the
    pipeline would run it (benchmarks/bench_throughput.py compares the two placements so); no
    outputs are kept and the estimates are 0."""
    model = load(Path(out_dir))
    manifest = model.manifest
    if manifest.program is None or not (timed_only or (manifest.frame_depth and manifest.pipeline is not None)):
        raise HetgenError(f"{out_dir}: not built to run frames pipelined; generate it with --objective throughput")
    depth = manifest.frame_depth or len(stages(manifest.program.controllers[manifest.program.root].entries[0]))
    count = frames or frames_for(depth)
    if manifest.frame_depth:
        feeds = feeds_for(model, Path(out_dir), seed, count)
        outputs, workers = model.run_frames_stats(feeds)
    else:
        feeds, outputs, workers = [], [], None
        model.run(feeds_for(model, Path(out_dir), seed)[0])
    pipeline = manifest.pipeline or {"frames_period_us": 0.0, "latency_us": 0.0}
    estimates = manifest.estimates
    timing = counted_timing(manifest, model, estimates, copy_scales(manifest, model), with_estimates=True)
    times = frames_timeline(manifest.program, timing, count)
    return FramesReport(
        count,
        depth,
        run_timeline(manifest.program, timing),
        times.period_us,
        times.latency_us,
        resource_busy(manifest.program, timing),
        float(pipeline["frames_period_us"]),
        float(pipeline["latency_us"]),
        tuple(zip(feeds, outputs)),
        workers,
    )


def frames_lines(report: FramesReport) -> list[str]:
    busy = ", ".join(f"{path} {us:.1f} us" for path, us in report.busy_us.items())
    ratio = report.period_us / report.estimate_period_us if report.estimate_period_us else float("nan")
    return [
        f"frames pipelined ({report.frames} frames, {report.depth} in flight): simulated latency "
        f"{report.latency_us:.1f} us, period {report.period_us:.1f} us ({report.fps:.0f} frames/s), "
        f"a frame in the pipeline {report.frame_latency_us:.1f} us",
        f"  estimate: latency {report.estimate_latency_us:.1f} us, period {report.estimate_period_us:.1f} us "
        f"({report.estimate_fps:.0f} frames/s); simulated/estimated period {ratio:.2f}x",
        f"  work per frame (simulated): {busy}",
        *(
            [
                f"  run here: {report.workers['workers']} device worker thread(s), "
                f"{report.workers['overlapped_jobs']} of {report.workers['jobs']} batches ran while the root "
                "went on with its own work (templates/runtime/hg_frames.c)"
            ]
            if report.workers
            else []
        ),
    ]


def max_frame_error(report: FramesReport, reference) -> float:
    """The largest |hetgen - reference| over every frame's outputs; `reference(feeds)` gives a
    frame's expected outputs by name."""
    worst = 0.0
    for feeds, outputs in report.outputs:
        expected = reference(feeds)
        for name, value in outputs.items():
            diff = np.abs(value.astype(np.float64) - np.asarray(expected[name], dtype=np.float64))
            worst = max(worst, float(diff.max(initial=0.0)))
    return worst
