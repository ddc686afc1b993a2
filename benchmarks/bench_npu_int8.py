"""int8 on the npu against float, on the shipped platforms with an npu, at full and at half SRAM.

    python benchmarks/bench_npu_int8.py [--models resnet18,mobilenetv2] [--platforms soc,mcu-npu,...]
                                        [--dtypes f32,int8] [--estimate-only] [--keep DIR]

For ResNet-18 (basic blocks, 64-128-256-512 channels) and MobileNetV2 (hetgen/models/cnn.py) at
1x3x224x224, float32 and int8 (onnxruntime's quantize_static, QDQ, per-channel int8 weights, int8
activations: hetgen/models/quantized.py), each placed by cost on each platform with its npus'
SRAM as shipped and halved, the line says:

- est us: the placement's estimate of one run (`Placement.total_us`, hetgen/partition/timeline.py);
- sim us: `hetgen bench`'s simulated_us: the built program (native build) run once, replayed with
  its devices concurrent, each npu invocation at the cycles the simulator counted from the tiles it
  was given, the controllers' kernels at their estimate;
- npu groups: of all groups, how many the placement put on the npu; tiled: how many of those run
  as more than one tile;
- gen s: seconds to import, place, lower, generate and build (native only) the project.

Then per model and platform: int8 against float (est and sim, > 1: int8 faster), and what halving
the SRAM costs each (half / full, est and sim). The int8 models are quantized once per model and
kept beside the float ones for the run. `--estimate-only` places without building (no sim column);
`--dtypes int8` runs the int8 models only (a change to the int8 datapath leaves the float rows as
they were: the ratios that need them print "-").
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import hetgen  # noqa: E402
from hetgen.frontend import import_model  # noqa: E402
from hetgen.models import cnn  # noqa: E402
from hetgen.models.quantized import quantized  # noqa: E402
from hetgen.partition import place  # noqa: E402
from hetgen.platform import load_platform, load_platform_text  # noqa: E402
from hetgen.platform.model import Role  # noqa: E402
from hetgen.runtime.devices import simulation_report  # noqa: E402

MODELS = {
    "resnet18": lambda: cnn.resnet(widths=(64, 128, 256, 512), blocks=2, size=224),
    "mobilenetv2": lambda: cnn.mobilenet_v2(size=224),
}
PLATFORMS = ("soc", "mcu-npu", "board-aarch64", "dual")


def npu_sram_kib(file: Path) -> list[int]:
    """The SRAM of each npu of the platform in `file`, as shipped."""
    platform = load_platform(str(file))
    return [int(t.attrs["sram_kib"]) for t in platform.targets() if t.role is Role.ACCELERATOR and t.kind.name == "npu"]


def platform_with_sram(file: Path, sram_kib: int):
    """The platform in `file`, its npus given `sram_kib` of SRAM (every shipped platform has one npu)."""
    text = file.read_text()
    text = re.sub(r"\{kind: npu(, sram_kib: \d+)?", f"{{kind: npu, sram_kib: {sram_kib}", text)  # flow style
    text = re.sub(r"^( *)kind: npu\n(\1sram_kib: \d+\n)?", rf"\1kind: npu\n\1sram_kib: {sram_kib}\n", text, flags=re.M)
    platform = load_platform_text(text, file=str(file))
    if npu_kib(platform) != [sram_kib]:
        raise SystemExit(f"{file}: could not set its npu's SRAM to {sram_kib} KiB")
    return platform


def npu_kib(platform) -> list[int]:
    return [int(t.attrs["sram_kib"]) for t in platform.targets() if t.role is Role.ACCELERATOR and t.kind.name == "npu"]


def run_case(model, platform, out: Path | None) -> dict:
    start = time.perf_counter()
    graph = import_model(model)
    placement = place(graph, platform)
    npus = {t.path_str for t in platform.targets() if t.role is Role.ACCELERATOR and t.kind.name == "npu"}
    on_npu = [g for g in placement.groups if g.target in npus]
    result = {
        "est": placement.total_us,
        "groups": len(placement.groups),
        "npu": len(on_npu),
        "tiled": sum(1 for g in on_npu if any(t.count > 1 for t in g.tilings)),
        "sim": None,
    }
    if out is not None:
        project = hetgen.compile(platform, model, out=out, native_only=True)
        result["gen"] = time.perf_counter() - start
        result["sim"] = simulation_report(project).simulated_us
    else:
        result["gen"] = time.perf_counter() - start
    return result


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:5.2f}" if a and b else "    -"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--platforms", default=",".join(PLATFORMS))
    parser.add_argument("--dtypes", default="f32,int8", help="f32, int8 or both (comma separated)")
    parser.add_argument("--estimate-only", action="store_true", help="place only: no build, no simulation")
    parser.add_argument("--keep", metavar="DIR", help="build the projects in DIR (default: a temporary folder)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # quantize_static's advice to pre-process (done)
    print(
        f"{'model':12} {'platform':14} {'dtype':5} {'sram KiB':>8} {'est us':>10} {'sim us':>10} "
        f"{'npu groups':>10} {'tiled':>5} {'gen s':>6}"
    )
    summary = []
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-npu-int8-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        for name in args.models.split(","):
            float_model = MODELS[name]()
            int8_model = quantized(float_model, "QDQ", per_channel=True)
            for tag in args.platforms.split(","):
                file = ROOT / "platforms" / f"{tag}.yaml"
                (full,) = npu_sram_kib(file)
                results = {}
                for dtype, model in (("f32", float_model), ("int8", int8_model)):
                    if dtype not in args.dtypes.split(","):
                        continue
                    for sram in (full, full // 2):
                        platform = platform_with_sram(file, sram)
                        out = None if args.estimate_only else root / f"{name}_{tag}_{dtype}_{sram}"
                        r = results[(dtype, sram)] = run_case(model, platform, out)
                        sim = f"{r['sim']:10.1f}" if r["sim"] is not None else f"{'-':>10}"
                        print(
                            f"{name:12} {tag:14} {dtype:5} {sram:8} {r['est']:10.1f} {sim} "
                            f"{r['npu']:4} of {r['groups']:3} {r['tiled']:5} {r['gen']:6.1f}",
                            flush=True,
                        )
                summary.append((name, tag, full, results))
    print(
        f"\n{'model':12} {'platform':14} {'f32/int8 est':>12} {'f32/int8 sim':>12}   "
        f"{'half/full SRAM: f32 est':>23} {'int8 est':>8} {'f32 sim':>8} {'int8 sim':>8}"
    )
    for name, tag, full, results in summary:
        half = full // 2

        def r(dtype: str, sram: int, what: str) -> float | None:
            return results.get((dtype, sram), {}).get(what)

        print(
            f"{name:12} {tag:14} {ratio(r('f32', full, 'est'), r('int8', full, 'est')):>12} "
            f"{ratio(r('f32', full, 'sim'), r('int8', full, 'sim')):>12}   "
            f"{ratio(r('f32', half, 'est'), r('f32', full, 'est')):>23} "
            f"{ratio(r('int8', half, 'est'), r('int8', full, 'est')):>8} "
            f"{ratio(r('f32', half, 'sim'), r('f32', full, 'sim')):>8} "
            f"{ratio(r('int8', half, 'sim'), r('int8', full, 'sim')):>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
