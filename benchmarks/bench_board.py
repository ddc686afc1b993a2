"""Build times of the two builds, and the emulated board program's latency.

    python benchmarks/bench_board.py [--repeats 3] [--runs 20] [--model examples/resnet_tiny.onnx]

For the shipped soc platform: the native build and the board build, each by ninja from clean
(`ninja -t clean`, then `ninja native` / `ninja board`, no launcher), median of `--repeats`.
For platforms/board-aarch64.yaml: the board program under qemu-aarch64, as `hetgen verify --emulate`
runs it: one process (qemu start, load, init, one run), and the latency of one run inside the
process, from the difference between a process doing `--runs` runs and one doing a single run.
Machines here are shared and noisy: medians are quoted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from ninja import BIN_DIR

import hetgen
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.verify import feeds_for

REPO = Path(__file__).resolve().parent.parent
NINJA = str(Path(BIN_DIR) / "ninja")


def ninja(out: Path, *targets: str) -> None:
    subprocess.run([NINJA, "-C", str(out), *targets], check=True, capture_output=True)


def build_seconds(out: Path, target: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        ninja(out, "-t", "clean")
        start = time.perf_counter()
        ninja(out, target)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def emulated_ms(out: Path, runs: int, repeats: int) -> tuple[float, float]:
    """(one process with one run, one run inside a process), in ms."""
    model = EmulatedModel(out)
    feeds = feeds_for(model, out, seed=0)[0]
    single, many = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        model.run(feeds)
        single.append(time.perf_counter() - start)
        start = time.perf_counter()
        model.run(feeds, runs=runs)
        many.append(time.perf_counter() - start)
    one_process = statistics.median(single)
    per_run = (statistics.median(many) - one_process) / (runs - 1)
    return one_process * 1e3, max(per_run, 0.0) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--model", default=str(REPO / "examples/resnet_tiny.onnx"))
    args = parser.parse_args()
    model = Path(args.model).resolve()
    print(f"model {model.name}, {os.cpu_count()} CPUs, ninja's default parallelism, median of {args.repeats}")
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-board-") as tmp:
        soc = hetgen.compile("soc", model, out=Path(tmp) / "soc", build=False)
        native_s = build_seconds(soc, "native", args.repeats)
        board_s = build_seconds(soc, "board", args.repeats)
        print(f"soc native build (cc -O3 -march=native, every target)     {native_s:8.2f} s")
        print(f"soc board build (aarch64 + riscv64 cross compilers, -O3)  {board_s:8.2f} s")
        board = hetgen.compile(REPO / "platforms/board-aarch64.yaml", model, out=Path(tmp) / "board")
        process_ms, run_ms = emulated_ms(board, args.runs, args.repeats)
        print(f"board-aarch64 under qemu-aarch64: one process            {process_ms:8.2f} ms")
        print(f"board-aarch64 under qemu-aarch64: one run in a process   {run_ms:8.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
