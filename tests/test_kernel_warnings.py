"""The kernels added for issue #11 compile warning-free (-Wall -Wextra -Werror) with gcc and clang,
on every ONNX node case of their operators (the conformance run itself compiles with `cc` only)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import conformance
from hetgen.templates_dir import templates_dir

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

OPS = (
    "GRU", "LSTM", "RNN", "Einsum", "TopK", "GridSample", "RoiAlign", "DFT", "STFT", "Det", "Col2Im",
    "DeformConv", "TfIdfVectorizer", "BitCast", "ReverseSequence", "MaxUnpool", "TensorScatter", "CumProd",
)  # fmt: skip


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_new_kernels_compile_without_warnings(tmp_path, compiler):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    sources = []
    for i, case in enumerate(c for c in conformance.cases() if conformance.case_ops(c) & set(OPS)):
        prepared = conformance._prepare(case, f"w{i}")
        if isinstance(prepared, tuple):
            assert prepared[0] == "skip", f"{case.name}: {prepared[1]}"
            continue
        sources += [unit.source for unit in prepared]
    assert len(sources) > 50
    source = tmp_path / "kernels.c"
    source.write_text("\n".join(sources))
    flags = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(templates_dir() / "runtime")]
    # into a file: the run's compiler cache compiles a source whose output is /dev/null twice (ccache 4.7)
    result = subprocess.run(
        [compiler, *flags, "-c", str(source), "-o", str(tmp_path / "kernels.o")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
