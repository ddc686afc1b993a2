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
def test_generated_sources_compile_without_warnings(generated, compiler, tmp_path):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (.ci/run installs it)")
    for index, root in enumerate(generated):
        assert_compiles_warning_free(compiler, root, tmp_path / str(index))


def assert_compiles_warning_free(compiler: str, root: Path, objects: Path) -> None:
    """Every C source of the project generated at `root` compiles with `compiler` at -O2 -Wall -Wextra
    -Werror. Into object files in `objects`, from `root` by relative paths: the run's compiler cache
    (tests/compiler_cache.py) runs a compile whose output is /dev/null twice (ccache 4.7 keeps no
    empty result and runs the compiler again), and the runtime files, the same text in every
    project, then compile once per compiler in a run instead of once per project (the same
    preprocessed text, flags and compiler: ccache gives back its warnings too, and keeps no failure)."""
    includes = sorted({str(p.parent.relative_to(root)) for p in root.rglob("*.h")})
    flags = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", *[f"-I{d}" for d in includes]]
    sources = sorted(root.rglob("*.c"))
    assert sources
    objects.mkdir(parents=True, exist_ok=True)
    for index, source in enumerate(sources):
        relative = str(source.relative_to(root))
        command = [compiler, *flags, "-c", relative, "-o", str(objects / f"{index}.o")]
        result = subprocess.run(command, capture_output=True, text=True, cwd=root)
        assert result.returncode == 0, f"{compiler} {relative}:\n{result.stderr[-3000:]}"
