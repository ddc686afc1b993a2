"""Per layer, inside the model: each big convolution and matrix product against the core's FMA peak.

    python benchmarks/bench_layers.py [--models resnet18,vgg@64,densenet121@160] [--runs 20] [--min-mflop 50]

"Big convolutions and GEMMs at >= 85 % of peak" (issue #22) is about the layers as the model runs
them: with the blocks, strategies and workspaces hetgen chose for them in that model (a layer
extracted alone gets other ones: `memory: lean` caps its workspace by a bound that is then the layer
alone). So the model's own board program (`bin/<prefix>_main IN OUT RUNS`, one thread) is linked
again with `-Wl,--wrap` around every kernel function: each call is timed by the calling thread's
CPU time (`CLOCK_THREAD_CPUTIME_ID`: at one thread the worker pool runs every task inline, and CPU
time is what other tenants of a shared machine disturb least) and its wall-clock time. Per call
of at least `--min-mflop` MFLOP of convolution or matrix product (2 per multiply-add; Winograd
counted as the direct convolution, so its % can pass 100): its nodes, the kernel's strategy (the
generated kernel's own comment), median and fastest CPU time over the runs, GFLOP/s and % of the
peak (`hetgen tune`'s FMA loop, as bench_models.py prints it) for both ("best %": on a shared
machine the median measures the other tenants too, the fastest run the code). Last, those layers'
share of the model's CPU time and their aggregate % of peak. `ort %` is the yardstick on the same
layer: onnxruntime at its defaults (graph optimisations on, one thread) on the layer's nodes cut
out of the model alone, same shapes, weights and attributes, by the calling thread's CPU time,
median of as many interleaved runs (`ort_layers.py`; alone, its operands stay in the caches, which
flatters it beside `% peak`); `--no-ort` leaves it out.

    python benchmarks/bench_layers.py --models resnet18 --runs 10 --alone 30

adds `alone %`: each call made 30 times in a row (one more run of the program), the fastest of the
29 after the first, so its input, weights and workspace are where the layer itself left them:
beside `best %`, what the layer loses to operands that the layers before it pushed out of the
caches (a layer updating its input in place computes on its own results again: its time, not its
values, is what counts).

    python benchmarks/bench_layers.py --models resnet18 --runs 10 --against main [--rounds 4]

A/B: the model built by this tree and by another git revision (`ab_threads.build_against`), their
programs run in alternate order, `--rounds` times each, so both see the same load: per layer each
build's median and fastest time and % of peak over all rounds, the ratio of the medians (this tree
over the revision), that ratio over the median ratio of every layer with arithmetic (`vs all`), and
whether the two programs' outputs are the same bits. Two builds of the same sources differ by up
to 3 % on every layer on the shared 2-core machine, and the faster one stays the faster over rounds
(ResNet-18, identical code, 4 rounds of 10 runs: the model's kernels 1.025 and 1.032 in two runs,
`vs all` of its 20 big layers 0.98-1.05), so a change shows in `vs all`, the ratio beside that of
the layers it leaves alone, and only beyond that spread.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_threads import build_against  # noqa: E402
from bench_models import MATRIX_OPS, peak_gflops  # noqa: E402
from ort_layers import ort_layer_times, ort_percent  # noqa: E402

import hetgen  # noqa: E402
from hetgen.models.suite import BENCH_MODELS  # noqa: E402
from hetgen.ops.base import OpInstance  # noqa: E402
from hetgen.ops.registry import op_def  # noqa: E402
from hetgen.pipeline import import_graph  # noqa: E402

# The wrapper around each kernel: one line per call, "index cpu_ns wall_ns", to $HG_LAYER_LOG; each
# call made $HG_LAYER_REPEAT times in a row (1 unless set: `--alone`).
WRAPPER = """#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static FILE *hg_layer_log;
static long long hg_layer_ns(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static void hg_layer_record(int index, long long cpu, long long wall)
{
    if (hg_layer_log == NULL)
        hg_layer_log = fopen(getenv("HG_LAYER_LOG"), "w");
    fprintf(hg_layer_log, "%d %lld %lld\\n", index, cpu, wall);
}
static int hg_layer_repeat(void)
{
    static int repeat;
    if (repeat == 0)
        repeat = getenv("HG_LAYER_REPEAT") ? atoi(getenv("HG_LAYER_REPEAT")) : 1;
    return repeat;
}
"""
WRAP_ONE = """void __real_{name}(void *const *args);
void __wrap_{name}(void *const *args)
{{
    for (int r = 0; r < hg_layer_repeat(); ++r) {{
        const long long cpu = hg_layer_ns(CLOCK_THREAD_CPUTIME_ID), wall = hg_layer_ns(CLOCK_MONOTONIC);
        __real_{name}(args);
        hg_layer_record({index}, hg_layer_ns(CLOCK_THREAD_CPUTIME_ID) - cpu, hg_layer_ns(CLOCK_MONOTONIC) - wall);
    }}
}}
"""


def kernel_calls(out: Path, prefix: str) -> list[str]:
    """The kernel functions the host program calls, in the order of one run (its model.c)."""
    source = (out / "host" / "model.c").read_text()
    return re.findall(rf"^\s+({prefix}_k_\w+)\(args\);", source, flags=re.MULTILINE)


def strategy(out: Path, kernel: str) -> str:
    """How the kernel computes, from the generated kernel's comment ('implicit, from phase planes', ...)."""
    for path in sorted((out / "host" / "kernels").glob("*.c")):
        text = path.read_text()
        start = text.find(f"/* {kernel} computes")
        if start < 0:
            continue
        body = text[start : text.find(f"void {kernel}(", start)]
        found = re.search(r"/\* (?:Convolution as GEMM \(([^)]*)\)|(Winograd) F\(2x2)", body)
        return (found.group(1) or found.group(2)) if found else "-"
    return "-"


def call_flops(model: onnx.ModelProto, out: Path) -> list[tuple[str, int]]:
    """Per call of one run: its nodes (the model's names) and their convolution and matrix-product
    arithmetic."""
    graph = import_graph(model, {})
    source = {node.name: node.source_name or node.op for node in graph.nodes}
    flops = {
        node.name: op_def(node.op, node.opset).lower(OpInstance.of(node, graph)).flops
        for node in graph.nodes
        if node.op in MATRIX_OPS
    }
    manifest = json.loads((out / "hetgen.json").read_text())
    (controller,) = manifest["program"]["controllers"].values()
    calls = [tuple(step["call"]) for entry in controller["entries"] for step in entry if "call" in step]
    # a node the kernel choice stage added (a blocked layout's reorder, `options.layout: nchwc`) is
    # not the model's: named as the program names it, no arithmetic
    return [
        ("+".join(source.get(node, node) for node in nodes), sum(flops.get(node, 0) for node in nodes))
        for nodes in calls
    ]


def profiled_main(out: Path, prefix: str, kernels: list[str], work: Path) -> Path:
    """The model's board program linked again with a timing wrapper around each kernel function."""
    names = sorted(set(kernels))
    wrapper = work / "hg_layer_wrap.c"
    wrapper.write_text(WRAPPER + "".join(WRAP_ONE.format(name=n, index=i) for i, n in enumerate(names)))
    main = f"bin/{prefix}_main"
    command = subprocess.run(
        ["ninja", "-C", str(out), "-t", "commands", main], capture_output=True, text=True, check=True
    ).stdout.strip()
    link = shlex.split(command.splitlines()[-1])
    cc = link[0]
    subprocess.run([cc, "-O2", "-c", str(wrapper), "-o", str(work / "hg_layer_wrap.o")], check=True)
    target = work / "profiled_main"
    link[link.index("-o") + 1] = str(target)
    link[1:1] = [str(work / "hg_layer_wrap.o"), "-Wl," + ",".join(f"--wrap={n}" for n in names)]
    subprocess.run(link, cwd=out, check=True)
    return target


def layer_times(out: Path, model: onnx.ModelProto, runs: int, work: Path, repeat: int = 1):
    """Per call of one run: (its nodes, flops, kernel, CPU ns per run, wall ns per run). With
    `repeat` > 1 each call is made that many times in a row, and its times are those of the calls
    after the first: the kernel alone, its operands and workspace in the caches it left them in."""
    manifest = json.loads((out / "hetgen.json").read_text())
    prefix = manifest["prefix"] if isinstance(manifest.get("prefix"), str) else "hg_host"
    kernels = kernel_calls(out, prefix)
    calls = call_flops(model, out)
    if len(kernels) != len(calls):
        raise SystemExit(f"{out}: {len(kernels)} kernel calls in model.c, {len(calls)} in the program")
    program = profiled_main(out, prefix, kernels, work)
    rng = np.random.default_rng(0)
    inputs = work / "inputs.bin"
    with inputs.open("wb") as stream:
        for tensor in manifest["inputs"]:
            rng.standard_normal(tensor["shape"]).astype(tensor["dtype"]).tofile(stream)
    log = work / "layers.log"
    environment = {**os.environ, "HG_THREADS": "1", "HG_LAYER_LOG": str(log), "HG_LAYER_REPEAT": str(repeat)}
    subprocess.run([str(program), str(inputs), str(work / "outputs.bin"), str(runs + 1)], env=environment, check=True)
    rows = [tuple(int(v) for v in line.split()) for line in log.read_text().splitlines()]
    per_run = len(kernels)
    if len(rows) != per_run * (runs + 1) * repeat:
        raise SystemExit(f"{out}: {len(rows)} timed calls, expected {per_run * (runs + 1) * repeat}")
    rows = rows[per_run * repeat :]  # the first run warms the caches and the pages
    if repeat > 1:  # each call's repeats after the first, one call after another
        rows = [row for call in range(0, len(rows), repeat) for row in rows[call + 1 : call + repeat]]
        per_run *= repeat - 1
    step = max(1, repeat - 1)  # the rows of one call in one run
    chosen = [
        [row for run in range(0, len(rows), per_run) for row in rows[run + i * step : run + (i + 1) * step]]
        for i in range(len(calls))
    ]
    return [
        (nodes, flops, kernels[i], [r[1] for r in chosen[i]], [r[2] for r in chosen[i]])
        for i, (nodes, flops) in enumerate(calls)
    ]


def by_strategy(out: Path, layers) -> dict[str, tuple[int, float, int]]:
    """Per strategy of the calls with convolution or matrix-product arithmetic, whatever their size:
    (calls, median CPU ns, flops), summed."""
    totals: dict[str, tuple[int, float, int]] = {}
    for _, flops, kernel, cpu, _ in layers:
        if flops:
            count, time, work = totals.get(strategy(out, kernel), (0, 0.0, 0))
            totals[strategy(out, kernel)] = (count + 1, time + statistics.median(cpu), work + flops)
    return totals


def compare(name: str, path: Path, model: onnx.ModelProto, args, peak: float) -> None:
    """`model` by this tree and by `args.against`, layer by layer, rounds in alternate order."""
    builds = {
        "this": hetgen.compile(args.platform, path, out=path.parent / f"{path.stem}-this", native_only=True),
        args.against: path.parent / f"{path.stem}-against",
    }
    build_against(path, args.against, builds[args.against])
    times: dict[str, list[tuple[str, int, list[int]]]] = {}  # per build, per call: nodes, flops, CPU ns
    for round_ in range(args.rounds):
        for label in list(builds)[:: 1 if round_ % 2 == 0 else -1]:
            work = path.parent / f"{path.stem}-{round_}-{label.replace('/', '_')}"
            work.mkdir()
            layers = layer_times(builds[label], model, args.runs, work)
            calls = times.setdefault(label, [(nodes, flops, []) for nodes, flops, *_ in layers])
            for (_, _, cpu), (*_, layer_cpu, _) in zip(calls, layers):
                cpu.extend(layer_cpu)
    if [nodes for nodes, *_ in times["this"]] != [nodes for nodes, *_ in times[args.against]]:
        raise SystemExit(f"{name}: the two builds call different kernels; compare their tables without --against")
    outputs = {
        label: (path.parent / f"{path.stem}-0-{label.replace('/', '_')}" / "outputs.bin").read_bytes()
        for label in builds
    }
    same = outputs["this"] == outputs[args.against]
    pairs = [(nodes, flops, base, mine) for (nodes, flops, base), (*_, mine) in zip(times[args.against], times["this"])]
    # the builds' own difference: the median ratio over every layer with arithmetic
    bias = statistics.median(
        statistics.median(mine) / statistics.median(base) for _, flops, base, mine in pairs if flops
    )
    print(
        f"{'model':16} {'layer':34} {'MFLOP':>7} {args.against[:14]:>14} ms {'best %':>6} {'this ms':>8} {'best %':>6}"
        f" {'ratio':>6} {'vs all':>6}"
    )
    for nodes, flops, base, mine in pairs:
        if flops < args.min_mflop * 1e6:
            continue
        ratio = statistics.median(mine) / statistics.median(base)
        print(
            f"{name:16} {nodes[:34]:34} {flops / 1e6:7.0f} {statistics.median(base) / 1e6:17.3f}"
            f" {100 * flops / min(base) / peak:5.0f}% {statistics.median(mine) / 1e6:8.3f}"
            f" {100 * flops / min(mine) / peak:5.0f}% {ratio:6.3f} {ratio / bias:6.3f}"
        )
    totals = {label: sum(statistics.median(cpu) for *_, cpu in times[label]) for label in builds}
    print(
        f"{name:16} the model's kernels: {args.against} {totals[args.against] / 1e6:.2f} ms, this {totals['this'] / 1e6:.2f}"
        f" ms ({totals['this'] / totals[args.against]:.3f}); median ratio of the layers {bias:.3f};"
        f" outputs {'the same bits' if same else 'DIFFERENT'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,vgg@64,densenet121@160")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--min-mflop", type=float, default=50.0)
    parser.add_argument("--platform", default="host")
    parser.add_argument("--against", help="a git revision to compare with, layer by layer (A/B)")
    parser.add_argument("--rounds", type=int, default=4, help="with --against: runs of each build, alternated")
    parser.add_argument("--alone", type=int, default=0, help="also each call made this many times in a row")
    parser.add_argument(
        "--no-ort", dest="ort", action="store_false", help="leave out `ort %%`, onnxruntime on each layer alone"
    )
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in BENCH_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; accepted: {', '.join(BENCH_MODELS)}")
    peak = peak_gflops()
    print(f"core peak (FMA loop): {peak:.1f} GFLOP/s, 1 thread; CPU time of the calling thread, {args.runs} runs")
    if not args.against:
        print(
            f"{'model':16} {'layer':34} {'strategy':22} {'MFLOP':>7} {'ms':>7} {'best ms':>7} {'% peak':>6} {'best %':>6}"
            + (f" {'alone %':>7}" if args.alone else "")
            + (f" {'ort %':>6}" if args.ort else "")
        )
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-layers-") as tmp:
        for name in names:
            model = BENCH_MODELS[name]()
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(model, path)
            if args.against:
                compare(name, path, model, args, peak)
                continue
            out = hetgen.compile(args.platform, path, out=Path(tmp) / path.stem, native_only=True)
            work = Path(tmp) / f"{path.stem}-layers"
            work.mkdir()
            layers = layer_times(out, model, args.runs, work)
            alone = [None] * len(layers)
            if args.alone > 1:
                (work / "alone").mkdir()
                alone = [min(cpu) for *_, cpu, _ in layer_times(out, model, 1, work / "alone", args.alone)]
            total = sum(statistics.median(cpu) for *_, cpu, _ in layers)
            big = [nodes for nodes, flops, *_ in layers if flops >= args.min_mflop * 1e6]
            ort = dict(zip(big, ort_layer_times(model, big, args.runs))) if args.ort else {}
            big_time = big_flops = 0.0
            for (nodes, flops, kernel, cpu, _), alone_best in zip(layers, alone):
                if flops < args.min_mflop * 1e6:
                    continue
                median, best = statistics.median(cpu), min(cpu)
                big_time, big_flops = big_time + median, big_flops + flops
                print(
                    f"{name:16} {nodes[:34]:34} {strategy(out, kernel)[:22]:22} {flops / 1e6:7.0f} {median / 1e6:7.3f}"
                    f" {best / 1e6:7.3f} {100 * flops / median / peak:5.0f}% {100 * flops / best / peak:5.0f}%"
                    + (f" {100 * flops / alone_best / peak:6.0f}%" if alone_best else "")
                    + (f" {ort_percent(flops, ort[nodes], peak)}" if args.ort else ""),
                    flush=True,
                )
            if big_time:
                print(
                    f"{name:16} layers of >= {args.min_mflop:g} MFLOP: {100 * big_time / total:.0f} % of the model's"
                    f" {total / 1e6:.2f} ms, {100 * big_flops / big_time / peak:.0f} % of peak together"
                )
            for kind, (count, time, flops) in sorted(by_strategy(out, layers).items(), key=lambda kv: -kv[1][1]):
                print(
                    f"{name:16} every {kind} layer ({count}): {time / 1e6:.2f} ms, {100 * time / total:.0f} % of the"
                    f" model, {100 * flops / time / peak:.0f} % of peak together"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
