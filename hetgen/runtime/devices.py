"""Simulated device time of a built project beside the cost model's estimates, per group.

The estimates were recorded when the project was generated (the manifest's `estimates`: each
placement group and transfer as the cost model priced it). The simulated times are what the
simulated accelerators counted on a real run (hg_sim.c): per device its kernels, weight loads and
copies to and from its controller, and per command a cycle counter, joined with the groups through
the IR node names each kernel computes. Only accelerators are simulated; work on controllers runs
natively and has an estimate but no simulated time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from hetgen.runtime.loader import load
from hetgen.runtime.verify import feeds_for


@dataclass(frozen=True)
class GroupTime:
    name: str
    target: str
    label: str
    nodes: tuple[str, ...]
    estimate_us: float  # the placement's cost for the group (launch included)
    simulated_us: float | None  # kernel_us + weight_load_us; None where the target is not simulated
    kernel_us: float | None = None
    weight_load_us: float | None = None


@dataclass(frozen=True)
class DeviceTime:
    path: str
    clock_mhz: float
    invocations: int
    kernel_us: float
    weight_load_us: float
    copy_us: float  # DMA to and from the device's controller
    estimate_us: float  # the placement's groups on this device, plus transfers into and out of it

    @property
    def simulated_us(self) -> float:
        return self.kernel_us + self.weight_load_us + self.copy_us


@dataclass(frozen=True)
class SimulationReport:
    """Over the simulated devices: `estimate_us` is their groups' and transfers' estimates,
    `simulated_us` what the simulator counted (kernels, weight loads, copies)."""

    estimate_us: float
    simulated_us: float
    groups: tuple[GroupTime, ...]
    devices: tuple[DeviceTime, ...]

    def to_json(self) -> dict:
        return {
            "estimate_us": round(self.estimate_us, 3),
            "simulated_us": round(self.simulated_us, 3),
            "groups": [_rounded(asdict(group)) for group in self.groups],
            "devices": [_rounded({**asdict(device), "simulated_us": device.simulated_us}) for device in self.devices],
        }


def _rounded(record: dict) -> dict:
    return {
        k: round(v, 3) if isinstance(v, float) else list(v) if isinstance(v, tuple) else v for k, v in record.items()
    }


def simulation_report(out_dir: Path, runs: int = 1) -> SimulationReport:
    """Run the model `runs` times and report the last run's simulated time (every run does the same
    work). A project without simulated devices still lists its groups' estimates."""
    manifest = json.loads((Path(out_dir) / "hetgen.json").read_text())
    simulated = [t for t in manifest["targets"] if t["role"] == "accelerator"]
    model = load(Path(out_dir))
    feeds = feeds_for(model, Path(out_dir), 0)[0]  # indices inside what they index
    for _ in range(max(runs, 1)):
        model.run(feeds)
    estimates = manifest.get("estimates", [])
    kernel_cycles: dict[str, int] = {}  # by IR node name (each node is in one kernel)
    load_cycles: dict[str, int] = {}
    clocks: dict[str, float] = {}
    devices = []
    for target in simulated:
        path, clock = target["path"], float(target["clock_mhz"] or 1000.0)
        clocks[path] = clock
        stats = model.device_stats(target["stats_device"])
        counts = model.device_counters(target["counters_offset"], len(target["counters"]))
        for counter, cycles in zip(target["counters"], counts):
            into = kernel_cycles if counter["what"] == "kernel" else load_cycles
            if counter["nodes"]:
                into[counter["nodes"][0]] = into.get(counter["nodes"][0], 0) + cycles
        loads = stats["load_cycles"]
        estimate = sum(e["estimate_us"] for e in estimates if path in (e["target"], e.get("source")))
        devices.append(
            DeviceTime(
                path,
                clock,
                stats["invocations"],
                (stats["compute_cycles"] - loads) / clock,
                loads / clock,
                stats["dma_cycles"] / clock,
                estimate,
            )
        )
    groups = []
    for estimate in estimates:
        if estimate.get("tensor"):
            continue  # transfers: in the devices' estimates, not simulated one by one
        clock = clocks.get(estimate["target"])
        kernel = weights = None
        if clock is not None:
            kernel = sum(kernel_cycles.get(node, 0) for node in estimate["nodes"]) / clock
            weights = sum(load_cycles.get(node, 0) for node in estimate["nodes"]) / clock
        groups.append(
            GroupTime(
                estimate["name"],
                estimate["target"],
                estimate["label"],
                tuple(estimate["nodes"]),
                estimate["estimate_us"],
                None if kernel is None else kernel + weights,
                kernel,
                weights,
            )
        )
    return SimulationReport(
        sum(d.estimate_us for d in devices), sum(d.simulated_us for d in devices), tuple(groups), tuple(devices)
    )


def report_lines(report: SimulationReport) -> list[str]:
    """The text form of `hetgen bench`'s simulation table (none without simulated devices)."""
    if not report.devices:
        return []
    lines = [
        f"simulated devices (per run): estimate {report.estimate_us:.1f} us, simulated {report.simulated_us:.1f} us"
        f" ({_ratio(report.simulated_us, report.estimate_us)})"
    ]
    for d in report.devices:
        lines.append(
            f"  {d.path}: {d.simulated_us:.1f} us at {d.clock_mhz:g} MHz over {d.invocations} invocations: "
            f"kernels {d.kernel_us:.1f} us, weight loads {d.weight_load_us:.1f} us, "
            f"copies to and from the controller {d.copy_us:.1f} us (estimate {d.estimate_us:.1f} us)"
        )
    simulated = [g for g in report.groups if g.simulated_us is not None]
    if simulated:
        names = {g.name: f"{g.name} [{g.label}]" for g in simulated}
        width = max(len(name) for name in names.values())
        lines.append(
            f"  {'group':<{width}}  {'estimate':>10}  {'simulated':>10}  {'kernel':>9}  {'weights':>9}  sim/est"
        )
        for g in simulated:
            lines.append(
                f"  {names[g.name]:<{width}}  {g.estimate_us:8.1f}us  {g.simulated_us:8.1f}us  {g.kernel_us:7.1f}us"
                f"  {g.weight_load_us:7.1f}us  {_ratio(g.simulated_us, g.estimate_us)}"
            )
    return lines


def _ratio(simulated: float, estimate: float) -> str:
    return f"{simulated / estimate:.2f}x" if estimate else "-"


def device_report(out_dir: Path, runs: int = 1) -> list[str]:
    """The simulation table as text lines; empty when the project has no simulated device."""
    return report_lines(simulation_report(out_dir, runs))
