"""Latency of hetgen's generated code beside onnxruntime (one thread each, optimisations off in
onnxruntime as everywhere in hetgen), on a ResNet-style and a transformer-style model, in one run.

    python benchmarks/bench_models.py [--runs 30] [--platform host]

Prints the median latency of each and the ratio hetgen / onnxruntime (below 1: hetgen is faster).
Machines here are shared and noisy: both run interleaved, and medians are quoted.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import onnx

import hetgen
from hetgen.models import cnn, transformer
from hetgen.runtime.bench import bench


def models() -> dict[str, onnx.ModelProto]:
    return {
        "resnet (3x64x64)": cnn.resnet(size=64),
        "transformer encoder": transformer.transformer_encoder(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--platform", default="host")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-") as tmp:
        print(f"{'model':24} {'hetgen ms':>10} {'ort ms':>10} {'ratio':>7}")
        for name, model in models().items():
            path = Path(tmp) / f"{abs(hash(name))}.onnx"
            onnx.save(model, path)
            out = hetgen.compile(args.platform, path, out=Path(tmp) / path.stem)
            result = bench(out, runs=args.runs)
            print(f"{name:24} {result.hetgen_ms:10.3f} {result.ort_ms:10.3f} {result.ratio:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
