"""Platform files cannot hang or crash hetgen: bounded expressions and numbers.

The corpus in tests/bad_platforms/ (expression_*.yaml) pins each bomb's first error line; this file
checks what a corpus cannot: that refusing them takes milliseconds (in a subprocess with a timeout,
so a regression fails fast instead of hanging the suite), and the bounds that depend on the values
a target gives.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hetgen.errors import PlatformError
from hetgen.platform import load_platform, load_platform_text
from hetgen.platform.expressions import MAX_MAGNITUDE, ExpressionError, evaluate

# Each took seconds to minutes (or raised OverflowError, exit 3) before evaluation was bounded.
BOMBS = (
    "(10**64)**64",
    "((((9**64)**64)**64)**64)**64",
    "(((a**64)**64)**64)**64",
    "((a**64)**64) % 7",
    "max(" + ", ".join(["(a**64)**64"] * 20) + ")",
    "1e200 * 1e200",
    "(0 - 8) ** 0.5",
    "-" * 400 + "1",
    "min(" * 40 + "1" + ")" * 40,
    "+".join(["a"] * 300),
)

_TIMER = """
import json, sys, time
from hetgen.platform.expressions import ExpressionError, evaluate
times = []
for text in json.loads(sys.argv[1]):
    start = time.perf_counter()
    try:
        evaluate(text, {"a": 9})
        outcome = "accepted"
    except ExpressionError as exc:
        outcome = str(exc)
    times.append((text[:40], outcome, time.perf_counter() - start))
print(json.dumps(times))
"""


def test_expression_bombs_are_refused_in_milliseconds():
    done = subprocess.run(
        [sys.executable, "-c", _TIMER, json.dumps(BOMBS)], capture_output=True, text=True, timeout=30, check=True
    )
    for text, outcome, seconds in json.loads(done.stdout):
        assert outcome != "accepted", text
        assert seconds < 0.05, (text, seconds)


def test_bounded_expressions_keep_exact_results():
    assert evaluate("2 ** 48", {}) == 2.0**48
    assert evaluate("sram_kib * 1024", {"sram_kib": 512}) == 524288.0
    assert evaluate("(a ** 3) ** 2", {"a": 10}) == 1e6
    assert evaluate("2 ** -3", {}) == 0.125
    assert evaluate(f"{MAX_MAGNITUDE:.0f}", {}) == MAX_MAGNITUDE
    for bad in ("2 ** 1000", "10 ** 31", "0.001 ** -64", "1e30 * 10", "(0 - 1) ** 0.5", "a // 0"):
        with pytest.raises(ExpressionError):
            evaluate(bad, {"a": 1})


def test_a_figure_that_overflows_for_a_targets_value_names_the_target():
    text = (
        "name: board\n"
        "kinds:\n"
        "  dsp:\n"
        "    role: accelerator\n"
        "    attributes: {lanes: {type: int, default: 4}}\n"
        "    figures: {peak_gflops: '10 ** lanes', bandwidth_gbps: 4, launch_us: 3}\n"
        "    patterns: [{label: add, chain: [Add]}]\n"
        "target:\n"
        "  kind: native\n"
        "  devices:\n"
        "    dsp0: {kind: dsp, lanes: 40}\n"
    )
    with pytest.raises(PlatformError) as caught:
        load_platform_text(text, file="t.yaml")
    assert str(caught.value).startswith(
        "t.yaml:11:11: the figures of kind 'dsp' cannot be computed for target 'board/dsp0'"
    ), caught.value
    assert "'10 ** lanes' exceeds 1e+30 in magnitude" in str(caught.value)


@pytest.mark.parametrize(
    "where", ["link: {bandwidth_gbps: BIG, latency_us: 1}", "sram_kib: BIG", "figures: {launch_us: BIG}"]
)
def test_numbers_of_hundreds_of_digits_are_refused_not_overflowed(where: str):
    node = "{kind: npu, " + where.replace("BIG", "9" * 400) + "}"
    with pytest.raises(PlatformError, match=r"must be at most 1e\+30 in magnitude"):
        load_platform_text(f"name: b\ntarget:\n  kind: native\n  devices:\n    n: {node}\n", file="t.yaml")


def _kind_with_templates(folder: str) -> str:
    return (
        "name: board\nkinds:\n  dsp:\n    role: accelerator\n"
        "    figures: {peak_gflops: 4, bandwidth_gbps: 4, launch_us: 3}\n"
        f"    templates: {folder}\n"
        "    patterns: [{label: add, chain: [Add]}]\n"
        "target: {kind: native, devices: {dsp0: dsp}}\n"
    )


def _a_file(root):
    (root / "t").write_text("x")


def _no_templates(root):
    (root / "t" / "kernels").mkdir(parents=True)


def _a_model_template(root):  # only kernel templates are rendered with a kind's folder first
    (root / "t").mkdir()
    (root / "t" / "model.c.j2").write_text("")


def _a_huge_folder(root):
    for index in range(1001):
        (root / "t" / f"d{index}").mkdir(parents=True)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_a_file, "is not a folder"),
        (_no_templates, "holds no templates (*.j2)"),
        (_a_model_template, "'t/model.c.j2' overrides no template of hetgen"),
        (_a_huge_folder, "holds more than 1000 files and folders"),
    ],
)
def test_a_templates_folder_that_would_be_ignored_is_refused_at_its_line(tmp_path, make, expected):
    make(tmp_path)
    path = tmp_path / "platform.yaml"
    path.write_text(_kind_with_templates("t"))
    with pytest.raises(PlatformError) as caught:
        load_platform(str(path))
    assert str(caught.value).startswith(f"{path}:6:16: 'templates' of kind 'dsp': "), caught.value
    assert expected in str(caught.value)


def test_a_templates_folder_of_kernel_overrides_is_accepted(tmp_path):
    (tmp_path / "t" / "kernels").mkdir(parents=True)
    (tmp_path / "t" / "kernels" / "elementwise.c.j2").write_text("")
    path = tmp_path / "platform.yaml"
    path.write_text(_kind_with_templates("t"))
    assert load_platform(str(path)).target("board/dsp0").kind.templates == str((tmp_path / "t").resolve())
