"""The tiers below the full suite (docs/testing.md) fail a test that uses a tool of a tier above
without its marker: the fast tier (`-m "not cc"`) through PATH, through the ninja package's binary
that hetgen runs by its path, and when the test would have passed on the refusal (it expected a
build to fail); the integration tier (`-m "not external"`) for cross compilers, qemu and chromium.
Each runs as a pytest of its own, in a clean environment, so the wrappers it installs are its own.
Also: which tier a `-m` expression runs, and the stage markers (tests/stages.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fast_tier
import stages

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

PROBES = """
import subprocess

import pytest


def test_runs_cc_unmarked():
    subprocess.run(["cc", "--version"], capture_output=True)  # the exit status is not even read


def test_expects_a_failed_build_unmarked(tmp_path):
    from hetgen.build.ninja_file import run_ninja
    from hetgen.errors import HetgenError

    with pytest.raises(HetgenError):
        run_ninja(tmp_path)  # no build.ninja: would fail anyway, so only the log can tell


@pytest.mark.cc
def test_runs_cc_marked():
    subprocess.run(["cc", "--version"], check=True, capture_output=True)


def test_runs_qemu_unmarked():
    subprocess.run(["qemu-aarch64", "--version"], capture_output=True)


@pytest.mark.cc
def test_runs_cross_clang_marked_cc_only():
    subprocess.run(["clang", "--target=aarch64-linux-gnu", "-E", "-x", "c", "/dev/null"], capture_output=True)


@pytest.mark.external
def test_runs_chromium_marked():
    subprocess.run(["chromium", "--version"], check=True, capture_output=True)


def test_pure_python():
    assert sum(range(4)) == 6
"""

# A module marked external as a whole: neither the fast nor the integration tier imports it.
EXTERNAL_MODULE = "import pytest\n\npytestmark = [pytest.mark.external]\nraise RuntimeError('imported')\n"
TIER_PROBES = {"test_probes.py": PROBES, "test_board_probes.py": EXTERNAL_MODULE}
# Named as stage modules (tests/stages.py maps modules by name): -m "partition" must not import the other.
STAGE_PROBES = {
    "test_partition.py": "def test_in_partition():\n    pass\n",
    "test_platform.py": "raise RuntimeError('imported although -m leaves out its stage')\n",
}


def run_probes(tmp_path: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("HETGEN_FAST_TIER")}
    # This run's own wrappers (when it is itself a tier) leave PATH: the probes' run makes its own.
    folders = os.environ.get("PATH", "").split(os.pathsep)
    environment["PATH"] = os.pathsep.join(f for f in folders if not Path(f).name.startswith("hetgen-fast-tier-"))
    environment["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO)])
    command = [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path)]
    command += ["-p", "conftest", "-p", "no:cacheprovider", "-q", str(tmp_path), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=environment, timeout=300)


def test_the_fast_tier_fails_unmarked_compiles_and_runs_the_rest(tmp_path):
    result = run_probes(tmp_path, TIER_PROBES, "-m", "not cc")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    # cc_marked, cross_clang (cc) and chromium (external: implies cc) are left out
    assert "3 failed, 1 passed, 3 deselected" in output, output
    assert "test_runs_cc_unmarked: the fast tier ran a compiler: mark this test cc" in output, output
    assert "cc --version" in output, output
    assert "test_expects_a_failed_build_unmarked: the fast tier ran a compiler" in output, output
    assert "\n  ninja -C /" in output, output  # ninja.BIN_DIR's binary went through the wrapper
    assert "test_runs_qemu_unmarked: the fast tier ran a compiler" in output, output


def test_the_integration_tier_fails_unmarked_external_tools_and_runs_the_rest(tmp_path):
    # -k leaves out the probes that would run the real native compiler: this test stays in the fast tier.
    chosen = "qemu or chromium or pure" + (" or cross" if shutil.which("clang") else "")
    result = run_probes(tmp_path, TIER_PROBES, "-m", "not external", "-k", chosen)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    failed = 2 if shutil.which("clang") else 1
    assert f"{failed} failed, 1 passed" in output, output  # chromium's test is deselected: it would fail
    message = "the integration tier ran a cross compiler, qemu or chromium: mark this test external"
    assert f"test_runs_qemu_unmarked: {message}" in output and "\n  qemu-aarch64 --version" in output, output
    if shutil.which("clang"):
        assert f"test_runs_cross_clang_marked_cc_only: {message}" in output, output
        assert "\n  clang --target=aarch64-linux-gnu -E" in output, output


def test_one_stage_runs_without_importing_the_others(tmp_path):
    result = run_probes(tmp_path, STAGE_PROBES, "-m", "not cc and partition")
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("markexpr", "tier"),
    [
        ("not cc", fast_tier.FAST),
        ("not cc and partition", fast_tier.FAST),
        ("not (cc or external)", fast_tier.FAST),
        ("not external", fast_tier.INTEGRATION),
        ("cc and not external", fast_tier.INTEGRATION),
        ("lower and not external", fast_tier.INTEGRATION),
        ("", None),
        ("cc", None),
        ("external", None),
        ("partition", None),
        ("not cc or partition", None),
    ],
)
def test_the_tier_follows_what_the_marker_expression_can_select(markexpr, tier):
    assert fast_tier.tier_of_markexpr(markexpr) == tier


def test_external_commands_are_told_from_native_ones():
    host = fast_tier.host_machine()
    external = [
        "aarch64-linux-gnu-gcc -c a.c",
        "arm-none-eabi-gcc a.c",
        "qemu-riscv64 -L /usr x",
        "chromium --headless",
    ]
    external += ["clang --target=riscv64-linux-gnu -c a.c", "clang -target aarch64-linux-gnu a.c"]
    native = ["cc -c a.c", "gcc a.c", "ninja -C out", "clang -O2 a.c", f"clang --target={host}-linux-gnu a.c"]
    native += [f"{host}-linux-gnu-gcc a.c", "ccache cc a.c"]
    assert [c for c in external if not fast_tier.is_external(c)] == []
    assert [c for c in native if fast_tier.is_external(c)] == []


def test_every_test_module_has_one_stage():
    modules = {path.stem for path in TESTS.glob("test_*.py")}
    listed = [module for _, names in stages.STAGES.values() for module in names]
    assert sorted(modules - set(listed)) == [], "add them to STAGES in tests/stages.py"
    assert sorted(set(listed) - modules) == [], "gone: take them off STAGES in tests/stages.py"
    assert len(listed) == len(set(listed)), "a module in two stages"


def test_an_unknown_marker_is_refused(tmp_path):
    (tmp_path / "test_misspelt.py").write_text("import pytest\n\n\n@pytest.mark.c\ndef test_x():\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), "-q"]
        + ["-p", "no:cacheprovider", str(tmp_path / "test_misspelt.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode != 0 and "'c' not found in `markers`" in result.stdout + result.stderr


@pytest.mark.cc
def test_the_full_tier_runs_the_marked_ones_with_the_real_compiler(tmp_path):
    result = run_probes(tmp_path, {"test_probes.py": PROBES}, "-k", "cc_marked")
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr
