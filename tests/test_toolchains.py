"""Generated C compiles warning-free (-Wall -Wextra -Werror) with every toolchain a platform names:
the native gcc, clang, and the aarch64 and riscv64 cross compilers of the soc platform's targets."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import hetgen

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

REPO = Path(__file__).resolve().parent.parent
COMPILERS = ["gcc", "clang", "aarch64-linux-gnu-gcc", "riscv64-linux-gnu-gcc"]
CROSS = {"aarch64-linux-gnu-gcc", "riscv64-linux-gnu-gcc"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[Path]:
    roots = []
    for model in ("resnet_tiny", "transformer_tiny"):
        out = tmp_path_factory.mktemp(model) / "soc"
        hetgen.compile("soc", REPO / "examples" / f"{model}.onnx", out=out, build=False, weights="c_array")
        roots.append(out)
    return roots


@pytest.mark.parametrize(
    "compiler", [pytest.param(c, marks=pytest.mark.external) if c in CROSS else c for c in COMPILERS]
)
def test_generated_sources_compile_without_warnings(generated, compiler):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (.ci/run installs it)")
    for root in generated:
        includes = sorted({str(p.parent) for p in root.rglob("*.h")})
        flags = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", *[f"-I{d}" for d in includes]]
        sources = sorted(root.rglob("*.c"))
        assert sources
        for source in sources:
            result = subprocess.run(
                [compiler, *flags, "-c", str(source), "-o", "/dev/null"], capture_output=True, text=True
            )
            assert result.returncode == 0, f"{compiler} {source.relative_to(root)}:\n{result.stderr[-3000:]}"
