"""One truth: explain's total beside the simulated total, on the shipped platforms and the model
families the tests use.

    python benchmarks/bench_truth.py                      # every platform x model, a table
    python benchmarks/bench_truth.py --platforms soc --models resnet_tiny --groups

For each pair it builds the native simulation (no board build) into a temporary folder, runs it
once and prints `hetgen explain`'s total (the cost model's price of the placement), the simulated
total (`hetgen bench DIR --format json`: what the simulated devices counted, kernels, weight loads,
invocations, DMA and link copies, plus the controllers' groups at their estimate, which run
natively and are not simulated), how much of it is simulated at all, and the copies alone.
`--groups` adds each simulated group: estimate, simulated, ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import onnx  # noqa: E402

import hetgen  # noqa: E402
from hetgen.frontend import import_model  # noqa: E402
from hetgen.models import tiny_cnn, transformer_encoder  # noqa: E402
from hetgen.partition.explain import explain_json  # noqa: E402
from hetgen.partition.search import place  # noqa: E402
from hetgen.platform.loader import load_platform  # noqa: E402
from hetgen.runtime.devices import simulation_report  # noqa: E402

PLATFORMS = ("soc", "dual", "slowlink", "host")


def models() -> dict[str, onnx.ModelProto]:
    return {
        "tiny_cnn": tiny_cnn(),
        "resnet_tiny": onnx.load(ROOT / "examples" / "resnet_tiny.onnx"),
        "transformer": transformer_encoder(),
    }


def measure(platform_name: str, model: onnx.ModelProto, out: Path, mode: str = "cost") -> tuple[dict, object]:
    """(explain's JSON, the simulation report) for one platform, model and placement mode."""
    platform = load_platform(str(ROOT / "platforms" / f"{platform_name}.yaml"))
    graph = import_model(model)
    explained = explain_json(place(graph, platform, mode=mode), graph)
    built = hetgen.compile(platform, model, out=out, native_only=True, placement=mode)
    return explained, simulation_report(built)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platforms", nargs="*", default=list(PLATFORMS))
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--groups", action="store_true", help="also each simulated group")
    parser.add_argument(
        "--modes", nargs="*", default=["cost", "greedy"], help="placement modes (greedy offloads what it can)"
    )
    args = parser.parse_args()
    chosen = {name: m for name, m in models().items() if not args.models or name in args.models}
    print(
        f"{'platform':<9} {'model':<12} {'mode':<6} {'explain':>9} {'simulated':>10} {'sim/est':>7} {'of it simulated':>16}"
        f" {'copies est':>11} {'copies sim':>11}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for platform_name in args.platforms:
            for model_name, model in chosen.items():
                for mode in args.modes:
                    explained, report = measure(platform_name, model, Path(tmp) / f"{platform_name}_{model_name}", mode)
                    ratio = report.simulated_us / explained["total_us"] if explained["total_us"] else 1.0
                    print(
                        f"{platform_name:<9} {model_name:<12} {mode:<6} {explained['total_us']:8.1f}u {report.simulated_us:9.1f}u"
                        f" {ratio:7.2f} {report.counted_us:15.1f}u {report.transfer_estimate_us:10.1f}u"
                        f" {report.transfer_simulated_us:10.1f}u"
                    )
                    if args.groups:
                        for g in report.groups:
                            if g.simulated_us is not None:
                                print(
                                    f"    {g.name:<5} {g.label:<18} est {g.estimate_us:7.2f}u sim {g.simulated_us:7.2f}u"
                                    f" {g.simulated_us / g.estimate_us:5.2f}"
                                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
