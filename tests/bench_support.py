"""`hetgen bench DIR --format json` as the scripts that read it call it: one run, its document."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def bench_json(out: Path) -> dict:
    """The estimate beside the simulation for the built project in `out` (one run)."""
    done = subprocess.run(
        [sys.executable, "-m", "hetgen", "bench", str(out), "--runs", "1", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)
