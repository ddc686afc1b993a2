"""How far apart this machine's first two CPUs are right now (benchmarks/core_distance.c): a line the
two-thread benchmarks print before each model, so that a figure taken while the host had put the
two vCPUs far apart (a cache line's round trip 3-5x the near state's, data the other CPU wrote read
at a third of the speed) is not read as the pool's doing.

    python benchmarks/core_distance.py
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_suffix(".c")
# How much slower reading what the other CPU wrote may be than reading one's own before the two
# count as far apart: 1.1x near, 3x far on this project's VM (docs/kernels.md, Two threads).
FAR_READ = 2.0


@functools.cache
def _probe() -> Path | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    binary = Path(tempfile.mkdtemp(prefix="hetgen-core-distance-")) / "core_distance"
    subprocess.run([compiler, "-O2", "-pthread", str(SOURCE), "-o", str(binary)], check=True)
    return binary


def core_distance() -> str:
    """One line: the round trip between the first two CPUs, the read of data the other wrote, and
    whether that is the near or the far state."""
    binary = _probe()
    if binary is None:
        return "core distance: unknown (no C compiler)"
    fields = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.split()
    if fields[0] == "unknown":
        return "core distance: unknown (fewer than two CPUs)"
    round_trip, theirs, ours = float(fields[0]), float(fields[1]), float(fields[2])
    far = theirs > FAR_READ * ours
    state = "FAR apart: two-thread figures pay ~3x for every byte that changes thread" if far else "near"
    return (
        f"core distance: cache-line round trip {round_trip:.0f} ns, 256 KB the other CPU wrote read in "
        f"{theirs:.1f} us (own: {ours:.1f} us): {state}"
    )


if __name__ == "__main__":
    print(core_distance())
