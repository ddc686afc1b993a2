"""Explain as one self-contained HTML page: the graph coloured by device, and the program's timeline
per device (kernels, launches, weight loads, copies) as the cost model sees it and, for a built
project, as the simulator counted it. It sits with the runtime because a built project's counters are
part of the page.

Python decides every position (the layered layout of hetgen/runtime/explain_layout.py; bars where
the one interpreter, hetgen/spec/timeline.py's `run_timeline`, times each step, on a time axis with
round ticks), every colour (`DEVICE_COLOURS`, shared with the text output) and every tooltip (a
group's runner-up and why it lost); the template (templates/explain/page.html.j2) only lays them
out, and every name goes through
`hetgen.names.html_text`. No network, no external script: inline CSS, SVG and a small script that
draws the legend and the details panel from the page's own data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hetgen.codegen.manifest import read_manifest
from hetgen.codegen.render import render
from hetgen.errors import HetgenError
from hetgen.ir import Graph
from hetgen.names import html_script_json, html_text
from hetgen.partition.explain import Explanation, device_colours, energy_lines, explanation, priced_timeline
from hetgen.partition.placement import Placement
from hetgen.runtime.devices import SimulationReport, simulation_report
from hetgen.runtime.explain_layout import Geometry, layered_layout
from hetgen.spec.timeline import DeviceCopy, DeviceInvoke, KernelCall

COPY_COLOUR = "#555555"
TIMELINE_W, LANE_H, LANE_LABEL_W, AXIS_H = 1100, 26, 230, 26
LABEL_CHARS = 18
GEOMETRY = Geometry()
PAGE_W = 1500  # the width the graph is drawn for: its layers wrap into bands this wide
BAND_LAYERS = max(
    1,
    int(
        (PAGE_W - 2 * GEOMETRY.margin - GEOMETRY.wrap_room + GEOMETRY.layer_gap)
        // (GEOMETRY.box_w + GEOMETRY.layer_gap)
    ),
)


@dataclass(frozen=True)
class Span:
    """One thing the program does on one lane, on the program's clock (us from the start)."""

    lane: str  # a device (target path), or "<device> copies" (its controller copying to or from it)
    kind: str  # "kernel" | "launch" | "weights" | "copy" | "estimate" (a controller's work, not simulated)
    start: float
    us: float
    label: str


@dataclass(frozen=True)
class Built:
    """A built project's simulation, and its program's steps as the replay timed them."""

    report: SimulationReport
    spans: tuple[Span, ...]
    end_us: float  # the replay's makespan, CPU groups at their estimate: the report's `with_estimates_us`


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "~"


def _fmt(value: float) -> str:
    """One way to print a time on the page, so the header and the timelines read the same digits."""
    return f"{value:.1f}"


# -- the graph ---------------------------------------------------------------------------------------


def _tooltip(e: Explanation) -> dict[str, str]:
    """Per group: what it costs, the runner-up and why it lost (or why nothing else could run it)."""
    tips = {}
    for r in e.groups:
        g = r.group
        text = f"{g.name} on {g.target} [{g.label}] {g.cost_us:.2f} us"
        if g.alternatives:
            a = g.alternatives[0]
            text += f"; runner-up {a.target} [{a.label}] {a.cost_us:.2f} us ({a.delta_us:+.2f} us): {a.why}"
        elif g.refused:
            text += "; no other device: " + "; ".join(f"{x.target}: {x.text}" for x in g.refused[:3])
        else:
            text += "; no other device can run it"
        if g.reason:
            text += f"; {g.reason}"
        tips[g.name] = text
    return tips


def graph_layout(graph: Graph, placement: Placement, colours: dict[str, str], tips: dict[str, str]) -> dict:
    """The layered drawing (hetgen/runtime/explain_layout.py) as the template draws it."""
    producer = {out: i for i, node in enumerate(graph.nodes) for out in node.outputs if out}
    pairs = {(producer[t], i) for i, node in enumerate(graph.nodes) for t in node.inputs if t in producer}
    layout = layered_layout(len(graph.nodes), sorted(pairs), GEOMETRY, BAND_LAYERS)
    boxes = []
    for i, node in enumerate(graph.nodes):
        x, y = layout.boxes[i]
        target = placement.target_of(node.name)
        group = placement.group_of(node.name)
        boxes.append(
            {
                "x": round(x, 1),
                "y": round(y, 1),
                "text_x": round(x + 5, 1),
                "op_y": round(y + 14, 1),
                "label_y": round(y + 28, 1),
                "w": GEOMETRY.box_w,
                "h": GEOMETRY.box_h,
                "op": html_text(_short(node.op)),
                "label": html_text(_short(node.source_name or node.name)),
                "name": html_text(node.name),
                "device": html_text(target),
                "group": html_text(group.name),
                "colour": colours[target],
                "tip": html_text(f"{node.source_name or node.name} ({node.op}): {tips[group.name]}"),
            }
        )
    edges = [
        {
            "d": layout.path(segments),
            "css_class": "edge crossing"
            if placement.target_of(graph.nodes[a].name) != placement.target_of(graph.nodes[b].name)
            else "edge",
            "source": html_text(graph.nodes[a].name),
            "dest": html_text(graph.nodes[b].name),
        }
        for a, b, segments in layout.edges
    ]
    return {"boxes": boxes, "edges": edges, "width": round(layout.width), "height": round(layout.height)}


# -- the timelines -----------------------------------------------------------------------------------


def _groups_of(nodes, group_of: dict[str, str]) -> list[str]:
    return list(dict.fromkeys(group_of[n] for n in nodes if n in group_of))


def _parts(names: list[str], start: float, us: float, parts: dict[str, tuple[float, float, float]], lane: str):
    """An invocation's span cut into its groups' launch, weight loads and kernels, in proportion to
    `parts` (name -> (launch, weights, kernel) us), filling exactly [start, start + us]."""
    pieces = [
        (name, kind, t)
        for name in names
        for kind, t in zip(("launch", "weights", "kernel"), parts.get(name, (0.0,) * 3))
    ]
    whole = sum(t for _, _, t in pieces)
    if whole <= 0:
        return [Span(lane, "kernel", start, us, ", ".join(names) or "invocation")]
    spans, now = [], start
    for name, kind, t in pieces:
        if t > 0:
            share = us * t / whole
            what = {"launch": " launch", "weights": " weight loads", "kernel": ""}[kind]
            spans.append(Span(lane, kind, now, share, f"{name}{what}"))
            now += share
    return spans


def _collector(spans: list, group_of, parts, invoked, controllers, simulated: set[str] | None):
    """A `run_timeline` trace that turns each timed step into spans. `invoked(device, program)`: the
    IR nodes an accelerator's sub-program runs; `simulated`: groups the simulator counted (None: the
    cost model's timeline, where everything is an estimate alike)."""

    def trace(controller, start, us, device, step, entry):
        kind = type(step)
        if kind is KernelCall:
            names = _groups_of(step.nodes, group_of)
            estimate = simulated is not None and not any(n in simulated for n in names)
            spans.append(Span(controller, "estimate" if estimate else "kernel", start, us, ", ".join(names)))
        elif kind is DeviceCopy:
            way = f"{device} -> {controller}" if step.out else f"{controller} -> {device}"
            spans.append(Span(f"{device} copies", "copy", start, us, f"copy {step.nbytes} B {way}"))
        elif kind is DeviceInvoke and device not in controllers:  # a co-processor's steps come on their own
            spans.extend(_parts(_groups_of(invoked(device, step.program), group_of), start, us, parts, device))

    return trace


def nice_step(span: float, ticks: int = 8) -> float:
    """A round step (1, 2 or 5 times a power of ten) that cuts `span` into about `ticks` parts."""
    raw = max(span, 1e-9) / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def axis(end_us: float, scale: float, y: float) -> dict:
    step = nice_step(end_us)
    count = int(end_us / step + 1e-9) + 1
    decimals = max(0, -math.floor(math.log10(step)))
    return {
        "y": y,
        "tick_y": y + 4,
        "label_y": y + 15,
        "x0": LANE_LABEL_W,
        "x1": round(LANE_LABEL_W + end_us * scale, 2),
        "ticks": [
            {"x": round(LANE_LABEL_W + k * step * scale, 2), "label": f"{k * step:.{decimals}f}"} for k in range(count)
        ],
        "unit_x": LANE_LABEL_W - 6,
    }


def timeline(spans: list[Span], lanes: list[str], colours: dict[str, str], scale: float, end_us: float) -> dict:
    """Bars at their start on a shared time axis (`scale` px per us), one row per lane, and the axis."""
    row = {lane: k for k, lane in enumerate(lanes)}
    bars = [
        {
            "x": round(LANE_LABEL_W + s.start * scale, 2),
            "y": row[s.lane] * LANE_H + 3,
            "w": round(max(s.us * scale, 1.0), 2),
            "h": LANE_H - 6,
            "kind": s.kind,
            "lane": html_text(s.lane),
            "label": html_text(f"{s.label}: {s.us:.2f} us, from {s.start:.2f} to {s.start + s.us:.2f} us"),
            "colour": colours.get(s.lane, COPY_COLOUR),
        }
        for s in spans
        if s.us > 0
    ]
    height = len(lanes) * LANE_H
    return {
        "bars": bars,
        "lanes": [
            {
                "name": html_text(lane),
                "y": k * LANE_H,
                "label_y": k * LANE_H + 17,
                "colour": colours.get(lane, COPY_COLOUR),
            }
            for k, lane in enumerate(lanes)
        ],
        "axis": axis(end_us, scale, height + 2),
        "total": _fmt(end_us),
        "end_us": end_us,
        "width": LANE_LABEL_W + TIMELINE_W + 40,
        "height": height + AXIS_H,
    }


def _lanes(targets: list[str], spans) -> list[str]:
    used = {s.lane for s in spans if s.us > 0}
    lanes = []
    for target in targets:
        lanes += [lane for lane in (target, f"{target} copies") if lane == target or lane in used]
    return lanes + sorted(used - set(lanes))


def _simulated_summary(report: SimulationReport, end_us: float) -> str:
    """The header's simulated figure: the simulated timeline's end (devices as counted, CPU groups
    and uncounted copies at their estimate), then what the devices alone counted and how much of
    the program is estimate only."""
    estimate_groups = len(report.groups) - report.simulated_groups
    return (
        f"; simulated {_fmt(end_us)} us ({_fmt(report.simulated_us)} us counted by the devices over"
        f" {report.simulated_groups} of {len(report.groups)} groups; {_fmt(report.estimate_only_us)} us of"
        f" {estimate_groups} CPU groups and uncounted copies at their estimate)"
    )


def explain_html(placement: Placement, graph: Graph, platform, built: Built | None = None) -> str:
    """The page. `built`: a built project's simulation (`built_report`), whose timeline is drawn
    under the cost model's, on the same axis."""
    e = explanation(placement, graph)
    targets = list(placement.targets())
    colours = device_colours(targets)
    group_of = {name: g.name for g in placement.groups for name in g.nodes}
    priced: list[Span] = []
    parts = {
        g.name: (g.launch_us, g.weight_us, max(g.cost_us - g.launch_us - g.weight_us, 0.0)) for g in placement.groups
    }
    raw: list[tuple] = []
    program_end, program = priced_timeline(placement, graph, platform, lambda *step: raw.append(step))
    runs = program.accelerators
    collect = _collector(
        priced,
        group_of,
        parts,
        lambda device, index: [n for call in runs[device][index] for n in call.nodes],
        program.controllers,
        None,
    )
    for step in raw:
        collect(*step)
    lanes_spans = list(priced)
    if built is not None:
        lanes_spans += built.spans
    lanes = _lanes(targets, lanes_spans)
    longest = max(program_end, built.end_us if built is not None else 0.0, 1e-9)
    scale = TIMELINE_W / longest
    timelines = [
        {"title": "as the cost model prices it", "id": "model", **timeline(priced, lanes, colours, scale, program_end)}
    ]
    if built is not None:
        timelines.append(
            {
                "title": "as the simulator counted it",
                "id": "simulated",
                **timeline(list(built.spans), lanes, colours, scale, built.end_us),
            }
        )
    tips = _tooltip(e)
    report = built.report if built is not None else None
    sources = {g.name: g.source for g in report.groups} if report is not None else {}
    data = {
        "devices": [{"name": target, "colour": colours[target]} for target in targets],
        # where the simulated figure of each group comes from (hetgen.runtime.devices.SOURCES)
        "groups": [
            {"name": r.group.name, "target": r.group.target, "source": sources.get(r.group.name)} for r in e.groups
        ],
        "total_us": round(program_end, 2),
        # the simulated timeline's end: devices as counted, CPU groups at their estimate
        "simulated_us": round(built.end_us, 2) if built is not None else None,
        # only what the devices counted, and the estimate-only part beside it
        "counted_us": round(report.simulated_us, 2) if report is not None else None,
        "estimate_only_us": round(report.estimate_only_us, 2) if report is not None else None,
        "copies": [{"name": c.name, "source": c.source} for c in report.copies] if report is not None else None,
        "objective": e.objective,
        "energy": e.energy.to_json() if e.energy is not None else None,  # hetgen/partition/energy.py
    }
    simulated = _simulated_summary(built.report, built.end_us) if built is not None else ""
    return render(
        "explain/page.html.j2",
        title=html_text(f"hetgen explain: {e.graph}"),
        summary=html_text(
            f"{e.graph}: {_fmt(program_end)} us estimated ({e.mode} mode, {e.quality}), {len(e.groups)} groups, "
            f"{len(e.transfers)} copies{simulated}"
        ),
        graph=graph_layout(graph, placement, colours, tips),
        timelines=timelines,
        energy=[html_text(line.strip()) for line in energy_lines(e)],
        data=html_script_json(data),
    )


def built_report(out_dir: Path, platform, graph: Graph, model_sha256: str) -> Built:
    """Run a built project once and return its simulation report, after checking it was built from
    this platform and model (its groups are joined with this placement's by name): the model by its
    SHA-256 (`model_sha256`, hetgen/frontend/fingerprint.py) and its input shapes (`--shape`)."""
    manifest = read_manifest(out_dir)
    same = "pass --built a project generated from the same platform and model"
    if (manifest.platform, manifest.model) != (platform.name, graph.name):
        raise HetgenError(
            f"{out_dir}: built for platform {manifest.platform!r} and model {manifest.model!r}, "
            f"not {platform.name!r} and {graph.name!r}; {same}"
        )
    if not manifest.model_sha256:
        raise HetgenError(
            f"{out_dir}: its hetgen.json records no model hash (an older hetgen wrote it), so it cannot "
            f"be matched with {graph.source}; generate it again with this hetgen"
        )
    if manifest.model_sha256 != model_sha256:
        raise HetgenError(
            f"{out_dir}: built from another model than {graph.source} (sha256 {manifest.model_sha256[:16]}..., "
            f"this model's is {model_sha256[:16]}...), though both are named {graph.name!r}; {same}"
        )
    built = tuple(entry.shape for entry in manifest.inputs)
    given = tuple(tuple(graph.type_of(name).shape) for name in graph.inputs)
    if built != given:
        raise HetgenError(
            f"{out_dir}: built with input shapes {_dims(built)}, not {_dims(given)}; "
            "give explain the --shape options the project was generated with"
        )
    spans: list[Span] = []
    raw: list[tuple] = []
    report = simulation_report(Path(out_dir), trace=lambda *a: raw.append(a))
    if manifest.program is None:
        raise HetgenError(
            f"{out_dir}: its hetgen.json records no program to replay; generate it again with this hetgen"
        )
    group_of = {node: g.name for g in report.groups for node in g.nodes}
    parts = {
        g.name: (g.invoke_us or 0.0, g.weight_load_us or 0.0, g.kernel_us or 0.0)
        for g in report.groups
        if g.simulated_us is not None
    }
    runs: dict[tuple[str, int], list[str]] = {}  # (accelerator, sub-program) -> the nodes its counters charge
    for target in manifest.targets:
        if target.simulator is not None:
            for counter in target.simulator.counters:
                runs.setdefault((target.path, counter.program), []).extend(counter.nodes)
    simulated = {g.name for g in report.groups if g.simulated_us is not None}
    collect = _collector(
        spans,
        group_of,
        parts,
        lambda device, program: runs.get((device, program), []),
        manifest.program.controllers,
        simulated,
    )
    for args in raw:
        collect(*args)
    return Built(report, tuple(spans), report.with_estimates_us)


def _dims(shapes) -> str:
    return ", ".join("x".join(map(str, shape)) or "scalar" for shape in shapes)
