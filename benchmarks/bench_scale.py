"""How generation and build time grow with the number of nodes.

    python benchmarks/bench_scale.py                       # chain, mixed, dag at 250, 1000, 4000 on host
    python benchmarks/bench_scale.py --platforms host,soc --sizes 1000,5000
    python benchmarks/bench_scale.py --large               # adds 20000 and 100000 (generate only past 20000)
    python benchmarks/bench_scale.py --profile 4000        # cProfile of one in-process generation

Models (ONNX, built here with hetgen's own model builder):
- chain: Relu → Add(constant) → Mul(constant) → Sigmoid, repeated, on a [1, 8, 8, 8] tensor;
- mixed: Conv 3x3 → Relu → Add(residual) → MatMul [8, 8], repeated (the op mix of a small CNN);
- dag: a random DAG whose nodes read any of the last 16 tensors (Conv 1x1, Relu, Add, Mul), each
  tensor read at least once where it can be.

Each case runs in a fresh process (`hetgen generate` then `ninja`, the CLI's two halves) so peak RSS
is the stage's own; CPU seconds (user + system, children included) are printed next to wall seconds
because a shared machine inflates the latter. The fixed start-up (Python, onnx, numpy: ~2 CPU s)
is part of every generate figure, so slopes over small N read low. Per-stage CPU seconds come from
the pipeline's stage timer (hetgen/progress.py, `--stage-times`).
The slope is a least-squares fit of log(time) against log(N): 1.0 is linear, 2.0 quadratic.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import ninja as ninja_package  # noqa: E402
import onnx  # noqa: E402

from hetgen.models._builder import Builder  # noqa: E402

SHAPE = (1, 8, 8, 8)


def chain_model(nodes: int, seed: int = 0) -> onnx.ModelProto:
    b = Builder(f"chain{nodes}", opset=17, seed=seed)
    x = b.input("x", SHAPE)
    one = b.scalar(0.5, "half")
    for i in range(nodes):
        step = i % 4
        if step == 0:
            x = b.op("Relu", [x])
        elif step == 1:
            x = b.op("Add", [x, one])
        elif step == 2:
            x = b.op("Mul", [x, one])
        else:
            x = b.op("Sigmoid", [x])
    b.output(x, SHAPE)
    return _model(b)


def mixed_model(nodes: int, seed: int = 0) -> onnx.ModelProto:
    b = Builder(f"mixed{nodes}", opset=17, seed=seed)
    x = b.input("x", SHAPE)
    residual = x
    channels, size = SHAPE[1], SHAPE[3]
    for i in range(nodes):
        step = i % 4
        if step == 0:
            residual = x
            x = b.op("Conv", [x, b.weight((channels, channels, 3, 3), "w")], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        elif step == 1:
            x = b.op("Relu", [x])
        elif step == 2:
            x = b.op("Add", [x, residual])
        else:
            x = b.op("MatMul", [x, b.weight((size, size), "m")])
    b.output(x, SHAPE)
    return _model(b)


def dag_model(nodes: int, seed: int = 0, frontier: int = 16) -> onnx.ModelProto:
    rng = random.Random(seed)
    b = Builder(f"dag{nodes}", opset=17, seed=seed)
    pool = [b.input("x", SHAPE)]
    channels = SHAPE[1]
    unread: dict[str, None] = {}  # in the order they were produced
    for _ in range(nodes):
        window = pool[-frontier:]
        # The first operand is the oldest tensor of the window nobody read yet: a model's tensors
        # are read (a random choice alone leaves a fifth of them as graph outputs).
        first = next((name for name in unread if name in window[:4]), None) or rng.choice(window)
        op = rng.choice(("Conv", "Relu", "Add", "Mul"))
        if op == "Conv":
            weight = b.weight((channels, channels, 1, 1), "w")
            out = b.op("Conv", [first, weight], kernel_shape=[1, 1])
        elif op == "Relu":
            out = b.op("Relu", [first])
        else:
            second = rng.choice(window)
            out = b.op(op, [first, second])
            unread.pop(second, None)
        unread.pop(first, None)
        unread[out] = None
        pool.append(out)
    read = {name for node in b.nodes for name in node.input}
    for name in pool[1:]:
        if name not in read:
            b.output(name, SHAPE)
    return _model(b)


MODELS = {"chain": chain_model, "mixed": mixed_model, "dag": dag_model}


def _model(b: Builder) -> onnx.ModelProto:
    from onnx import helper

    graph = helper.make_graph(b.nodes, b.name, b.inputs, b.outputs, b.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)], ir_version=8)


def _child_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def run_case(model_name: str, nodes: int, platform: str, build: bool, workdir: Path) -> dict:
    """Generate (and build) one model in child processes; the figures of each."""
    model_path = workdir / f"{model_name}{nodes}.onnx"
    onnx.save(MODELS[model_name](nodes), model_path)
    out = workdir / f"{model_name}{nodes}-{platform}"
    times_file = workdir / "stages.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    platform_file = ROOT / "platforms" / f"{platform}.yaml"
    command = [sys.executable, "-m", "hetgen", "generate", str(platform_file), str(model_path), "-o", str(out)]
    if (ROOT / "hetgen" / "progress.py").exists():  # the stage timer; older checkouts have none
        command += ["--stage-times", str(times_file)]
    row = {"model": model_name, "nodes": nodes, "platform": platform}
    row["generate_s"], row["generate_cpu_s"], row["generate_rss_mib"] = _timed(command, env)
    row["stages"] = json.loads(times_file.read_text())["cpu"] if times_file.exists() else {}
    if build:
        ninja = str(Path(ninja_package.BIN_DIR) / "ninja")  # the one hetgen builds with
        row["build_s"], row["build_cpu_s"], row["build_rss_mib"] = _timed([ninja, "-C", str(out)], env)
    row["c_files"] = sum(1 for _ in out.rglob("*.c"))
    shutil.rmtree(out, ignore_errors=True)
    model_path.unlink()
    return row


def _timed(command: list[str], env: dict) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, of the command and everything it ran) and peak RSS
    in MiB (of its largest process). wait4 gives the child's own figures, where RUSAGE_CHILDREN
    would mix in the earlier children's."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    stdout, stderr = process.stdout.read(), process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(command)} failed:\n{stdout.decode()[-3000:]}\n{stderr.decode()[-3000:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(seconds) against log(nodes)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(t, 1e-3)) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


STAGES = ("import", "kernels", "placement", "lowering", "codegen", "build_files", "write")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,1000,4000", help="node counts (comma-separated)")
    parser.add_argument("--large", action="store_true", help="also 20000 and 100000 nodes (those generate only)")
    parser.add_argument("--models", default="chain,mixed,dag", help=f"of {', '.join(MODELS)}")
    parser.add_argument("--platforms", default="host", help="platform files under platforms/ (default host)")
    parser.add_argument("--no-build", action="store_true", help="generate only")
    parser.add_argument("--build-limit", type=int, default=20000, help="build only up to this many nodes")
    parser.add_argument("--profile", type=int, metavar="N", help="cProfile one in-process generation of N nodes")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    if args.profile:
        return profile(args.models.split(",")[0], args.profile, args.platforms.split(",")[0])
    sizes = [int(s) for s in args.sizes.split(",")] + ([20000, 100000] if args.large else [])
    rows = []
    header = f"{'model':<6} {'platform':<8} {'nodes':>7} {'gen s':>7} {'gen cpu':>7} {'gen MiB':>8} "
    header += f"{'build s':>8} {'bld cpu':>8} {'bld MiB':>8} {'.c':>5}  "
    print(header + "  ".join(f"{s:>9}" for s in STAGES), flush=True)
    with tempfile.TemporaryDirectory(prefix="hetgen-scale-") as tmp:
        for platform in args.platforms.split(","):
            for model_name in args.models.split(","):
                for nodes in sizes:
                    build = not args.no_build and nodes <= args.build_limit
                    row = run_case(model_name, nodes, platform, build, Path(tmp))
                    rows.append(row)
                    stages = "  ".join(f"{row['stages'].get(s, float('nan')):>9.2f}" for s in STAGES)
                    build_s = (
                        f"{row['build_s']:>8.2f} {row['build_cpu_s']:>8.2f} {row['build_rss_mib']:>8.0f}"
                        if build
                        else f"{'-':>8} {'-':>8} {'-':>8}"
                    )
                    print(
                        f"{model_name:<6} {platform:<8} {nodes:>7} {row['generate_s']:>7.2f} {row['generate_cpu_s']:>7.2f} "
                        f"{row['generate_rss_mib']:>8.0f} {build_s} {row['c_files']:>5}  {stages}",
                        flush=True,
                    )
                _print_slopes([r for r in rows if r["model"] == model_name and r["platform"] == platform])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def _print_slopes(rows: list[dict]) -> None:
    if len(rows) < 2:
        return
    gen = slope([(r["nodes"], r["generate_s"]) for r in rows])
    gen_cpu = slope([(r["nodes"], r["generate_cpu_s"]) for r in rows])
    rss = slope([(r["nodes"], r["generate_rss_mib"]) for r in rows])
    built = [r for r in rows if "build_s" in r]
    build = f"{slope([(r['nodes'], r['build_s']) for r in built]):.2f}" if len(built) >= 2 else "-"
    build_cpu = f"{slope([(r['nodes'], r['build_cpu_s']) for r in built]):.2f}" if len(built) >= 2 else "-"
    staged = [r for r in rows if r["stages"]]
    stages = f"{slope([(r['nodes'], sum(r['stages'].values())) for r in staged]):.2f}" if len(staged) >= 2 else "-"
    print(
        f"{'':<6} slope (log-log): generate {gen:.2f} (cpu {gen_cpu:.2f}; its stages' cpu, start-up left out, "
        f"{stages}), build {build} (cpu {build_cpu}), generate peak RSS {rss:.2f}",
        flush=True,
    )


def profile(model_name: str, nodes: int, platform: str) -> int:
    import cProfile
    import pstats

    from hetgen.pipeline import CompileOptions, compile_model

    with tempfile.TemporaryDirectory(prefix="hetgen-scale-") as tmp:
        model_path = Path(tmp) / "model.onnx"
        onnx.save(MODELS[model_name](nodes), model_path)
        options = CompileOptions(out=Path(tmp) / "out", build=False)
        profiler = cProfile.Profile()
        profiler.enable()
        compile_model(ROOT / "platforms" / f"{platform}.yaml", model_path, options)
        profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
