"""Where a generated program's memory goes beyond its bound (hetgen/lower/peak_memory.py), per model.

    python benchmarks/memory_breakdown.py [--models alexnet@224,squeezenet@224] [--memory lean|fast] [--top 5]
    python benchmarks/memory_breakdown.py --models small      # the smaller models of SMALL_MODELS

The program (arena + packed weights + the caller's buffers) less the bound (the model's weights +
the liveness lower bound of its activations) splits into three parts, in MB:
  weights+   what packing adds to the weights (panel padding, Winograd's 16/9 larger taps)
  scratch+   the most a kernel's workspace adds to the activations live at its step, over all steps
             (the peak of activations + workspace, less the activation bound)
  planner+   what the arena planner loses to fragmentation (the arena, less that peak)
and `arena`: (arena + packed weights) / (the bound less the caller's buffers), the caller's input and
output buffers (io MB) left out of both sides; `act MB` is the activation bound, io included.
Then the kernels whose workspace is largest: the step's live activations, its workspace and their sum.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import MODELS  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from hetgen import lower  # noqa: E402
from hetgen.lower.peak_memory import live_bytes_per_step, memory_figures  # noqa: E402
from hetgen.lower.program import Call  # noqa: E402
from hetgen.models import cnn  # noqa: E402
from hetgen.partition.search import place  # noqa: E402
from hetgen.pipeline import import_graph  # noqa: E402
from hetgen.platform.loader import load_platform_text  # noqa: E402

MB = 1e6
# Smaller models, where the arena planner's fragmentation weighs most (few large activations,
# workspaces near their size): `--models small` measures these.
SMALL_MODELS = {
    "resnet(32,64)@64": lambda: cnn.resnet(widths=(32, 64), size=64),
    "resnet@32": lambda: cnn.resnet(size=32),
    "resnet-b2(24,48,96)@48": lambda: cnn.resnet(widths=(24, 48, 96), blocks=2, size=48),
    "densenet@32": lambda: cnn.densenet(size=32),
    "densenet-g12@48": lambda: cnn.densenet(growth=12, size=48),
    "googlenet@96": lambda: cnn.googlenet(size=96),
    "googlenet@48": lambda: cnn.googlenet(size=48),
    "vgg@128": lambda: cnn.vgg(size=128),
    "mobilenetv2@32": lambda: cnn.mobilenet_v2(size=32),
}
ALL_MODELS = {**MODELS, **SMALL_MODELS}


def breakdown(name: str, memory: str, top: int) -> None:
    model = ALL_MODELS[name]()
    graph = import_graph(model, {})
    platform = load_platform_text(
        f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{memory: {memory}}}\n"
    )
    lowered = lower.lower(graph, platform, place(graph, platform))
    weights = sum(numpy_helper.to_array(init).nbytes for init in model.graph.initializer)
    figures = memory_figures(lowered, weights)
    root = lowered.root
    live = live_bytes_per_step(root)
    steps = root.steps
    scratch = [step.unit.kernel.scratch_bytes if isinstance(step, Call) else 0 for step in steps]
    with_scratch = max((a + s for a, s in zip(live, scratch)), default=0)
    weights_extra = figures.weights - figures.model_weights
    scratch_extra = with_scratch - max(live, default=0)
    planner_extra = figures.arena - with_scratch
    print(
        f"{name:22} {figures.program / MB:8.2f} {figures.bound / MB:8.2f} {figures.program / figures.bound:6.3f}"
        f" {weights_extra / MB:9.2f} {scratch_extra / MB:9.2f} {planner_extra / MB:9.2f}"
        f" {figures.arena_ratio:6.3f} {figures.activation_bound / MB:8.2f} {figures.io / MB:6.2f}"
        f" {figures.model_weights / MB:8.2f}"
    )
    ranked = sorted((i for i, step in enumerate(steps) if scratch[i]), key=lambda i: -(live[i] + scratch[i]))[:top]
    for i in ranked:
        kernel = steps[i].unit.kernel
        variant = kernel.params.get("variant", "")
        print(
            f"    {steps[i].unit.label[:48]:48} {variant:10} live {live[i] / MB:6.2f} + scratch {scratch[i] / MB:6.2f}"
            f" = {(live[i] + scratch[i]) / MB:6.2f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--memory", default="lean", choices=("lean", "fast"))
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    names = [model for name in names for model in (SMALL_MODELS if name == "small" else (name,))]
    unknown = [name for name in names if name not in ALL_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; accepted: small, {', '.join(ALL_MODELS)}")
    print(
        f"{'model':22} {'prog MB':>8} {'bound MB':>8} {'ratio':>6} {'weights+':>9} {'scratch+':>9} {'planner+':>9}"
        f" {'arena':>6} {'act MB':>8} {'io MB':>6} {'wts MB':>8}"
    )
    for name in names:
        breakdown(name, args.memory, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
