"""Frames pipelined across devices (issue 23, item 6): latency, period and frames per second of the
latency-optimal and the throughput-optimal placement, per shipped platform and example model.

    python benchmarks/bench_throughput.py                       # estimates: every shipped platform x example
    python benchmarks/bench_throughput.py --simulate /tmp/thr    # also built and simulated (soc, dual, rk3588)
    python benchmarks/bench_throughput.py --platforms soc rk3588 --models resnet8 --simulate /tmp/thr

Estimates (`place(..., objective=...)`, hetgen/partition/throughput.py): `latency` is one frame's
makespan, `period` the busiest resource's work per frame (the root's kernels and copies, or one of
its devices' invocations), which the generated `_run_frames` order reaches (hetgen/spec/frames.py;
printed `pipe` where it differs by over 1 %), `fps` = 1e6 / period. `lat/thr` is the latency
placement's period over the throughput placement's (above 1: the throughput objective pays).
`1-by-1` is frames one at a time (1e6 / latency) for comparison with pipelined fps. The search is a
climb, not exact: its period at the search's prices (before kernel choices and cascades re-price
the groups) is printed beside a lower bound at those prices (the least serial time of any placement
over the number of targets) and the gap between them.

`--wall DIR` builds both placements (native, -O2, in DIR) and times them on this machine's wall clock:
N frames through the throughput build's `_run_frames` (each device on a worker thread of its own,
so the root works on one frame while a device works on another) against N calls of `_run` of the
latency build and of the throughput build, interleaved in one process, medians; with the CPU time
per frame, the machine's load and how many device batches overlapped the root's work.

`--simulate DIR` builds both placements (native, -O2, in DIR) and times frames frame by frame at what
the simulated devices counted (hetgen/runtime/frames.py): the throughput project runs its frames
through `_run_frames` and they are checked against onnxruntime frame by frame; the latency project
(which has no `_run_frames`) runs one frame for the counts and its program is timed as the same
pipeline would run it. The controllers' own kernels run natively and enter at their estimates.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hetgen.frontend import import_model  # noqa: E402
from hetgen.partition import place  # noqa: E402
from hetgen.partition.throughput import placement_pipeline  # noqa: E402
from hetgen.platform.loader import load_platform  # noqa: E402

PLATFORMS = ("soc", "dual", "slowlink", "host", "corstone-300", "ethos-u65", "mcu-npu", "rk3588")
MODELS = ("resnet_tiny", "transformer_tiny", "resnet8", "mobilenet_v1_vww", "ds_cnn")
SIMULATED = ("soc", "dual", "rk3588")


def estimates(platform: str, model: str) -> tuple[dict, dict]:
    plat = load_platform(platform if "/" in platform else _path(platform))
    graph = import_model(str(ROOT / "examples" / f"{model}.onnx"))
    latency = place(graph, plat)
    throughput = place(graph, plat, objective="throughput")
    rows = {}
    for name, placement in (("latency", latency), ("throughput", throughput)):
        pipe = placement.pipeline or placement_pipeline(placement, graph, plat)
        rows[name] = pipe
    return rows, {"bound": throughput.pipeline.bound_us, "searched": throughput.pipeline.searched_us}


def _path(tag: str) -> Path:
    shipped = ROOT / "platforms" / f"{tag}.yaml"
    return shipped if shipped.is_file() else ROOT / "platforms" / "boards" / f"{tag}.yaml"


def build(platform: str, model: str, out: Path, objective: str) -> Path:
    """The placement for `objective`, built native (-O2) in out/<platform>-<model>-<objective>."""
    import hetgen

    folder = out / f"{platform}-{model}-{objective}"
    hetgen.compile(
        _path(platform),
        ROOT / "examples" / f"{model}.onnx",
        out=folder,
        objective=objective,
        native_only=True,
        opt=("-O2",),
    )
    return folder


def simulate(platform: str, model: str, out: Path) -> dict:
    from hetgen.runtime.frames import frames_report, max_frame_error
    from hetgen.runtime.reference import ort_session
    from hetgen.runtime.verify import MODEL_COPY

    result = {}
    for objective in ("latency", "throughput"):
        folder = build(platform, model, out, objective)
        report = frames_report(folder, timed_only=objective == "latency")
        error = None
        if report.outputs:
            session = ort_session(str(folder / MODEL_COPY))
            names = [o.name for o in session.get_outputs()]
            error = max_frame_error(report, lambda feeds: dict(zip(names, session.run(None, feeds))))
        result[objective] = (report, error)
    return result


def wall_clock(platform: str, model: str, out: Path, frames: int, runs: int) -> dict:
    """Frames per second on this machine's wall clock (and CPU time per frame): `frames` frames
    through the throughput build's `_run_frames` (each device on a worker thread of its own:
    templates/runtime/hg_frames.c) against `frames` calls of `_run`, of the latency build and of the
    throughput build, the three interleaved in one process (their order rotated each run), medians
    of `runs`. The simulated devices' arithmetic runs on host cores, so the overlap gains what the
    host's cores allow: nothing on a machine whose cores are all busy."""
    import hetgen
    from hetgen.runtime.frames import feeds_for

    folders = {objective: build(platform, model, out, objective) for objective in ("latency", "throughput")}
    models = {objective: hetgen.load(folder) for objective, folder in folders.items()}
    feeds = feeds_for(models["throughput"], folders["throughput"], 0, frames)
    overlapped = []

    def pipelined() -> None:
        outputs, stats = models["throughput"].run_frames_stats(feeds)
        overlapped.append(stats)

    calls = {
        "run_frames": pipelined,
        "run, latency build": lambda: [models["latency"].run(f) for f in feeds],
        "run, throughput build": lambda: [models["throughput"].run(f) for f in feeds],
    }
    wall = {name: [] for name in calls}
    cpu = {name: [] for name in calls}
    names = list(calls)
    for name in names:  # warm: the libraries' pages, the worker pool
        calls[name]()
    for run in range(runs):
        for name in names[run % len(names) :] + names[: run % len(names)]:
            start, start_cpu = time.perf_counter(), time.process_time()
            calls[name]()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    for model_ in models.values():
        model_.close()
    return {
        "fps": {name: frames / float(np.median(wall[name])) for name in names},
        "cpu_us": {name: 1e6 * float(np.median(cpu[name])) / frames for name in names},
        "workers": overlapped[1:],  # the timed runs' hg_frames_stats
        "load": os.getloadavg(),
    }


def wall_lines(result: dict, frames: int, runs: int) -> list[str]:
    """The wall clock's frames per second, and the CPU time's: where each thread's time went. On a
    host with a core free for each thread, `_run_frames` takes the busiest thread's CPU time a frame
    (the root's or a worker's), one frame at a time through `_run` the sum of them."""
    fps, cpu = result["fps"], result["cpu_us"]
    workers = result["workers"]
    overlapped = sum(w["overlapped_jobs"] for w in workers)
    jobs = sum(w["jobs"] for w in workers)
    root_us = float(np.median([w["root_cpu_ns"] for w in workers])) / 1e3 / frames
    worker_us = float(np.median([w["busiest_worker_cpu_ns"] for w in workers])) / 1e3 / frames
    lines = [
        f"{'':<13} {'':<17} {'wall':<10} {frames} frames x {runs} runs, medians, load average "
        + "/".join(f"{x:.1f}" for x in result["load"])
        + f" on {os.cpu_count()} cores"
    ]
    for name in fps:
        note = ""
        if name == "run_frames":
            note = f"; {workers[0]['workers']} device worker(s), {overlapped}/{jobs} batches overlapped the root's work"
        lines.append(
            f"{'':<13} {'':<17} {'':<10} {name:<22} {fps[name]:8.0f} fps  "
            f"{fps[name] / fps['run, latency build']:5.2f}x  cpu {cpu[name]:8.1f} us/frame{note}"
        )
    busiest = max(root_us, worker_us)
    if busiest > 0:
        lines.append(
            f"{'':<13} {'':<17} {'cpu':<10} run_frames' threads a frame: root {root_us:.1f} us, busiest worker "
            f"{worker_us:.1f} us: on free cores {1e6 / busiest:.0f} fps, "
            f"{cpu['run, latency build'] / busiest:.2f}x the latency build's _run ({cpu['run, latency build']:.1f} us)"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platforms", nargs="*", default=list(PLATFORMS))
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--simulate", metavar="DIR", help="also build and simulate (native) in DIR")
    parser.add_argument(
        "--wall",
        metavar="DIR",
        help="also build (native, in DIR) and time frames on this machine's wall clock: _run_frames against _run",
    )
    parser.add_argument("--frames", type=int, default=32, help="frames per timed call (--wall)")
    parser.add_argument("--runs", type=int, default=7, help="timed calls of each kind, interleaved (--wall)")
    args = parser.parse_args()
    print(
        f"{'platform':<13} {'model':<17} {'placement':<10} {'latency':>9} {'period':>9} {'fps':>8} "
        f"{'1-by-1':>8} {'depth':>5}  {'lat/thr':>7}  bottleneck"
    )
    for platform in args.platforms:
        for model in args.models:
            start = time.perf_counter()
            try:
                rows, extra = estimates(platform, model)
            except Exception as error:  # a model a platform cannot take (an MCU's memory): say so, go on
                print(f"{platform:<13} {model:<17} -- {str(error).splitlines()[0][:100]}")
                continue
            gain = rows["latency"].period_us / rows["throughput"].period_us
            for name, pipe in rows.items():
                note = ""
                if abs(pipe.frames_period_us - pipe.period_us) > 0.01 * pipe.period_us:
                    note = f" (pipe {pipe.frames_period_us:.1f})"
                print(
                    f"{platform:<13} {model:<17} {name:<10} {pipe.latency_us:8.1f}u {pipe.period_us:8.1f}u "
                    f"{1e6 / pipe.period_us:8.0f} {1e6 / pipe.latency_us:8.0f} {pipe.depth:5d}  "
                    f"{gain if name == 'throughput' else 1.0:6.2f}x  {pipe.bottleneck}{note}"
                )
            bound, searched = extra["bound"], extra["searched"]
            print(
                f"{'':<13} {'':<17} {'':<10} at the search's prices: period {searched:.1f} us, "
                f"none below {bound:.1f} us (gap at most {searched / bound - 1:.0%})"
                if bound
                else f"{'':<13} {'':<17} {'':<10} (beam-cut search: no bound)",
                f"({time.perf_counter() - start:.1f} s to place both)",
            )
            if args.simulate and platform in SIMULATED:
                sims = simulate(platform, model, Path(args.simulate))
                for name, (report, error) in sims.items():
                    estimate = rows[name].frames_period_us
                    checked = "" if error is None else f", frames vs onnxruntime max |diff| {error:.1e}"
                    print(
                        f"{'':<13} {'':<17} {name[:3] + ' sim':<10} {report.latency_us:8.1f}u {report.period_us:8.1f}u "
                        f"{report.fps:8.0f} {1e6 / report.latency_us:8.0f} {report.depth:5d}  "
                        f"sim/est period {report.period_us / estimate:.2f}x ({report.frames} frames{checked})"
                    )
                    if error is not None and not np.isfinite(error):
                        return 1
            if args.wall and platform in SIMULATED:
                result = wall_clock(platform, model, Path(args.wall), args.frames, args.runs)
                print("\n".join(wall_lines(result, args.frames, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
