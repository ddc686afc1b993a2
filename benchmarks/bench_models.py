"""Latency of hetgen's generated host code beside onnxruntime, one thread each, on real-sized models.

    python benchmarks/bench_models.py [--runs 15] [--models resnet18,mobilenetv2,...] [--platform host]
    python benchmarks/bench_models.py --threads 1,2 [--runs 15] [--models resnet18@64]

Per model: the median latency of each (interleaved in one process, so both see the same noise on a
shared machine), their ratio (below 1: hetgen is faster), the cost model's estimate of hetgen's
latency (`hetgen explain`'s total: with the platform's figures, measured by `hetgen tune` where the
platform file comes from it), the GFLOP/s of hetgen's convolutions and matrix products (counted as
direct convolution: Winograd layers do fewer) against this core's peak (a small FMA loop,
templates/tune/hg_tune_bench.c, as `hetgen tune` measures it), the largest difference from
onnxruntime relative to the largest reference value. Last, the geometric mean of the ratios.

Then memory, per model, in MB:
  hetgen    the generated program as built: arena (activations + kernel workspaces) + weights (as
            packed) + the caller's input and output buffers (hetgen/lower/peak_memory.py), with the
            platform's `options.memory` (default lean)
  fast      the same with `memory: fast` (every Winograd layer takes its 16/9 larger weights)
  bound     the model's weights + the liveness lower bound of its activations
  hg rss    the peak RSS growth of a fresh Python process that loads the built library and runs it once
  ort rss   the same for onnxruntime: session creation (optimisations off, 1 thread) and one run
(RSS counts what each touches: for hetgen the weights mapped from its library, for onnxruntime
its own copy of the initializers and its arena.)

With `--threads 1,2` it instead compares, per model and thread count T, hetgen run with HG_THREADS=T
(its worker pool, templates/runtime/hg_threads.c; one build, each count loaded as its own
copy with its own pool) beside onnxruntime with intra_op_num_threads=T, all interleaved in one loop.
Each engine's few runs start after a settle gap (benchmarks/settle.py: until the process's other
threads are idle), so that neither runs beside the other's pool spinning after its runs
(onnxruntime's worker spins ~44 ms of CPU after each run by default, and took the second core from
the hetgen runs that followed). Before each model it prints how far apart the first two CPUs are
(benchmarks/core_distance.py): on this project's VM the host at times puts them on different dies,
where data passed between two threads costs 3x, and two-thread figures then say little.

Single large layers (GEMMs, convolutions) against the core's peak: benchmarks/bench_kernels.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core_distance import core_distance  # noqa: E402
from peer_xnnpack import PEER_MODELS, PeerUnavailable, xnnpack_runner  # noqa: E402
from settle import settle  # noqa: E402

import hetgen  # noqa: E402
from hetgen import lower  # noqa: E402
from hetgen.lower.peak_memory import MemoryFigures, memory_figures  # noqa: E402
from hetgen.models.suite import BENCH_MODELS  # noqa: E402
from hetgen.ops._gemm_plan import DEFAULT_BLOCKS  # noqa: E402
from hetgen.ops.base import OpInstance  # noqa: E402
from hetgen.ops.registry import op_def  # noqa: E402
from hetgen.partition.search import place  # noqa: E402
from hetgen.pipeline import import_graph, resolve_platform  # noqa: E402
from hetgen.platform.loader import load_platform  # noqa: E402
from hetgen.platform.model import FrozenMap  # noqa: E402
from hetgen.platform.search_path import default_search_path  # noqa: E402
from hetgen.runtime.loader import checked_input, load  # noqa: E402
from hetgen.runtime.reference import (  # noqa: E402
    OPTIMISER_TOLERANCE,
    REFERENCE_SESSION,
    SPEED_SESSION,
    optimiser_error,
    ort_session,
    speed_session,
    wrong_result_message,
)
from hetgen.runtime.verify import MODEL_COPY, feeds_for  # noqa: E402
from hetgen.tune.measure import Bench  # noqa: E402

MODELS = BENCH_MODELS
MATRIX_OPS = ("Conv", "Gemm", "MatMul", "GRU", "LSTM", "RNN")  # the recurrent ones: their gate products


def peak_gflops() -> float:
    """One core's float32 FMA throughput, as `hetgen tune` measures it (the best of many short runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        return Bench(load_platform("host").root, DEFAULT_BLOCKS, Path(tmp)).peak_gflops(runs=300)


def matrix_flops(model: onnx.ModelProto) -> int:
    """Arithmetic of the model's convolutions, matrix products and recurrent layers (2 per multiply-add)."""
    graph = import_graph(model, {})
    return sum(
        op_def(node.op, node.opset).lower(OpInstance.of(node, graph)).flops
        for node in graph.nodes
        if node.op in MATRIX_OPS
    )


def memory_figures_for(platform: str, model: onnx.ModelProto, memory: str | None = None) -> MemoryFigures:
    """The program's memory and its bound, from the lowered program (`memory` overrides the platform's)."""
    resolved = resolve_platform(platform, default_search_path(os.environ))
    if memory is not None:
        resolved = dataclasses.replace(resolved, options=FrozenMap({**resolved.options, "memory": memory}))
    graph = import_graph(model, {})
    weights = sum(numpy_helper.to_array(init).nbytes for init in model.graph.initializer)
    return memory_figures(lower.lower(graph, resolved, place(graph, resolved)), weights)


RSS_CHILD = """
import json, sys
from pathlib import Path
import numpy as np
out, which = Path(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
inputs = json.loads((out / "hetgen.json").read_text())["inputs"]
feeds = {  # floats; integers (token ids) below every bench model's vocabulary
    t["name"]: rng.standard_normal(t["shape"]).astype(t["dtype"])
    if np.issubdtype(np.dtype(t["dtype"]), np.floating)
    else rng.integers(0, 8, t["shape"]).astype(t["dtype"])
    for t in inputs
}
if which == "hetgen":
    from hetgen.runtime.loader import checked_input, load
else:
    from hetgen.runtime.reference import ort_session
    from hetgen.runtime.verify import MODEL_COPY
    import onnxruntime
    model_bytes = (out / MODEL_COPY).read_bytes()
def peak_kb():  # VmHWM starts afresh at exec (getrusage's ru_maxrss inherits the parent's)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
before = peak_kb()
if which == "hetgen":
    model = load(out)
    args = [checked_input(t, feeds[t.name]) for t in model.inputs]
    model.run_into(args, [np.empty(t.shape, dtype=t.dtype) for t in model.outputs])
else:
    ort_session(model_bytes, threads=1).run(None, feeds)
print((peak_kb() - before) / 1e3)
"""


def rss_mb(out: Path, which: str) -> float:
    """The peak RSS growth (MB) of a fresh process running `which` (hetgen or ort) once on `out`'s model."""
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, str(out), which], capture_output=True, text=True, env=environment, check=True
    )
    return float(result.stdout.split()[-1])


@dataclasses.dataclass(frozen=True)
class Figures:
    """One model at one thread count: medians of interleaved runs (ms), hetgen's largest difference
    from the numerical reference (relative to its largest value), onnxruntime's optimised session's
    (`optimiser`), and why the onnxruntime figure is missing (`skipped`, its optimiser's wrong result)."""

    ours: float
    theirs: float | None
    error: float
    optimiser: float
    skipped: str | None = None
    fastest: float = 0.0  # hetgen's fastest run
    peer: float | None = None  # XNNPACK through ExecuTorch (benchmarks/peer_xnnpack.py), where it ran
    # the calling thread's CPU time (ms), median and fastest, and onnxruntime's median: the whole
    # run's at one thread (both run every task on the calling thread there), a part of it above
    cpu: float = 0.0
    cpu_fastest: float = 0.0
    theirs_cpu: float | None = None

    @property
    def ratio(self) -> float | None:
        return None if self.theirs is None else self.ours / self.theirs


def relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(
        float(np.max(np.abs(g - w))) / max(float(np.max(np.abs(w))), 1e-30) for g, w in zip(got, want, strict=True)
    )


def measure(out: Path, runs: int, name: str = "", peer=None) -> Figures:
    """hetgen beside onnxruntime at its defaults (speed_session), one thread each, interleaved; the
    optimiser-off session (ort_session) only checks both results."""
    return measure_threads(out, runs, [1], name, per_round=1, peer=peer)[1]


RUNS_PER_ROUND = 3


def measure_threads(
    out: Path, runs: int, counts: list[int], name: str = "", per_round: int = RUNS_PER_ROUND, peer=None
):
    """Per thread count T: Figures of hetgen run with HG_THREADS=T beside onnxruntime at its defaults
    with T intra-op threads (and `peer[T]()`, a second peer's run at T threads, where given), medians
    of runs that interleave every count of all, so all see the same noise."""
    peer = peer or {}
    models, sessions = {}, {}
    feeds = inputs = outputs = None
    for count in counts:
        os.environ["HG_THREADS"] = str(count)  # read when this copy's pool starts, at its first run,
        models[count] = load(out)
        if feeds is None:
            feeds = feeds_for(models[count], out, 0)[0]
            inputs = [checked_input(t, feeds[t.name]) for t in models[count].inputs]
            outputs = {c: [np.empty(t.shape, dtype=t.dtype) for t in models[count].outputs] for c in counts}
        models[count].run_into(inputs, outputs[count])  # so the pool starts while HG_THREADS says `count`
        sessions[count] = speed_session(str(out / MODEL_COPY), threads=count)
    os.environ.pop("HG_THREADS")
    reference = ort_session(str(out / MODEL_COPY)).run(None, feeds)
    errors, optimiser, skipped = {}, {}, {}
    for count in counts:
        for _ in range(2):
            models[count].run_into(inputs, outputs[count])
            optimised = sessions[count].run(None, feeds)
        errors[count] = relative_error(outputs[count], reference)
        optimiser[count] = optimiser_error(optimised, reference)
        skipped[count] = wrong_result_message(name or out.name, optimiser[count])
    ours: dict[int, list[float]] = {count: [] for count in counts}
    theirs: dict[int, list[float]] = {count: [] for count in counts}
    ours_cpu: dict[int, list[float]] = {count: [] for count in counts}
    theirs_cpu: dict[int, list[float]] = {count: [] for count in counts}
    peers: dict[int, list[float]] = {count: [] for count in counts}
    # Rounds of a few runs of each in turn, each engine's after a settle gap: onnxruntime's pool
    # spins on the other cores for a while after each run (its default), and would take the second
    # core from the hetgen runs that followed it.
    for _ in range(runs):
        for count in counts:
            settle()
            for _ in range(per_round):
                start, cpu = time.perf_counter(), time.thread_time()
                models[count].run_into(inputs, outputs[count])
                ours[count].append((time.perf_counter() - start) * 1e3)
                ours_cpu[count].append((time.thread_time() - cpu) * 1e3)
            if count in peer:
                settle()
                for _ in range(per_round):
                    start = time.perf_counter()
                    peer[count]()
                    peers[count].append((time.perf_counter() - start) * 1e3)
            if skipped[count]:
                continue
            settle()
            for _ in range(per_round):
                start, cpu = time.perf_counter(), time.thread_time()
                sessions[count].run(None, feeds)
                theirs[count].append((time.perf_counter() - start) * 1e3)
                theirs_cpu[count].append((time.thread_time() - cpu) * 1e3)
    return {
        count: Figures(
            statistics.median(ours[count]),
            None if skipped[count] else statistics.median(theirs[count]),
            errors[count],
            optimiser[count],
            skipped[count],
            min(ours[count]),
            statistics.median(peers[count]) if peers[count] else None,
            statistics.median(ours_cpu[count]),
            min(ours_cpu[count]),
            None if skipped[count] else statistics.median(theirs_cpu[count]),
        )
        for count in counts
    }


def summary(ratios: list[float]) -> str:
    """The geometric mean and the largest of the ratios (the models whose comparison was skipped left out)."""
    if not ratios:
        return "no ratio (every comparison skipped)"
    mean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    return f"geometric mean ratio {mean:.2f}, max ratio {max(ratios):.2f} ({len(ratios)} models)"


HEADER = (
    f"{'model':22} {'threads':>7} {'hetgen ms':>10} {'ort ms':>10} {'ratio':>6} {'GFLOP/s':>8} {'% peak':>7}"
    f" {'rel err':>9} {'ort opt err':>11} {'xnn ms':>8} {'hg/xnn':>6}"
)


def row(name: str, count: int, figures: Figures, flops: int, peak: float) -> str:
    gflops = flops / figures.ours / 1e6
    theirs = "skipped" if figures.theirs is None else f"{figures.theirs:.2f}"
    ratio = "-" if figures.ratio is None else f"{figures.ratio:.2f}"
    return (
        f"{name:22} {count:7d} {figures.ours:10.2f} {theirs:>10} {ratio:>6} {gflops:8.1f} "
        f"{100 * gflops / (peak * count):6.0f}% {figures.error:9.1e} {figures.optimiser:11.1e}"
        + (" " * 16 if figures.peer is None else f" {figures.peer:8.2f} {figures.ours / figures.peer:6.2f}")
    )


def xnnpack_peer(name: str, model: onnx.ModelProto, out: Path, threads: int = 1) -> dict:
    """{threads: XNNPACK's run} for a MobileNet-class model, checked against the numerical reference;
    {} (with the reason printed) where it is not installed, cannot export the model or disagrees.
    One thread count per process (peer_xnnpack.POOL): the benchmark's first."""
    if name not in PEER_MODELS:
        return {}
    feeds = feeds_for(load(out), out, 0)[0]
    try:
        run, outputs, seconds = xnnpack_runner(model, feeds, threads)
    except PeerUnavailable as why:
        print(f"{name}: {why}")
        return {}
    error = optimiser_error(outputs, ort_session(str(out / MODEL_COPY)).run(None, feeds))
    if error > OPTIMISER_TOLERANCE:
        print(f"{name}: XNNPACK (ExecuTorch) result differs from the reference by {error:.2e}; peer skipped")
        return {}
    print(
        f"{name}: XNNPACK (ExecuTorch) at {threads} thread{'s' if threads > 1 else ''}: exported in "
        f"{seconds:.1f} s, max diff {error:.1e} of the reference"
    )
    return {threads: run}


def yardstick_note(peak: float) -> None:
    print(f"core peak (FMA loop): {peak:.1f} GFLOP/s, 1 thread (% peak at T threads: of T x this)")
    print(
        f"ort: {SPEED_SESSION}, the same thread count (the speed yardstick); rel err: hetgen against "
        f"{REFERENCE_SESSION} (the numerical reference); ort opt err: the yardstick against the same; "
        "xnn: XNNPACK through ExecuTorch, MobileNet-class models, at the first thread count only (its pool "
        "is one per process: --threads 2 for its 2-thread figures)"
    )


def thread_table(names: list[str], platform: str, runs: int, counts: list[int]) -> int:
    peak = peak_gflops()
    yardstick_note(peak)
    print(f"{HEADER} {'hg speedup':>10}")
    ratios: dict[int, list[float]] = {count: [] for count in counts}
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-") as tmp:
        for name in names:
            model = MODELS[name]()
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(model, path)
            out = hetgen.compile(platform, path, out=Path(tmp) / path.stem, native_only=True)
            flops = matrix_flops(model)
            print(f"{name}: {core_distance()}")
            figures = measure_threads(out, runs, counts, name, peer=xnnpack_peer(name, model, out, counts[0]))
            base = figures[counts[0]].ours
            for count, figure in figures.items():
                if figure.skipped:
                    print(figure.skipped)
                else:
                    ratios[count].append(figure.ratio)
                print(f"{row(name, count, figure, flops, peak)} {base / figure.ours:10.2f}", flush=True)
            print(f"{name}: after: {core_distance()}")
    for count in counts:
        print(f"{count} thread{'s' if count > 1 else ''}: {summary(ratios[count])}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--platform", default="host")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument(
        "--threads", default="", help="e.g. 1,2: hetgen (HG_THREADS) beside onnxruntime at each thread count"
    )
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; accepted: {', '.join(MODELS)}")
    if args.threads:
        counts = [int(c) for c in args.threads.split(",") if c.strip().isdigit() and 1 <= int(c) <= 64]
        if len(counts) != len(args.threads.split(",")):
            parser.error(f"--threads {args.threads}: expected thread counts from 1 to 64, e.g. 1,2")
        return thread_table(names, args.platform, args.runs, counts)
    peak = peak_gflops()
    yardstick_note(peak)
    print(f"{HEADER} {'est ms':>8}")
    ratios, memory = [], []
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-") as tmp:
        for name in names:
            model = MODELS[name]()
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(model, path)
            out = hetgen.compile(args.platform, path, out=Path(tmp) / path.stem, native_only=True)
            figures = measure(out, args.runs, name, peer=xnnpack_peer(name, model, out))
            estimate = json.loads((out / "hetgen.json").read_text())["estimate_us"] / 1e3
            if figures.skipped:
                print(figures.skipped)
            else:
                ratios.append(figures.ratio)
            print(f"{row(name, 1, figures, matrix_flops(model), peak)} {estimate:8.2f}", flush=True)
            built, fast = memory_figures_for(args.platform, model), memory_figures_for(args.platform, model, "fast")
            memory.append((name, built, fast, rss_mb(out, "hetgen"), rss_mb(out, "ort")))
        print(f"1 thread: {summary(ratios)}")
        print(
            f"{'model':22} {'hetgen MB':>9} {'fast MB':>8} {'bound MB':>9} {'hg/bound':>8} {'hg rss':>7} {'ort rss':>7}"
        )
        for name, built, fast, ours_rss, theirs_rss in memory:
            print(
                f"{name:22} {built.program / 1e6:9.1f} {fast.program / 1e6:8.1f} {built.bound / 1e6:9.1f} "
                f"{built.program / built.bound:8.2f} {ours_rss:7.1f} {theirs_rss:7.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
