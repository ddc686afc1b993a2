"""Simulated device counters of a built project, beside the cost model's estimates."""

from __future__ import annotations

import json
from pathlib import Path

from hetgen.runtime.loader import load
from hetgen.runtime.verify import feeds_for


def device_report(out_dir: Path, runs: int = 1) -> list[str]:
    """Run the model `runs` times and report each simulated device's cycles and time per run.

    The counters live in the workspace and cover its last run; every run of a model does the same
    work, so the last run is the per-run figure."""
    manifest = json.loads((out_dir / "hetgen.json").read_text())
    simulated = [t for t in manifest["targets"] if t["role"] == "accelerator"]
    if not simulated:
        return []
    model = load(out_dir)
    feeds = feeds_for(model, out_dir, 0)[0]  # indices inside what they index
    for _ in range(max(runs, 1)):
        model.run(feeds)
    lines = ["simulated devices (per run):"]
    for target in simulated:
        stats = model.device_stats(target["stats_device"])
        compute, loads, dma = stats["compute_cycles"], stats["load_cycles"], stats["dma_cycles"]
        clock = target["clock_mhz"] or 1000.0
        lines.append(
            f"  {target['path']}: {(compute + dma) / clock:.1f} us at {clock:g} MHz over {stats['invocations']} invocations: "
            f"kernels {(compute - loads) / clock:.1f} us (cost model: {target['estimated_us']:.1f} us), "
            f"weight loads {loads / clock:.1f} us, copies to and from the controller {dma / clock:.1f} us"
        )
    return lines
