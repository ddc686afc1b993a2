"""Write the example models shipped in examples/ (deterministic bytes: rerun and nothing changes).

python examples/make_models.py            # from the repository root
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hetgen import models  # noqa: E402
from hetgen.models.suite import MLPERF_TINY_MODELS  # noqa: E402

HERE = Path(__file__).resolve().parent

EXAMPLES = {
    "resnet_tiny.onnx": lambda: models.resnet(opset=17, seed=0),
    "transformer_tiny.onnx": lambda: models.transformer_encoder(opset=17, seed=0),
    # MLPerf Tiny's reference networks (hetgen/models/mlperf_tiny.py), float and int8; the int8
    # files are onnxruntime's quantize_static output, so their bytes follow the onnxruntime version.
    **{f"{name}.onnx": build for name, build in MLPERF_TINY_MODELS.items()},
}


def main() -> None:
    for filename, build in EXAMPLES.items():
        data = build().SerializeToString()
        path = HERE / filename
        if path.exists() and path.read_bytes() == data:
            print(f"{path.relative_to(HERE.parent)}: unchanged")
            continue
        path.write_bytes(data)
        print(f"{path.relative_to(HERE.parent)}: {len(data)} bytes")


if __name__ == "__main__":
    main()
