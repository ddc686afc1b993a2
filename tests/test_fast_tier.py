"""The fast tier (`-m "not cc"`, docs/testing.md) fails a test that compiles without the cc marker:
through PATH, through the ninja package's binary that hetgen runs by its path, and when the test
would have passed on the refusal (it expected a build to fail). Run as a pytest of its own, in a
clean environment, so the wrappers it installs are its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_pure_python():
    assert sum(range(4)) == 6
"""


def run_probes(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probes.py").write_text(PROBES)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("HETGEN_FAST_TIER")}
    # This run's own wrappers (when it is itself the fast tier) leave PATH: the probes' run makes its own.
    folders = os.environ.get("PATH", "").split(os.pathsep)
    environment["PATH"] = os.pathsep.join(f for f in folders if not Path(f).name.startswith("hetgen-fast-tier-"))
    environment["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO)])
    command = [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path)]
    command += ["-p", "conftest", "-p", "no:cacheprovider", "-q", str(tmp_path / "test_probes.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=environment, timeout=300)


def test_the_fast_tier_fails_unmarked_compiles_and_runs_the_rest(tmp_path):
    result = run_probes(tmp_path, "-m", "not cc")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "2 failed, 1 passed, 1 deselected" in output, output
    assert "test_runs_cc_unmarked: the fast tier ran a compiler: mark this test cc" in output, output
    assert "cc --version" in output, output
    assert "test_expects_a_failed_build_unmarked: the fast tier ran a compiler" in output, output
    assert "\n  ninja -C /" in output, output  # ninja.BIN_DIR's binary went through the wrapper


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
    result = run_probes(tmp_path, "-k", "marked and not unmarked")
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr
