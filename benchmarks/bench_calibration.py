"""The cost model's estimate of the host's latency before and after `hetgen tune`, beside the latency
measured, per model:

    hetgen tune host --out host-tuned.yaml
    python benchmarks/bench_calibration.py host-tuned.yaml [--models resnet18@64,mobilenetv2,transformer] [--runs 15]

Each model is built twice, for `host` (the kind's default figures and cache blocks) and for the
tuned platform (measured figures and blocks); both libraries run interleaved in one process, and
the figure kept is each one's fastest run: on a machine shared with other work, the fastest run is
the one closest to what the code costs (a median moves with the load). `est` is what `hetgen
explain` prices the whole model at (the project's `estimate_us`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_models import MODELS  # noqa: E402

import hetgen  # noqa: E402
from hetgen.runtime.loader import checked_input, load  # noqa: E402
from hetgen.runtime.verify import feeds_for  # noqa: E402


def fastest_ms(outs: list[Path], runs: int) -> list[float]:
    models = [load(out) for out in outs]
    feeds = feeds_for(models[0], outs[0], 0)[0]
    inputs = [checked_input(t, feeds[t.name]) for t in models[0].inputs]
    outputs = [np.empty(t.shape, dtype=t.dtype) for t in models[0].outputs]
    best = [float("inf")] * len(models)
    for _ in range(runs + 1):
        for index, model in enumerate(models):
            start = time.perf_counter()
            model.run_into(inputs, outputs)
            best[index] = min(best[index], (time.perf_counter() - start) * 1e3)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tuned", help="a platform file written by `hetgen tune`")
    parser.add_argument("--base", default="host", help="the platform before tuning (default: host)")
    parser.add_argument("--models", default="resnet18@64,mobilenetv2,transformer")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print(f"{'model':14} {'est before':>10} {'est after':>10} {'measured':>9} {'tuned blocks':>12}   (ms)")
    with tempfile.TemporaryDirectory(prefix="hetgen-calibration-") as tmp:
        for name in args.models.split(","):
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(MODELS[name](), path)
            outs = [
                hetgen.compile(platform, path, out=Path(tmp) / f"{path.stem}_{index}", native_only=True)
                for index, platform in enumerate((args.base, args.tuned))
            ]
            before, after = (json.loads((out / "hetgen.json").read_text())["estimate_us"] / 1e3 for out in outs)
            measured, tuned = fastest_ms(outs, args.runs)
            print(f"{name:14} {before:10.2f} {after:10.2f} {measured:9.2f} {tuned:12.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
