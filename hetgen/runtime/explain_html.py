"""Explain as one self-contained HTML page: the graph coloured by device, and the program's timeline
per device (kernels, launches, weight loads, copies) as the cost model sees it and, for a built
project, as the simulator counted it. It sits with the runtime because a built project's counters are
part of the page.

Python decides every position (a layered layout of the DAG, bars on a time axis); the template
(templates/explain/page.html.j2) only lays them out, and every name goes through
`hetgen.names.html_text`. No network, no external script: inline CSS, SVG and a small script that
draws the legend and the details panel from the page's own data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hetgen.codegen.manifest import read_manifest
from hetgen.codegen.render import render
from hetgen.errors import HetgenError
from hetgen.ir import Graph
from hetgen.names import html_script_json, html_text
from hetgen.partition.explain import Explanation, explanation
from hetgen.partition.placement import Placement, Transfer
from hetgen.runtime.devices import simulation_report

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
LINK_COLOUR = "#555555"
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 150, 34, 18, 46, 12
TIMELINE_W, LANE_H, LANE_LABEL_W = 900, 26, 210
LABEL_CHARS = 20


@dataclass(frozen=True)
class Event:
    """One thing the program does, in order: a kernel, launch or weight load of a group, or a copy."""

    lane: str  # a place (target path) or "link <target below it>"
    kind: str  # "kernel" | "launch" | "weights" | "copy" | "estimate" (a controller's group, not simulated)
    label: str
    us: float


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "~"


# -- the graph ---------------------------------------------------------------------------------------


def graph_layout(graph: Graph, placement: Placement, colours: dict[str, str]) -> dict:
    """Boxes in layers by longest path from the inputs; within a layer, ordered by the mean position
    of their producers, so edges mostly run down."""
    producer = {out: i for i, node in enumerate(graph.nodes) for out in node.outputs if out}
    preds = [sorted({producer[n] for n in node.inputs if n in producer}) for node in graph.nodes]
    layer = [0] * len(graph.nodes)
    for i in range(len(graph.nodes)):  # graph order is topological
        layer[i] = max((layer[p] + 1 for p in preds[i]), default=0)
    layers: list[list[int]] = [[] for _ in range(max(layer, default=-1) + 1)]
    for i, k in enumerate(layer):
        layers[k].append(i)
    slot = [0.0] * len(graph.nodes)
    for members in layers:
        members.sort(key=lambda i: (sum(slot[p] for p in preds[i]) / len(preds[i]) if preds[i] else 0.0, i))
        for position, i in enumerate(members):
            slot[i] = position
    boxes, where = [], {}
    for k, members in enumerate(layers):
        for position, i in enumerate(members):
            node = graph.nodes[i]
            x, y = MARGIN + position * (BOX_W + GAP_X), MARGIN + k * (BOX_H + GAP_Y)
            where[i] = (x, y)
            target = placement.target_of(node.name)
            group = placement.group_of(node.name)
            boxes.append(
                {
                    "x": x,
                    "y": y,
                    "text_x": x + 5,
                    "op_y": y + 14,
                    "label_y": y + 28,
                    "w": BOX_W,
                    "h": BOX_H,
                    "op": html_text(node.op),
                    "label": html_text(_short(node.source_name or node.name)),
                    "name": html_text(node.name),
                    "device": html_text(target),
                    "group": html_text(group.name),
                    "colour": colours[target],
                }
            )
    edges = []
    for i, node in enumerate(graph.nodes):
        for p in preds[i]:
            (x1, y1), (x2, y2) = where[p], where[i]
            x1, y1, x2 = x1 + BOX_W / 2, y1 + BOX_H, x2 + BOX_W / 2
            bend = GAP_Y / 2
            crossing = placement.target_of(graph.nodes[p].name) != placement.target_of(node.name)
            edges.append(
                {
                    "d": f"M{x1:g},{y1:g} C{x1:g},{y1 + bend:g} {x2:g},{y2 - bend:g} {x2:g},{y2:g}",
                    "css_class": "edge crossing" if crossing else "edge",
                }
            )
    widest = max((len(members) for members in layers), default=1)
    return {
        "boxes": boxes,
        "edges": edges,
        "width": 2 * MARGIN + widest * (BOX_W + GAP_X),
        "height": 2 * MARGIN + len(layers) * (BOX_H + GAP_Y),
    }


# -- the timeline ------------------------------------------------------------------------------------


def _copy_lane(t: Transfer) -> str:
    if t.links:
        return f"link {t.links[0].below}"
    return t.dma[0].target if t.dma else t.dst


def _copy_parts(t: Transfer) -> list[tuple[str, str, float]]:
    """(what, whose, us): the priced time of a copy by who pays it (hetgen/lower: _transfer_parts)."""
    parts = [("link", link.below, link.latency_us + t.bytes / (link.bandwidth_gbps * 1e3)) for link in t.links]
    return parts + [("dma", dma.target, t.bytes / (dma.bandwidth_gbps * 1e3)) for dma in t.dma]


def model_events(e: Explanation, graph: Graph) -> list[tuple[Event, tuple]]:
    """The program as the cost model prices it, one thing at a time: each group's incoming copies,
    its launch, weight loads and kernel, then copies of what it produced. Each event carries a key
    that `simulated_events` uses to find its simulated counterpart."""
    nodes = {node.name: node for node in graph.nodes}
    produced_by = {
        out: report.group.name
        for report in e.groups
        for name in report.group.nodes
        for out in nodes[name].outputs
        if out
    }
    events = []
    for report in e.groups:
        g = report.group
        before = [t for t in report.transfers if produced_by.get(t.tensor) != g.name]
        after = [t for t in report.transfers if produced_by.get(t.tensor) == g.name]
        for t in before:
            events.append((Event(_copy_lane(t), "copy", f"{t.tensor}: {t.src} -> {t.dst}", t.cost_us), ("copy", t)))
        kernel = max(g.cost_us - g.launch_us - g.weight_us, 0.0)
        if g.launch_us:
            events.append((Event(g.target, "launch", f"{g.name} launch", g.launch_us), ("launch", g.name)))
        if g.weight_us:
            events.append((Event(g.target, "weights", f"{g.name} weight loads", g.weight_us), ("weights", g.name)))
        events.append((Event(g.target, "kernel", f"{g.name} [{g.label}]", kernel), ("kernel", g.name)))
        for t in after:
            events.append((Event(_copy_lane(t), "copy", f"{t.tensor}: {t.src} -> {t.dst}", t.cost_us), ("copy", t)))
    return events


def simulated_events(priced: list[tuple[Event, tuple]], report) -> list[Event]:
    """The same program with the simulator's times: each simulated group's launch (its invocation),
    weight loads and kernel from its counters; a controller's group at its estimate (not simulated);
    each copy from its devices' counted DMA and link totals, shared out over their copies by the
    priced share (the devices count copies in total, not one by one)."""
    groups = {g.name: g for g in report.groups}
    counted = {}  # (what, whose) -> counted us
    for d in report.devices:
        counted[("dma", d.path)] = d.copy_us
        counted[("link", d.path.removesuffix("/host") if d.path.endswith("/host") else d.path)] = d.link_us
    priced_total: dict[tuple[str, str], float] = {}
    for _, key in priced:
        if key[0] == "copy":
            for what, whose, us in _copy_parts(key[1]):
                priced_total[(what, whose)] = priced_total.get((what, whose), 0.0) + us
    out = []
    for event, key in priced:
        kind, us = event.kind, event.us
        if key[0] == "copy":
            us = sum(
                part * counted[(what, whose)] / priced_total[(what, whose)]
                if (what, whose) in counted and priced_total[(what, whose)]
                else part
                for what, whose, part in _copy_parts(key[1])
            )
        else:
            g = groups.get(key[1])
            if g is None or g.simulated_us is None:
                kind = "estimate"
            else:
                us = {"launch": g.invoke_us, "weights": g.weight_load_us, "kernel": g.kernel_us}[key[0]]
        out.append(Event(event.lane, kind, event.label, us))
    return out


def timeline(events: list[Event], lanes: list[str], colours: dict[str, str], scale: float) -> dict:
    """Bars one after another on a shared time axis (`scale` px per us), one row per lane."""
    row = {lane: k for k, lane in enumerate(lanes)}
    bars, now = [], 0.0
    for event in events:
        if event.us <= 0:
            continue
        bars.append(
            {
                "x": LANE_LABEL_W + now * scale,
                "y": row[event.lane] * LANE_H + 3,
                "w": max(event.us * scale, 1.0),
                "h": LANE_H - 6,
                "kind": event.kind,
                "lane": html_text(event.lane),
                "label": html_text(f"{event.label}: {event.us:.2f} us"),
                "colour": colours.get(event.lane, LINK_COLOUR),
            }
        )
        now += event.us
    return {
        "bars": bars,
        "lanes": [
            {
                "name": html_text(lane),
                "y": k * LANE_H,
                "label_y": k * LANE_H + 17,
                "colour": colours.get(lane, LINK_COLOUR),
            }
            for k, lane in enumerate(lanes)
        ],
        "total_us": now,
        "width": LANE_LABEL_W + TIMELINE_W + MARGIN,
        "height": len(lanes) * LANE_H,
    }


def _simulated_summary(report) -> str:
    """The header's simulated figure: what the devices counted, over how many groups, and how much
    of the program is estimate only (not in it)."""
    return (
        f"; simulated {report.simulated_us:.1f} us over {report.simulated_groups} of {len(report.groups)} groups;"
        f" {report.estimate_only_us:.1f} us of CPU groups and copies are estimates only"
    )


def explain_html(placement: Placement, graph: Graph, report=None) -> str:
    """The page. `report`: a built project's `hetgen.runtime.devices.simulation_report`, whose
    timeline is drawn under the cost model's."""
    e = explanation(placement, graph)
    targets = list(placement.targets())
    colours = {target: PALETTE[k % len(PALETTE)] for k, target in enumerate(targets)}
    priced = model_events(e, graph)
    lanes = list(dict.fromkeys([*targets, *(event.lane for event, _ in priced)]))
    simulated = simulated_events(priced, report) if report is not None else None
    longest = max(e.total_us, sum(ev.us for ev in simulated) if simulated else 0.0, 1e-9)
    scale = TIMELINE_W / longest
    timelines = [
        {
            "title": "as the cost model prices it",
            "id": "model",
            **timeline([ev for ev, _ in priced], lanes, colours, scale),
        }
    ]
    if simulated is not None:
        timelines.append(
            {"title": "as the simulator counted it", "id": "simulated", **timeline(simulated, lanes, colours, scale)}
        )
    sources = {g.name: g.source for g in report.groups} if report is not None else {}
    data = {
        "devices": [{"name": target, "colour": colours[target]} for target in targets],
        "groups": [
            {
                "name": r.group.name,
                "target": r.group.target,
                "label": r.group.label,
                "cost_us": round(r.group.cost_us, 3),
                "ops": [name for name, _ in r.ops],
                "reason": r.group.reason,
                # where the simulated column's figure for it comes from (hetgen.runtime.devices.SOURCES)
                "source": sources.get(r.group.name),
            }
            for r in e.groups
        ],
        "total_us": round(e.total_us, 3),
        # only what the devices counted; estimate-sourced groups and copies are beside it
        "simulated_us": round(report.simulated_us, 3) if report is not None else None,
        "estimate_only_us": round(report.estimate_only_us, 3) if report is not None else None,
        "with_estimates_us": round(report.with_estimates_us, 3) if report is not None else None,
        "copies": [{"name": c.name, "source": c.source} for c in report.copies] if report is not None else None,
    }
    return render(
        "explain/page.html.j2",
        title=html_text(f"hetgen explain: {e.graph}"),
        summary=html_text(
            f"{e.graph}: {e.total_us:.1f} us estimated ({e.mode} mode, {e.quality}), {len(e.groups)} groups, "
            f"{len(e.transfers)} copies" + (_simulated_summary(report) if report is not None else "")
        ),
        graph=graph_layout(graph, placement, colours),
        timelines=timelines,
        data=html_script_json(data),
    )


def built_report(out_dir: Path, platform, graph: Graph, model_sha256: str):
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
    return simulation_report(Path(out_dir))


def _dims(shapes) -> str:
    return ", ".join("x".join(map(str, shape)) or "scalar" for shape in shapes)
