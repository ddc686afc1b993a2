"""`hetgen verify` of a built project, run as a user runs it: in a process of its own, so a
sanitized build's report (AddressSanitizer, UndefinedBehaviorSanitizer) reaches its stderr and its
exit code fails the check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def verify_matches(out: Path, outputs: int | None = None, *args: str) -> str:
    """Run `hetgen verify out *args`; assert it exits 0 and says that every one of `outputs` model
    outputs (None: however many) matches onnxruntime. Returns its stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "hetgen", "verify", str(out), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    said = "outputs match onnxruntime" if outputs is None else f"{outputs} of {outputs} outputs match onnxruntime"
    assert said in result.stdout, result.stdout
    return result.stdout
