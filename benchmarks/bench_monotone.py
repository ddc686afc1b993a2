"""More hardware never makes the placement slower: sweeps of each npu figure, flagged where a step is slower.

    python benchmarks/bench_monotone.py                                   # every shipped npu platform
    python benchmarks/bench_monotone.py --platforms soc --models resnet18,mobilenet_v2
    python benchmarks/bench_monotone.py --figures sram --simulate         # also build and simulate each step

For each shipped platform with a tiled accelerator (a target of kind npu, or one refining it: the
Ethos-U kinds), each benchmark model (ResNet-18 and MobileNetV2 at 224x224, a U-Net at 128x128:
hetgen/models/cnn.py; int8 (QDQ, per-channel) on the Ethos-U platforms, whose kinds have no float
datapath) and each figure of that accelerator, the figure is swept with the others as shipped:

- sram: sram_kib, the shipped value x 1/2 ... x 16 (soc: 256 KiB ... 8 MiB);
- macs: macs_per_cycle and int8_macs_per_cycle together, x 1/4 ... x 8 (an Ethos-U: the MAC
  configurations its kind accepts);
- dma: dma_gbps, x 1/4 ... x 4;
- clock: clock_mhz, x 1/4 ... x 4.

Each step is placed by cost (`hetgen.partition.place`) and its estimate (`Placement.total_us`, the
makespan the search reports) printed; `--simulate` also builds it natively and prints what the
simulator counted (`hetgen bench`'s simulated total: slow, a build per step). A step whose estimate
(or simulation) is above the previous step's (more of the figure) is flagged SLOWER, and the
script exits 1 if any is.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hetgen.frontend import import_model  # noqa: E402
from hetgen.models import cnn  # noqa: E402
from hetgen.models.quantized import quantized  # noqa: E402
from hetgen.partition import place  # noqa: E402
from hetgen.platform import load_platform_text  # noqa: E402
from hetgen.spec.invocation import one_unit_per_invocation  # noqa: E402

MODELS = {
    "resnet18": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=224),
    "mobilenet_v2": lambda: cnn.mobilenet_v2(size=224),
    "unet": lambda: cnn.unet(widths=(16, 32, 64, 128), size=128),
}
FIGURES = ("sram", "macs", "dma", "clock")
# What a step may exceed the previous one by and still count as no slower: float rounding only.
SLACK = 1e-9


def platform_files() -> list[Path]:
    """The shipped platforms with a tiled accelerator, by name."""
    found = []
    for file in sorted((ROOT / "platforms").glob("*.yaml")):
        platform = load_platform_text(file.read_text(), file=str(file))
        if any(one_unit_per_invocation(t) and all(n in t.attrs for n in SWEPT) for t in platform.targets()):
            found.append(file)
    return found


# The npu kind's figures the sweeps step (its refinements, the Ethos-U kinds, have them too).
SWEPT = ("sram_kib", "macs_per_cycle", "int8_macs_per_cycle", "dma_gbps", "clock_mhz")


def accelerator_paths(text: str, file: Path) -> list[tuple[tuple[str, ...], str, dict]]:
    """(path below the root, kind name, attributes) of each tiled accelerator of the platform that
    has the npu's figures (dual.yaml's vector unit has a buffer and lanes of its own)."""
    platform = load_platform_text(text, file=str(file))
    return [
        (tuple(target.path[1:]), target.kind.name, dict(target.attrs))
        for target in platform.targets()
        if one_unit_per_invocation(target) and all(name in target.attrs for name in SWEPT)
    ]


def with_attrs(text: str, path: tuple[str, ...], attrs: dict) -> str:
    """The platform file's text with the node at `path` given `attrs` (YAML re-dumped: no comments)."""
    data = yaml.safe_load(text)
    node = data["target"]
    for name in path:
        devices = node["devices"]
        if isinstance(devices[name], str):  # the shorthand: a kind's name
            devices[name] = {"kind": devices[name]}
        node = devices[name]
    node.update(attrs)
    return yaml.safe_dump(data, sort_keys=False)


def steps(figure: str, kind: str, attrs: dict) -> list[dict]:
    """The attribute values of each step of `figure`'s sweep, least hardware first."""
    if figure == "sram":
        return [{"sram_kib": max(1, int(attrs["sram_kib"] * 2**k))} for k in range(-1, 5)]
    if figure == "macs":
        if kind.startswith("ethos-u"):  # the MAC configurations the kind accepts
            choices = {"ethos-u55": (32, 64, 128, 256), "ethos-u65": (256, 512)}.get(
                kind, (attrs["int8_macs_per_cycle"],)
            )
            return [{"int8_macs_per_cycle": m} for m in choices]
        return [
            {
                "macs_per_cycle": max(1, int(attrs["macs_per_cycle"] * 2**k)),
                "int8_macs_per_cycle": max(1, int(attrs["int8_macs_per_cycle"] * 2**k)),
            }
            for k in range(-2, 4)
        ]
    if figure == "dma":
        return [{"dma_gbps": attrs["dma_gbps"] * 2**k} for k in range(-2, 3)]
    if figure == "clock":
        return [{"clock_mhz": max(1, int(attrs["clock_mhz"] * 2**k))} for k in range(-2, 3)]
    raise SystemExit(f"unknown figure {figure!r}; accepted: {', '.join(FIGURES)}")


def simulated_us(text: str, file: Path, model) -> float:
    """Build the step natively and run it once in the simulator: its simulated total."""
    import tempfile

    import hetgen
    from hetgen.runtime.devices import simulation_report

    with tempfile.TemporaryDirectory(prefix="hetgen-bench-monotone-") as tmp:
        platform = load_platform_text(text, file=str(file))
        out = hetgen.compile(platform, model, out=Path(tmp) / "g", native_only=True, opt=("-O2",))
        return simulation_report(out).simulated_us


def label(attrs: dict) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in attrs.items())


def sweep(file: Path, model_name: str, figure: str, simulate: bool) -> int:
    """Print one sweep; the number of steps slower than the one before."""
    text = file.read_text()
    accelerators = accelerator_paths(text, file)
    ethos = any(kind.startswith("ethos-u") for _, kind, _ in accelerators)
    onnx_model = MODELS[model_name]()
    if ethos:
        onnx_model = quantized(onnx_model, per_channel=True)
    graph = import_model(onnx_model)
    print(f"\n{model_name}{' int8' if ethos else ''} on {file.stem}: {figure}")
    print(f"  {'step':<44} {'estimate us':>12} {'simulated us':>13} {'place s':>8}")
    violations = 0
    previous: tuple[float, float | None] | None = None
    path, kind, attrs = accelerators[0]
    for values in steps(figure, kind, attrs):
        stepped = text
        for other_path, _, _ in accelerators:  # every tiled accelerator of the platform alike
            stepped = with_attrs(stepped, other_path, values)
        start = time.process_time()
        placement = place(graph, load_platform_text(stepped, file=str(file)))
        seconds = time.process_time() - start
        estimate = placement.total_us
        simulated = simulated_us(stepped, file, onnx_model) if simulate else None
        slower = []
        if previous is not None:
            if estimate > previous[0] * (1 + SLACK):
                slower.append(f"estimate +{(estimate / previous[0] - 1) * 100:.2f} %")
            if simulated is not None and previous[1] is not None and simulated > previous[1] * (1 + SLACK):
                slower.append(f"simulated +{(simulated / previous[1] - 1) * 100:.2f} %")
        violations += bool(slower)
        shown = f"{simulated:>13.1f}" if simulated is not None else f"{'-':>13}"
        flag = f"  SLOWER ({'; '.join(slower)})" if slower else ""
        print(f"  {label(values):<44} {estimate:>12.1f} {shown} {seconds:>8.2f}{flag}", flush=True)
        previous = (estimate, simulated)
    return violations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platforms", default="", help="platform names (default: every shipped one with an npu)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    parser.add_argument("--figures", default=",".join(FIGURES), help=f"of {', '.join(FIGURES)}")
    parser.add_argument("--simulate", action="store_true", help="build and simulate each step (slow)")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    files = platform_files()
    if args.platforms:
        wanted = args.platforms.split(",")
        files = [f for f in files if f.stem in wanted]
        missing = set(wanted) - {f.stem for f in files}
        if missing:
            raise SystemExit(f"no shipped platform with an npu named {', '.join(sorted(missing))}")
    violations = 0
    for file in files:
        for model_name in filter(None, args.models.split(",")):
            if model_name not in MODELS:
                raise SystemExit(f"unknown model {model_name!r}; accepted: {', '.join(MODELS)}")
            for figure in filter(None, args.figures.split(",")):
                violations += sweep(file, model_name, figure, args.simulate)
    print(f"\n{violations} step{'s' if violations != 1 else ''} slower than the one before")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
