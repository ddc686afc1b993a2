"""Simulated time of a built project beside the cost model's estimate, per group and per device.

The estimates were recorded when the project was generated (the manifest's `estimate_us`, the
placement's total as `hetgen explain` prices it, and `estimates`: each group and copy). The
simulated times are what the project counted on a real run: each simulated accelerator (hg_sim.c)
its kernels, weight loads, invocations, DMA copies and the copies over its link, per command a
cycle counter joined with the groups through the IR node names each kernel computes; each
co-processor behind a link the copies over it. Controllers run their kernels natively, so their
groups are not simulated: the program's simulated total takes them at their estimate and says how
much that is (`controller_us`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from hetgen.codegen.manifest import CounterEntry, EstimateEntry, Manifest, TargetEntry
from hetgen.platform.device_model import DEFAULT_CLOCK_MHZ
from hetgen.runtime.loader import load
from hetgen.runtime.replay import Counted
from hetgen.runtime.verify import feeds_for
from hetgen.spec.timeline import call_shares, run_timeline


@dataclass(frozen=True)
class GroupTime:
    name: str
    target: str
    label: str
    nodes: tuple[str, ...]
    estimate_us: float  # the placement's cost for the group (launch included)
    simulated_us: float | None  # kernel + weight loads + invocation; None where the target is not simulated
    kernel_us: float | None = None
    weight_load_us: float | None = None
    invoke_us: float | None = None  # the invocations its commands ran in


@dataclass(frozen=True)
class DeviceTime:
    """What one device counted (cycles at `clock_mhz`): a simulated accelerator, or a co-processor
    that counts only the copies over its link."""

    path: str
    clock_mhz: float
    invocations: int
    kernel_us: float
    weight_load_us: float
    invoke_us: float  # each invocation's overhead
    copy_us: float  # DMA to and from the device's controller
    link_us: float  # copies over the link from its controller
    link_bytes: int
    link_copies: int
    estimate_us: float  # the placement's groups on this device, plus the DMA and link parts of its copies
    dma_bytes: int = 0  # what its DMA engine moved for its own commands (tile and cascade loads and stores)

    @property
    def simulated_us(self) -> float:
        return self.kernel_us + self.weight_load_us + self.invoke_us + self.copy_us + self.link_us


@dataclass(frozen=True)
class SimulationReport:
    """The whole program: `estimate_us` is explain's total; `simulated_us` the generated program's
    time with devices running concurrently (`makespan_us`, hetgen/spec/timeline.py), replayed
    from what the devices counted (`counted_us`, one at a time) and the controllers' groups at their
    estimate (`controller_us`: not simulated)."""

    estimate_us: float
    counted_us: float
    controller_us: float
    transfer_estimate_us: float  # every copy as priced
    transfer_simulated_us: float  # every copy as counted: DMA and links
    groups: tuple[GroupTime, ...]
    devices: tuple[DeviceTime, ...]
    makespan_us: float | None = None  # the final root clock of the replayed program (devices concurrent)

    @property
    def serial_us(self) -> float:
        """One thing at a time: what the devices counted plus the controllers' groups."""
        return self.counted_us + self.controller_us

    @property
    def simulated_us(self) -> float:
        return self.serial_us if self.makespan_us is None else self.makespan_us

    def to_json(self) -> dict:
        return {
            "estimate_us": round(self.estimate_us, 3),
            "simulated_us": round(self.simulated_us, 3),
            "counted_us": round(self.counted_us, 3),
            "controller_us": round(self.controller_us, 3),
            "serial_us": round(self.serial_us, 3),
            "transfer_estimate_us": round(self.transfer_estimate_us, 3),
            "transfer_simulated_us": round(self.transfer_simulated_us, 3),
            "groups": [_rounded(asdict(group)) for group in self.groups],
            "devices": [_rounded({**asdict(device), "simulated_us": device.simulated_us}) for device in self.devices],
        }


def _rounded(record: dict) -> dict:
    return {
        k: round(v, 3) if isinstance(v, float) else list(v) if isinstance(v, tuple) else v for k, v in record.items()
    }


def _counting(manifest: Manifest) -> list[TargetEntry]:
    """The manifest's targets that keep counters: simulated accelerators and linked co-processors."""
    return [t for t in manifest.targets if t.stats_device is not None]


def _counters(target: TargetEntry) -> tuple[CounterEntry, ...]:
    """A simulated accelerator's per-command counters (none for a co-processor that counts its link)."""
    return target.simulator.counters if target.simulator is not None else ()


def _parts_on(estimates: tuple[EstimateEntry, ...], path: str) -> float:
    """The estimated DMA and link parts of the copies a device counts: its own DMA, the link below
    it (a co-processor counts its composite's link, whose target is the co-processor's parent)."""
    owners = {path, path.rsplit("/", 1)[0]} if path.endswith("/host") else {path}
    return sum(part.us for e in estimates for part in e.parts if part.target in owners)


def simulation_report(out_dir: Path, runs: int = 1, trace=None) -> SimulationReport:
    """Run the model `runs` times and report the last run's simulated time (every run does the same
    work). A project without simulated devices still lists its groups' estimates. `trace`: told each
    step of the replay that makes `makespan_us` (hetgen/spec/timeline.py: `run_timeline`)."""
    model = load(Path(out_dir))
    manifest = model.manifest
    feeds = feeds_for(model, Path(out_dir), 0)[0]  # indices inside what they index
    for _ in range(max(runs, 1)):
        model.run(feeds)
    estimates = manifest.estimates
    kernel_cycles: dict[str, int] = {}  # by IR node name (each node is in one kernel)
    load_cycles: dict[str, int] = {}
    programs_of: dict[str, set[tuple[str, int]]] = {}  # node -> (device, program) its commands ran in
    clocks: dict[str, float] = {}
    per_invocation: dict[str, float] = {}  # device -> invoke us per invocation
    devices = []
    for target in _counting(manifest):
        path, clock = target.path, float(target.clock_mhz or DEFAULT_CLOCK_MHZ)
        stats = model.device_stats(target.stats_device)
        counters = _counters(target)
        if counters:
            clocks[path] = clock
            counts = model.device_counters(target.simulator.counters_offset, len(counters))
            for counter, cycles in zip(counters, counts):
                into = kernel_cycles if counter.what in ("kernel", "move") else load_cycles
                for node in counter.nodes[:1]:
                    into[node] = into.get(node, 0) + cycles
                    programs_of.setdefault(node, set()).add((path, counter.program))
        invocations = stats["invocations"]
        per_invocation[path] = stats["invoke_cycles"] / clock / invocations if invocations else 0.0
        loads = stats["load_cycles"]
        groups_here = sum(e.estimate_us for e in estimates if not e.tensor and e.target == path)
        devices.append(
            DeviceTime(
                path,
                clock,
                invocations,
                (stats["compute_cycles"] - loads) / clock,
                loads / clock,
                stats["invoke_cycles"] / clock,
                stats["dma_cycles"] / clock,
                stats["link_cycles"] / clock,
                stats["link_bytes"],
                stats["link_copies"],
                groups_here + _parts_on(estimates, path),
                stats["dma_bytes"],
            )
        )
    groups = []
    invoked: set[tuple[str, int]] = set()  # programs whose invocation a group was charged with
    for estimate in estimates:
        if estimate.tensor:
            continue  # copies: in the devices' DMA and link counts, not simulated one by one
        clock = clocks.get(estimate.target)
        kernel = weights = invoke = None
        if clock is not None:
            nodes = estimate.nodes
            kernel = sum(kernel_cycles.get(node, 0) for node in nodes) / clock
            weights = sum(load_cycles.get(node, 0) for node in nodes) / clock
            # an invocation is charged once, to the first group that ran in it (a cascade runs
            # several groups in one)
            ran_in = set().union(*(programs_of.get(node, set()) for node in nodes)) - invoked
            invoked |= ran_in
            invoke = len(ran_in) * per_invocation.get(estimate.target, 0.0)
        groups.append(
            GroupTime(
                estimate.name,
                estimate.target,
                estimate.label,
                estimate.nodes,
                estimate.estimate_us,
                None if kernel is None else kernel + weights + invoke,
                kernel,
                weights,
                invoke,
            )
        )
    controller_us = sum(g.estimate_us for g in groups if g.simulated_us is None)
    transfer_estimate = sum(e.estimate_us for e in estimates if e.tensor)
    return SimulationReport(
        float(manifest.estimate_us),
        sum(d.simulated_us for d in devices),
        controller_us,
        transfer_estimate,
        sum(d.copy_us + d.link_us for d in devices),
        tuple(groups),
        tuple(devices),
        _makespan(manifest, model, estimates, trace),
    )


def _makespan(manifest: Manifest, model, estimates: tuple[EstimateEntry, ...], trace=None) -> float | None:
    """The generated program replayed with concurrent devices through the interpreter the placement
    is priced with (hetgen/spec/timeline.py: `run_timeline`): each accelerator invocation at the
    cycles the simulator counted for it, each copy at what its device counts for it, each
    controller's kernels at their group's estimate (not simulated)."""
    program = manifest.program
    if program is None:
        return None
    shares = call_shares(program, ((e.name, e.nodes, e.estimate_us) for e in estimates if not e.tensor))
    invocations: dict[tuple[str, int], float] = {}
    for target in _counting(manifest):
        counters = _counters(target)
        if not counters:
            continue
        clock = float(target.clock_mhz or DEFAULT_CLOCK_MHZ)
        stats = model.device_stats(target.stats_device)
        launch = stats["invoke_cycles"] / stats["invocations"] if stats["invocations"] else 0.0
        for counter, cycles in zip(counters, model.device_counters(target.simulator.counters_offset, len(counters))):
            key = (target.path, counter.program)
            invocations[key] = invocations.get(key, launch / clock) + cycles / clock
    return run_timeline(program, Counted(shares, invocations), trace)


def report_lines(report: SimulationReport) -> list[str]:
    """The text form of `hetgen bench`'s simulation table (none without counting devices)."""
    if not report.devices:
        return []
    lines = [
        f"program (per run): estimate {report.estimate_us:.1f} us, simulated {report.simulated_us:.1f} us"
        f" ({_ratio(report.simulated_us, report.estimate_us)}), devices running concurrently with their controllers;"
        f" one at a time: counted by the devices {report.counted_us:.1f} us"
        f" + controllers' groups at their estimate {report.controller_us:.1f} us (not simulated)",
        f"  copies: estimate {report.transfer_estimate_us:.1f} us, simulated {report.transfer_simulated_us:.1f} us"
        f" ({_ratio(report.transfer_simulated_us, report.transfer_estimate_us)})",
    ]
    for d in report.devices:
        lines.append(
            f"  {d.path}: {d.simulated_us:.1f} us at {d.clock_mhz:g} MHz over {d.invocations} invocations: "
            f"kernels {d.kernel_us:.1f} us, weight loads {d.weight_load_us:.1f} us, invocations {d.invoke_us:.1f} us, "
            f"DMA copies {d.copy_us:.1f} us, link {d.link_us:.1f} us ({d.link_copies} copies, {d.link_bytes} B)"
            f" (estimate {d.estimate_us:.1f} us)"
        )
    simulated = [g for g in report.groups if g.simulated_us is not None]
    if simulated:
        names = {g.name: f"{g.name} [{g.label}]" for g in simulated}
        width = max(len(name) for name in names.values())
        lines.append(
            f"  {'group':<{width}}  {'estimate':>10}  {'simulated':>10}  {'kernel':>9}  {'weights':>9}"
            f"  {'invoke':>9}  sim/est"
        )
        for g in simulated:
            lines.append(
                f"  {names[g.name]:<{width}}  {g.estimate_us:8.1f}us  {g.simulated_us:8.1f}us  {g.kernel_us:7.1f}us"
                f"  {g.weight_load_us:7.1f}us  {g.invoke_us:7.1f}us  {_ratio(g.simulated_us, g.estimate_us)}"
            )
    return lines


def _ratio(simulated: float, estimate: float) -> str:
    return f"{simulated / estimate:.2f}x" if estimate else "-"


def device_report(out_dir: Path, runs: int = 1) -> list[str]:
    """The simulation table as text lines; empty when the project has no simulated device."""
    return report_lines(simulation_report(out_dir, runs))
