"""Simulated device counters of a built project, beside the cost model's estimates."""

from __future__ import annotations

import json
from pathlib import Path

from hetgen.runtime.loader import load
from hetgen.runtime.verify import feeds_for


def device_report(out_dir: Path, runs: int = 1) -> list[str]:
    """Run the model `runs` times and report each simulated device's cycles and time per run."""
    manifest = json.loads((out_dir / "hetgen.json").read_text())
    simulated = [t for t in manifest["targets"] if t["role"] == "accelerator"]
    if not simulated:
        return []
    model = load(out_dir)
    counters = {}
    for target in simulated:
        prefix = target["prefix"]
        counters[prefix] = {
            what: model.function(f"uint64_t {prefix}_{what}(void);", f"{prefix}_{what}")
            for what in ("compute_cycles", "load_cycles", "dma_cycles", "invocations")
        }
        model.function(f"void {prefix}_reset_counters(void);", f"{prefix}_reset_counters")()
    feeds = feeds_for(model, out_dir, 0)[0]  # indices inside what they index
    for _ in range(runs):
        model.run(feeds)
    lines = ["simulated devices (per run):"]
    for target in simulated:
        prefix = target["prefix"]
        compute = counters[prefix]["compute_cycles"]() / runs
        loads = counters[prefix]["load_cycles"]() / runs
        dma = counters[prefix]["dma_cycles"]() / runs
        calls = counters[prefix]["invocations"]() / runs
        clock = target["clock_mhz"] or 1000.0
        lines.append(
            f"  {target['path']}: {(compute + dma) / clock:.1f} us at {clock:g} MHz over {calls:.0f} invocations: "
            f"kernels {(compute - loads) / clock:.1f} us (cost model: {target['estimated_us']:.1f} us), "
            f"weight loads {loads / clock:.1f} us, copies to and from the controller {dma / clock:.1f} us"
        )
    return lines
