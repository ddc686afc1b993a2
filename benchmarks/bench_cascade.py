"""Cascades on the npu: peak SRAM, DMA traffic and estimated time with and without them.

    python benchmarks/bench_cascade.py [--models resnet18,mobilenetv2] [--dtypes float,int8]
                                       [--platforms soc,ethos-u65] [--vela-models mobilenetv2_224,...]

For ResNet-18 (basic blocks, 64-128-256-512 channels) and MobileNetV2 (hetgen/models/cnn.py) at
1x3x224x224, float32 and int8 (hetgen/models/quantized.py: QDQ, per-channel int8 weights), placed by
cost on platforms/soc.yaml (npu with 512 KiB of SRAM), and bench_vela.py's four int8 networks on
platforms/ethos-u65.yaml, each placed twice: with `options: {cascade: false}` and as shipped
(cascades on). Per case:

- cascades: how many, and how many of the npu's groups they hold;
- SRAM KiB: the npu's peak SRAM (the largest tile plan's buffers, layer by layer; with cascades, the
  largest of the cascades' buffers and the other groups' tile plans);
- DMA MB: bytes the npu's DMA moves between its memory and SRAM (every tile plan's loads and stores;
  with cascades, each cascade's first input rows, last output, residuals and weights instead of its
  groups' plans);
- moves MB: the cascades' SRAM-to-SRAM moves (each stripe's kept rows to its windows' tops, new rows
  from each producer's output stripe: hetgen/spec/cascade.py's stripe program), which the price
  charges at the engines' SRAM bandwidth;
- npu est us: the npu groups' estimated time (layer by layer: their cost; with cascades: each
  cascade at one launch and its stripes' estimate, hetgen/spec/cascade.py);
- total est us: `Placement.total_us` without cascades and with them (claimed by `place`: the
  program lowering emits, each cascade one invocation);
- place s: seconds to place without cascades (first, so it plans the tiles), then with them (the
  kernel table's tile plans cached: what choosing the cascades adds).

`--simulate` also builds each case natively (hetgen.compile, -O2) and runs it once in the simulator:
- npu sim us: the npu's simulated time (`hetgen bench`'s device line: kernels, loads, moves,
  invocations, copies in and out);
- DMA MB sim: the bytes the simulator's DMA engine was asked to move (the device stats'
  `dma_bytes`, counted command by command), beside the predicted DMA MB;
- total sim us: the program's simulated makespan (what `hetgen bench` prints as simulated).

`--vela-report FILE` (bench_vela.py's printed output, which lists Vela's time per layer) sets each
chosen cascade on the U65 beside Vela's time for the same layers, and the sums over them.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from hetgen.frontend import import_model  # noqa: E402
from hetgen.models import cnn  # noqa: E402
from hetgen.models.quantized import quantized  # noqa: E402
from hetgen.partition import place  # noqa: E402
from hetgen.platform import load_platform_text  # noqa: E402
from hetgen.platform.model import Role  # noqa: E402

MODELS = {
    "resnet18": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=224),
    "mobilenetv2": lambda: cnn.mobilenet_v2(size=224),
}


def platform(name: str, cascade: bool):
    file = ROOT / "platforms" / f"{name}.yaml"
    text = file.read_text()
    if not cascade:
        if "\noptions:" in text:
            raise SystemExit(f"{file} has options of its own; add cascade: false by hand")
        text += "options: {cascade: false}\n"
    return load_platform_text(text, file=str(file))


def figures(placement, npus: set[str]) -> dict:
    on_npu = [g for g in placement.groups if g.target in npus]
    cascaded = {name: c for c in placement.cascades for name in c.groups}
    sram = [t.sram_bytes for g in on_npu if g.name not in cascaded for t in g.tilings]
    sram += [c.sram_bytes for c in placement.cascades]
    dma = sum(t.dma_bytes for g in on_npu if g.name not in cascaded for t in g.tilings)
    dma += sum(c.dma_bytes for c in placement.cascades)
    moves = sum(c.move_bytes for c in placement.cascades)
    npu_us = sum(g.cost_us for g in on_npu if g.name not in cascaded) + sum(c.cost_us for c in placement.cascades)
    return {
        "groups": len(on_npu),
        "cascades": len(placement.cascades),
        "cascaded": len(cascaded),
        "sram": max(sram, default=0),
        "dma": dma,
        "moves": moves,
        "npu_us": npu_us,
        "total_us": placement.total_us,
    }


def simulated(model, name: str, cascade: bool, npus: set[str], into: dict) -> None:
    """Build the case natively, run it once in the simulator, and add what it counted to `into`."""
    import tempfile

    import hetgen
    from hetgen.runtime.devices import simulation_report

    with tempfile.TemporaryDirectory(prefix="hetgen-bench-cascade-") as tmp:
        out = hetgen.compile(platform(name, cascade), model, out=Path(tmp) / "g", native_only=True, opt=("-O2",))
        report = simulation_report(out)
    devices = [d for d in report.devices if d.path in npus]
    into["npu_sim"] = sum(d.simulated_us for d in devices)
    into["dma_sim"] = sum(d.dma_bytes for d in devices)
    into["total_sim"] = report.simulated_us


def case(graph, name: str, model=None) -> tuple[dict, dict, str]:
    start = time.perf_counter()
    off = place(graph, platform(name, False))
    middle = time.perf_counter()
    on = place(graph, platform(name, True))  # place() claims the cascades it chooses
    seconds = f"{middle - start:.1f} / {time.perf_counter() - middle:.1f}"
    npus = {t.path_str for t in platform(name, True).targets() if t.role is Role.ACCELERATOR}
    off_figures, on_figures = figures(off, npus), figures(on, npus)
    if model is not None:
        simulated(model, name, False, npus, off_figures)
        simulated(model, name, True, npus, on_figures)
    return off_figures, on_figures, seconds


def row(label: str, name: str, off: dict, on: dict, seconds: str) -> str:
    text = (
        f"| {label} | {name} | {on['cascades']} ({on['cascaded']}/{on['groups']}) | "
        f"{off['sram'] / 1024:.1f} | {on['sram'] / 1024:.1f} | {off['dma'] / 1e6:.2f} | {on['dma'] / 1e6:.2f} | "
        f"{on['moves'] / 1e6:.2f} | "
        f"{off['npu_us']:.1f} | {on['npu_us']:.1f} | {off['total_us']:.1f} | {on['total_us']:.1f} | "
        f"{seconds} |"
    )
    if "npu_sim" in on:
        text += (
            f" {off['npu_sim']:.1f} | {on['npu_sim']:.1f} | {off['dma_sim'] / 1e6:.2f} | {on['dma_sim'] / 1e6:.2f} | "
            f"{off['total_sim']:.1f} | {on['total_sim']:.1f} |"
        )
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenetv2")
    parser.add_argument("--dtypes", default="float,int8")
    parser.add_argument("--platforms", default="soc")
    parser.add_argument("--vela-models", default="mobilenetv2_224,mobilenetv2_96,ds_cnn,resnet8")
    parser.add_argument("--vela-report", help="bench_vela.py's output: cascades beside Vela's layers")
    parser.add_argument("--simulate", action="store_true", help="build each case and simulate it, off and on")
    args = parser.parse_args()
    if args.vela_report:
        return beside_vela(Path(args.vela_report).read_text(), args.vela_models.split(","))
    logging.getLogger().setLevel(logging.ERROR)
    simulated_columns = (
        " npu sim us off | npu sim us on | DMA MB sim off | DMA MB sim on | total sim us off | total sim us on |"
        if args.simulate
        else ""
    )
    print(
        "| model | platform | cascades (groups) | SRAM KiB off | SRAM KiB on | DMA MB off | DMA MB on | moves MB | "
        "npu est us off | npu est us on | total est us off | total est us on | place s |" + simulated_columns
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * (6 if args.simulate else 0))
    for model_name in filter(None, args.models.split(",")):
        model = MODELS[model_name]()
        for dtype in filter(None, args.dtypes.split(",")):
            onnx_model = model if dtype == "float" else quantized(model, per_channel=True)
            graph = import_model(onnx_model)
            for name in filter(None, args.platforms.split(",")):
                built = onnx_model if args.simulate else None
                print(row(f"{model_name} {dtype}", name, *case(graph, name, built)), flush=True)
    if args.vela_models:
        import bench_vela  # its networks, as it builds and quantizes them

        for model_name in args.vela_models.split(","):
            onnx_model = quantized(bench_vela.MODELS[model_name](), per_channel=True)
            graph = import_model(onnx_model)
            built = onnx_model if args.simulate else None
            print(row(f"{model_name} int8", "ethos-u65", *case(graph, "ethos-u65", built)), flush=True)
    return 0


def beside_vela(report: str, models: list[str]) -> int:
    """Each cascade the price chooses on the U65 beside Vela's time for its layers (by ONNX node)."""
    import re

    import bench_vela

    for model_name in models:
        if f"\n{model_name} on ethos-u65" not in report:
            continue
        block = report.split(f"\n{model_name} on ethos-u65")[1].split("\n\n")[0]
        vela = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+\S+\s+(\S+)\s+([\d.]+)\s", block, re.M)}
        graph = import_model(quantized(bench_vela.MODELS[model_name](), per_channel=True))
        target = platform("ethos-u65", True)
        placement = place(graph, target)
        groups = {g.name: g for g in placement.groups}
        sums = [0.0, 0.0, 0.0]
        for c in placement.cascades:
            nodes = [node for name in c.groups for node in groups[name].nodes]
            layers = [re.sub(r"^n\d+_qlinear(conv|add)_", "", node) for node in nodes if "_qlinear" in node]
            theirs = sum(vela.get(layer, float("nan")) for layer in layers)
            sums = [sums[0] + theirs, sums[1] + c.layer_us, sums[2] + c.cost_us]
            print(
                f"{model_name}: {'+'.join(layers)}: Vela {theirs:.1f} us, layer by layer {c.layer_us:.1f} us, "
                f"cascade {c.cost_us:.1f} us ({c.cost_us / theirs:.2f} of Vela), {c.stripes} stripes of {c.stripe} "
                f"rows, DMA {c.dma_bytes / 1e3:.0f} kB, moves {c.move_bytes / 1e3:.0f} kB"
            )
        if sums[0]:
            print(
                f"{model_name}: the cascaded layers: Vela {sums[0]:.1f} us, layer by layer {sums[1]:.1f} us "
                f"({sums[1] / sums[0]:.2f}), cascades {sums[2]:.1f} us ({sums[2] / sums[0]:.2f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
