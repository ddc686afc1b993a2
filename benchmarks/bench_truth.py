"""One truth: explain's total beside the simulated total, on the shipped platforms and the model
families the tests use.

    python benchmarks/bench_truth.py                      # every platform x model, a table
    python benchmarks/bench_truth.py --platforms soc --models resnet_tiny --groups

For each pair it builds the native simulation (no board build) into a temporary folder, runs it
once and prints `hetgen explain`'s total (the cost model's price of the placement), the simulated
total (`hetgen bench DIR --format json`: only what the simulated devices counted, kernels, weight
loads, invocations, DMA and link copies, devices concurrent), over how many of the groups, the
estimate-only part it leaves out (the controllers' groups, which run natively and are not timed,
and copies nothing counts), the simulated program with that part at its estimate (what compares
with explain's total) and the copies alone. `--groups` adds each group: estimate, simulated, ratio,
source.
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
        f"{'platform':<9} {'model':<12} {'mode':<6} {'explain':>9} {'simulated':>10} {'groups':>7} {'est only':>9}"
        f" {'sim+est':>9} {'/explain':>8} {'copies est':>11} {'copies sim':>11}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for platform_name in args.platforms:
            for model_name, model in chosen.items():
                for mode in args.modes:
                    explained, report = measure(platform_name, model, Path(tmp) / f"{platform_name}_{model_name}", mode)
                    total = report.with_estimates_us
                    ratio = total / explained["total_us"] if explained["total_us"] else 1.0
                    counted = f"{report.simulated_groups}/{len(report.groups)}"
                    print(
                        f"{platform_name:<9} {model_name:<12} {mode:<6} {explained['total_us']:8.1f}u {report.simulated_us:9.1f}u"
                        f" {counted:>7} {report.estimate_only_us:8.1f}u {total:8.1f}u {ratio:8.2f}"
                        f" {report.transfer_estimate_us:10.1f}u {report.transfer_simulated_us:10.1f}u"
                    )
                    if args.groups:
                        for g in report.groups:
                            sim = "-" if g.simulated_us is None else f"{g.simulated_us:7.2f}u"
                            ratio = "" if g.simulated_us is None else f" {g.simulated_us / g.estimate_us:5.2f}"
                            print(
                                f"    {g.name:<5} {g.label:<18} est {g.estimate_us:7.2f}u sim {sim:>8}{ratio} {g.source}"
                            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
