"""What a long generation says on stderr (hetgen/progress.py): a terminal gets one updating line,
cleared at the end; a log gets nothing for quick stages and one line (and its time) for slow ones."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

from hetgen.progress import Progress, counted

REPO = Path(__file__).resolve().parent.parent


def test_a_log_hears_nothing_of_quick_stages_and_of_slow_ones_their_name_and_time():
    stream = io.StringIO()
    progress = Progress(stream, tty=False, slow_s=0.2)
    with progress.stage("placement", f"placing {counted(5000, 'node')}"):
        pass
    assert stream.getvalue() == ""
    with progress.stage("codegen", f"rendering {counted(812, 'kernel')}"):
        time.sleep(0.5)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "hetgen: rendering 812 kernels..." and lines[1].startswith(
        "hetgen: rendering 812 kernels: done in "
    )
    assert len(lines) == 2 and set(progress.times) == {"placement", "codegen"} and progress.times["codegen"] >= 0.5
    progress.done()
    assert "\r" not in stream.getvalue()


def test_a_terminal_gets_one_line_rewritten_in_place_and_cleared():
    stream = io.StringIO()
    progress = Progress(stream, tty=True)
    with progress.stage("placement", "placing 1 node"):
        for done in range(1, 201):
            progress.step("rendering kernels", done, 200)
    progress.done()
    text = stream.getvalue()
    assert "\n" not in text and text.startswith("\r\033[Khetgen: placing 1 node...")
    assert "rendering kernels... 200/200" in text and text.endswith("\r\033[K")
    assert text.count("\r") <= 2 + 101  # not a write per step


def test_the_cli_says_nothing_on_stderr_for_a_small_model_and_times_its_stages(tmp_path):
    times = tmp_path / "times.json"
    result = subprocess.run(
        [sys.executable, "-m", "hetgen", "generate", "host", str(REPO / "examples" / "resnet_tiny.onnx"),
         "-o", str(tmp_path / "out"), "--stage-times", str(times)],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0 and result.stderr == "", result.stderr
    stages = {"import", "kernels", "placement", "lowering", "codegen", "write"}
    recorded = json.loads(times.read_text())
    assert stages <= set(recorded["wall"]) and stages <= set(recorded["cpu"]), recorded
