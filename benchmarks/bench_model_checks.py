"""What refusing invalid models costs at import: onnx's full checker, strict inference and hetgen's
rules against the whole `import_model`, on the shipped examples and a ResNet-18-sized model.

The onnx checks run on a weightless skeleton (hetgen/frontend/onnx_checks.py), so their cost follows
the number of nodes, not the bytes of weights; the node rules run inside `resolve` and are counted
in the import time. Median of `--repeat` runs, CPU seconds of this process.

    python benchmarks/bench_model_checks.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import onnx

from hetgen.frontend import import_model, load
from hetgen.frontend.integrity import check_initializers
from hetgen.frontend.onnx_checks import check_with_onnx
from hetgen.models.cnn import mobilenet_v2, resnet

ROOT = Path(__file__).resolve().parent.parent


def models() -> dict[str, onnx.ModelProto]:
    found = {p.name: load.read_model(p)[0] for p in sorted((ROOT / "examples").glob("*.onnx"))}
    found["resnet18 (224x224)"] = resnet(widths=(64, 128, 256, 512), blocks=2, size=224)
    found["mobilenet_v2 (224x224)"] = mobilenet_v2(size=224)
    return found


def cpu_seconds(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        run()
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'model':<24} {'MB':>6} {'nodes':>6} {'checks s':>9} {'import s':>9} {'share':>6}")
    for name, proto in models().items():

        def checks(proto=proto):
            check_initializers(proto, name)
            check_with_onnx(proto, name)

        checked = cpu_seconds(checks, args.repeat)
        imported = cpu_seconds(lambda proto=proto: import_model(proto), args.repeat)
        size = proto.ByteSize() / 1e6
        print(
            f"{name:<24} {size:>6.1f} {len(proto.graph.node):>6} {checked:>9.4f} {imported:>9.3f} "
            f"{checked / imported:>6.1%}"
        )


if __name__ == "__main__":
    main()
