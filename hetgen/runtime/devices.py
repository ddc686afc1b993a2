"""Simulated time of a built project beside the cost model's estimate, per group and per device.

The estimates were recorded when the project was generated (the manifest's `estimate_us`, the
placement's total as `hetgen explain` prices it, and `estimates`: each group and copy). The
simulated times are what the project counted on a real run: each simulated accelerator (hg_sim.c)
its kernels, weight loads, invocations, DMA copies and the copies over its link, per command a
cycle counter joined with the groups through the IR node names each kernel computes; each
co-processor behind a link the copies over it.

Every group and copy carries its source (`SOURCES`): `simulator` where a device counted it, or
`estimate` where nothing did (a controller's kernels, which run natively and are not timed, and a
copy no device counts). The simulated total (`simulated_us`) holds only what was counted: the
program replayed with every estimate-sourced item at 0; the estimate-only items are reported beside
it (`estimate_only_us`), and the program with them filled in at their estimate is `with_estimates_us`
(what compares with explain's total). A device's copies enter at what it counted from the bytes that
really crossed (hg_sim.c and hg_link_account count each copy's bytes over the DMA's and the link's
model); `copies_checked` says the counted bytes and copies were the program's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from hetgen.codegen.manifest import CounterEntry, EstimateEntry, Manifest, TargetEntry
from hetgen.platform.device_model import DEFAULT_CLOCK_MHZ
from hetgen.runtime.loader import load
from hetgen.runtime.replay import Counted
from hetgen.runtime.verify import feeds_for
from hetgen.spec.timeline import DeviceCopy, call_shares, run_timeline

SIMULATOR = "simulator"  # counted by a simulated device (cycles at its clock)
MEASURED = "measured"  # timed natively on the host (the native kind)
QEMU_ICOUNT = "qemu-icount"  # instructions counted under qemu x the kind's cycles per instruction
ESTIMATE = "estimate"  # the cost model's figure: not in the simulated total
SOURCES = (SIMULATOR, MEASURED, QEMU_ICOUNT, ESTIMATE)
MODEL = "model"  # an energy part from the operators' own counts (MACs, SRAM bytes), which the simulator does not count


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
    source: str = ESTIMATE  # where `simulated_us` comes from (SOURCES); ESTIMATE: it is None


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
    planned_link_bytes: int = 0  # what the program's copies over its link move (its steps' bytes)
    planned_link_copies: int = 0
    source: str = SIMULATOR

    @property
    def simulated_us(self) -> float:
        return self.kernel_us + self.weight_load_us + self.invoke_us + self.copy_us + self.link_us


@dataclass(frozen=True)
class CopyTime:
    """One copy of the placement: its estimate, and who counts it. `source` SIMULATOR: a device on
    its way counts it (its share of that device's counted DMA and link time is in the device's
    `copy_us`/`link_us`, counted from the bytes that crossed); ESTIMATE: no device counts it (a
    copy between controllers that share memory, or over a link no device models), so it is priced
    only (`estimate_us`) and kept out of the simulated total."""

    name: str
    estimate_us: float
    source: str
    counted_by: tuple[str, ...] = ()  # the devices that count its parts


@dataclass(frozen=True)
class EnergyPart:
    """One part of the simulated energy per inference (nJ): what it prices and where its count
    comes from (SIMULATOR: counted by a simulated device or the replayed time; MODEL: the
    operators' MACs and SRAM bytes, which the simulator runs but does not count; ESTIMATE: the
    placement's figure, for work nothing simulates)."""

    path: str  # the device or link
    what: str
    nj: float
    source: str


@dataclass(frozen=True)
class SimulatedEnergy:
    """A project generated under the energy objective: its energy per inference from what the
    simulated devices counted x the figures it was placed with (hetgen.json's `energy`)."""

    estimate_nj: float
    parts: tuple[EnergyPart, ...]

    @property
    def simulated_nj(self) -> float:
        return sum(p.nj for p in self.parts)

    def by_source(self, source: str) -> float:
        return sum(p.nj for p in self.parts if p.source == source)

    def to_json(self) -> dict:
        return {
            "estimate_uj": round(self.estimate_nj / 1000, 4),
            "simulated_uj": round(self.simulated_nj / 1000, 4),
            "parts": [{**asdict(p), "nj": round(p.nj, 3)} for p in self.parts],
        }


@dataclass(frozen=True)
class SimulationReport:
    """The whole program: `estimate_us` is explain's total; `simulated_us` the generated program's
    time with devices running concurrently (`makespan_us`, hetgen/spec/timeline.py), replayed from
    what the devices counted alone (`counted_us`, one at a time), every estimate-sourced item at 0;
    `estimate_only_us` those items' estimates (the controllers' groups, `controller_us`, and the
    copies nothing counts), and `with_estimates_us` the replay with them at their estimate."""

    estimate_us: float
    counted_us: float
    controller_us: float
    transfer_estimate_us: float  # every copy as priced
    transfer_simulated_us: float  # every copy as counted: DMA and links
    groups: tuple[GroupTime, ...]
    devices: tuple[DeviceTime, ...]
    makespan_us: float | None = None  # the final root clock of the replayed program, counted items only
    copies: tuple[CopyTime, ...] = ()
    with_makespan_us: float | None = None  # the same replay with the estimate-sourced items at their estimate
    energy: SimulatedEnergy | None = None  # under the energy objective only

    @property
    def copy_estimate_only_us(self) -> float:
        """The copies no device counts, at their estimate (not in the simulated total)."""
        return sum(c.estimate_us for c in self.copies if c.source == ESTIMATE)

    @property
    def estimate_only_us(self) -> float:
        """Everything the simulated total leaves out: estimate-sourced groups and copies."""
        return self.controller_us + self.copy_estimate_only_us

    @property
    def serial_us(self) -> float:
        """One thing at a time: what the devices counted plus the estimate-only items."""
        return self.counted_us + self.estimate_only_us

    @property
    def simulated_us(self) -> float:
        """What the devices counted, devices concurrent; no estimate inside."""
        return self.counted_us if self.makespan_us is None else self.makespan_us

    @property
    def with_estimates_us(self) -> float:
        """The simulated program with its estimate-sourced items at their estimate (devices
        concurrent): what compares with explain's total, which prices every item."""
        return self.serial_us if self.with_makespan_us is None else self.with_makespan_us

    @property
    def simulated_groups(self) -> int:
        return sum(1 for g in self.groups if g.source != ESTIMATE)

    @property
    def copies_checked(self) -> bool:
        """Every counting device's link carried the bytes and copies the program's steps say."""
        return all(
            d.link_bytes == d.planned_link_bytes and d.link_copies == d.planned_link_copies
            for d in self.devices
            if d.planned_link_copies or d.link_copies
        )

    def to_json(self) -> dict:
        return {
            "estimate_us": round(self.estimate_us, 3),
            "simulated_us": round(self.simulated_us, 3),
            "simulated_groups": self.simulated_groups,
            "groups_total": len(self.groups),
            "estimate_only_us": round(self.estimate_only_us, 3),
            "with_estimates_us": round(self.with_estimates_us, 3),
            "counted_us": round(self.counted_us, 3),
            "controller_us": round(self.controller_us, 3),
            "serial_us": round(self.serial_us, 3),
            "transfer_estimate_us": round(self.transfer_estimate_us, 3),
            "transfer_simulated_us": round(self.transfer_simulated_us, 3),
            "copies_checked": self.copies_checked,
            "groups": [_rounded(asdict(group)) for group in self.groups],
            "copies": [_rounded(asdict(copy)) for copy in self.copies],
            "devices": [_rounded({**asdict(device), "simulated_us": device.simulated_us}) for device in self.devices],
            **({} if self.energy is None else {"energy": self.energy.to_json()}),
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


def _counted_parts(path: str) -> set[str]:
    """The copy-part targets a counting device counts: its own DMA and link, and for a
    co-processor's host the link of its composite (the part's target is the composite)."""
    return {path, path.rsplit("/", 1)[0]} if path.endswith("/host") else {path}


def _planned_copies(program, path: str) -> tuple[int, int, int]:
    """(bytes over its link, copies over its link, cycles it would count for all its copies) of the
    program's copy steps to and from the device `path`, by its own copy model."""
    nbytes = copies = cycles = 0
    if program is None:
        return 0, 0, 0
    for steps in program.controllers.values():
        for entry in steps.entries:
            for step in entry:
                if type(step) is not DeviceCopy:
                    continue
                device = steps.devices[step.device]
                if device.path != path or device.copies is None:
                    continue
                cycles += device.copies.cycles(step.nbytes)
                if device.copies.link_bytes_per_cycle:
                    nbytes += step.nbytes
                    copies += 1
    return nbytes, copies, cycles


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
    program = manifest.program
    kernel_cycles: dict[str, int] = {}  # by IR node name (each node is in one kernel)
    load_cycles: dict[str, int] = {}
    programs_of: dict[str, set[tuple[str, int]]] = {}  # node -> (device, program) its commands ran in
    clocks: dict[str, float] = {}
    per_invocation: dict[str, float] = {}  # device -> invoke us per invocation
    copy_scale: dict[str, float] = {}  # device -> counted copy cycles / the program's copies by its model
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
        planned_bytes, planned_copies, planned_cycles = _planned_copies(program, path)
        counted_copy_cycles = stats["dma_cycles"] + stats["link_cycles"]
        if planned_cycles:
            copy_scale[path] = counted_copy_cycles / planned_cycles
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
                planned_bytes,
                planned_copies,
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
                ESTIMATE if kernel is None else SIMULATOR,
            )
        )
    counted_parts = set().union(*(_counted_parts(d.path) for d in devices))
    copies = tuple(_copy_time(e, counted_parts) for e in estimates if e.tensor)
    controller_us = sum(g.estimate_us for g in groups if g.source == ESTIMATE)
    transfer_estimate = sum(e.estimate_us for e in estimates if e.tensor)
    uncounted_copies = sum(c.estimate_us for c in copies if c.source == ESTIMATE)
    with_estimates = _makespan(manifest, model, estimates, copy_scale, with_estimates=True, trace=trace)
    with_us = (
        (controller_us + sum(d.simulated_us for d in devices) + uncounted_copies)
        if with_estimates is None
        else with_estimates + uncounted_copies
    )
    energy = _energy(manifest, program, devices, set(clocks), with_us)
    return SimulationReport(
        float(manifest.estimate_us),
        sum(d.simulated_us for d in devices),
        controller_us,
        transfer_estimate,
        sum(d.copy_us + d.link_us for d in devices),
        tuple(groups),
        tuple(devices),
        _makespan(manifest, model, estimates, copy_scale, with_estimates=False),
        copies,
        None if with_estimates is None else with_estimates + uncounted_copies,
        energy,
    )


def _energy(manifest: Manifest, program, devices: list[DeviceTime], simulated: set[str], time_us: float):
    """The energy per inference at what the devices counted (None: the project was not placed for
    energy). A simulated accelerator: its DMA bytes as counted (tile and weight loads, stores),
    the bytes of the program's copies to and from it (what its DMA moves; the link's are checked
    against the counted bytes: `copies_checked`), and its groups' MACs and SRAM bytes (the
    operators' counts: the simulator counts cycles, not MACs); a link a device counts: its counted
    bytes; every device's static power over the simulated time (the replay, CPU groups at their
    estimate). A controller's groups and a link nothing counts enter at their estimate."""
    energy = manifest.energy
    if energy is None:
        return None
    counted = {d.path: d for d in devices}
    copied: dict[str, int] = {}
    for steps in program.controllers.values() if program is not None else ():
        for entry in steps.entries:
            for step in entry:
                if type(step) is DeviceCopy:
                    path = steps.devices[step.device].path
                    copied[path] = copied.get(path, 0) + step.nbytes
    parts = []
    for path, d in energy["devices"].items():
        if path in simulated:
            parts.append(
                EnergyPart(
                    path,
                    "MACs and SRAM bytes",
                    (d["macs"] * d["pj_per_mac"] + d["local_bytes"] * d["pj_per_local_byte"]) / 1000,
                    MODEL,
                )
            )
            parts.append(
                EnergyPart(path, "DMA bytes", counted[path].dma_bytes * d["pj_per_main_byte"] / 1000, SIMULATOR)
            )
            parts.append(EnergyPart(path, "copies", copied.get(path, 0) * d["pj_per_main_byte"] / 1000, SIMULATOR))
        else:
            parts.append(EnergyPart(path, "groups and copies", d["compute_nj"] + d["copy_nj"], ESTIMATE))
        parts.append(EnergyPart(path, "static", d["static_mw"] * time_us, SIMULATOR))
    for path, link in energy["links"].items():
        device = counted.get(path) or counted.get(f"{path}/host")
        if device is not None and device.link_copies:
            parts.append(EnergyPart(path, "link bytes", device.link_bytes * link["pj_per_byte"] / 1000, SIMULATOR))
        else:
            parts.append(EnergyPart(path, "link bytes", link["bytes"] * link["pj_per_byte"] / 1000, ESTIMATE))
    return SimulatedEnergy(float(energy["estimate_nj"]), tuple(parts))


def _copy_time(estimate: EstimateEntry, counted_parts: set[str]) -> CopyTime:
    """A copy's source: SIMULATOR where a counting device counts every part of it (its DMA, its
    link), else ESTIMATE at the parts nothing counts (a copy without parts: its whole estimate)."""
    parts = estimate.parts
    by = tuple(sorted({p.target for p in parts if p.target in counted_parts}))
    uncounted = sum(p.us for p in parts if p.target not in counted_parts)
    if not parts:
        uncounted = estimate.estimate_us
    if uncounted > 0.0:
        return CopyTime(estimate.name, uncounted, ESTIMATE, by)
    return CopyTime(estimate.name, estimate.estimate_us, SIMULATOR, by)


def _makespan(
    manifest: Manifest,
    model,
    estimates: tuple[EstimateEntry, ...],
    copy_scale: dict[str, float],
    with_estimates: bool,
    trace=None,
) -> float | None:
    """The generated program replayed with concurrent devices through the interpreter the placement
    is priced with (hetgen/spec/timeline.py: `run_timeline`): each accelerator invocation at the
    cycles the simulator counted for it, each copy at what its device counted (its model over the
    step's bytes, scaled to the device's counted total: `copy_scale`), each controller's kernels at
    0 (not counted) or, `with_estimates`, at their group's estimate."""
    counted = counted_timing(manifest, model, estimates, copy_scale, with_estimates)
    return None if counted is None else run_timeline(manifest.program, counted, trace)


def counted_timing(
    manifest: Manifest, model, estimates: tuple[EstimateEntry, ...], copy_scale: dict[str, float], with_estimates: bool
) -> Counted | None:
    """The timing `_makespan` replays the program at (None without a program): what the devices
    counted over the model's last run, the controllers' kernels at 0 or at their estimates."""
    program = manifest.program
    if program is None:
        return None
    shares = {}
    if with_estimates:
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
    return Counted(shares, invocations, copy_scale)


def copy_scales(manifest: Manifest, model) -> dict[str, float]:
    """Per counting device, the copy cycles it counted over the model's last run over those its
    model gives the program's copies (`Counted.copy_scale`), as `simulation_report` computes them."""
    scales = {}
    for target in _counting(manifest):
        stats = model.device_stats(target.stats_device)
        planned_cycles = _planned_copies(manifest.program, target.path)[2]
        if planned_cycles:
            scales[target.path] = (stats["dma_cycles"] + stats["link_cycles"]) / planned_cycles
    return scales


def report_lines(report: SimulationReport) -> list[str]:
    """The text form of `hetgen bench`'s simulation table (none without counting devices)."""
    if not report.devices:
        return []
    estimate_groups = len(report.groups) - report.simulated_groups
    lines = [
        f"program (per run): simulated {report.simulated_us:.1f} us over {report.simulated_groups} of"
        f" {len(report.groups)} groups and {sum(c.source != ESTIMATE for c in report.copies)} of"
        f" {len(report.copies)} copies (devices concurrent; only what the devices counted);"
        f" {report.controller_us:.1f} us of {estimate_groups} CPU groups"
        f" and {report.copy_estimate_only_us:.1f} us of copies are estimates only (not in it)",
        f"  with those at their estimate: {report.with_estimates_us:.1f} us, explain's total {report.estimate_us:.1f} us"
        f" ({_ratio(report.with_estimates_us, report.estimate_us)}); one at a time: counted"
        f" {report.counted_us:.1f} us + estimates {report.estimate_only_us:.1f} us",
        f"  copies: estimate {report.transfer_estimate_us:.1f} us, simulated {report.transfer_simulated_us:.1f} us"
        f" ({_ratio(report.transfer_simulated_us, report.transfer_estimate_us)}), counted from the bytes that crossed"
        + ("" if report.copies_checked else " (NOT the program's bytes: see the devices' link bytes)"),
    ]
    for d in report.devices:
        lines.append(
            f"  {d.path}: {d.simulated_us:.1f} us at {d.clock_mhz:g} MHz over {d.invocations} invocations: "
            f"kernels {d.kernel_us:.1f} us, weight loads {d.weight_load_us:.1f} us, invocations {d.invoke_us:.1f} us, "
            f"DMA copies {d.copy_us:.1f} us, link {d.link_us:.1f} us ({d.link_copies} copies, {d.link_bytes} B"
            f" counted, {d.planned_link_bytes} B in the program)"
            f" (estimate {d.estimate_us:.1f} us)"
        )
    if report.energy is not None:
        e = report.energy
        lines.append(
            f"  energy per inference: simulated {e.simulated_nj / 1000:.3f} uJ (counted {e.by_source(SIMULATOR) / 1000:.3f}:"
            f" DMA, copy and link bytes, static power over the simulated time; MACs and SRAM bytes of the"
            f" simulated groups {e.by_source(MODEL) / 1000:.3f}; estimates {e.by_source(ESTIMATE) / 1000:.3f}: CPU"
            f" groups), explain's {e.estimate_nj / 1000:.3f} uJ ({_ratio(e.simulated_nj, e.estimate_nj)})"
        )
    simulated = [g for g in report.groups if g.simulated_us is not None]
    if simulated:
        names = {g.name: f"{g.name} [{g.label}]" for g in simulated}
        width = max(len(name) for name in names.values())
        lines.append(
            f"  {'group':<{width}}  {'estimate':>10}  {'simulated':>10}  {'kernel':>9}  {'weights':>9}"
            f"  {'invoke':>9}  sim/est  source"
        )
        for g in simulated:
            lines.append(
                f"  {names[g.name]:<{width}}  {g.estimate_us:8.1f}us  {g.simulated_us:8.1f}us  {g.kernel_us:7.1f}us"
                f"  {g.weight_load_us:7.1f}us  {g.invoke_us:7.1f}us  {_ratio(g.simulated_us, g.estimate_us):>7}  {g.source}"
            )
    return lines


def _ratio(simulated: float, estimate: float) -> str:
    return f"{simulated / estimate:.2f}x" if estimate else "-"


def device_report(out_dir: Path, runs: int = 1) -> list[str]:
    """The simulation table as text lines; empty when the project has no simulated device."""
    return report_lines(simulation_report(out_dir, runs))
