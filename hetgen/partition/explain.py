"""Explain a placement: as text for people, as JSON for tools, as Graphviz for pictures.

`explanation()` gathers every fact once (groups with their alternatives, refusals, launch overheads
and the transfers charged to each, and why each unclaimed operator stayed off every accelerator);
`render_text` and `render_json` only lay that value out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hetgen.errors import InternalError
from hetgen.ir import Graph
from hetgen.partition.cost import Topology, format_bytes
from hetgen.partition.placement import Cascade, Group, Placement, Refusal, Tiling, Transfer, refusal_text
from hetgen.partition.price import Price, placement_price, price
from hetgen.partition.timeline import estimated_timing, placement_program
from hetgen.spec.timeline import ProgramSteps, Trace, run_timeline

# One colour per device, by the order the placement first uses it: the HTML page fills with these and
# the text output (on a terminal) prints each device's name in the same colour.
DEVICE_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
# JSON times are rounded to this many decimals of a microsecond (0.001 us = 1 ns), every one the same way
# (as `hetgen bench --json` rounds the simulation report: hetgen/runtime/devices.py).
US_DECIMALS = 3


def device_colours(targets) -> dict[str, str]:
    return {target: DEVICE_COLOURS[k % len(DEVICE_COLOURS)] for k, target in enumerate(targets)}


def ansi(text: str, colour: str) -> str:
    """`text` in `colour` (#rrggbb) on a 24-bit colour terminal."""
    r, g, b = (int(colour[k : k + 2], 16) for k in (1, 3, 5))
    return f"\033[38;2;{r};{g};{b}m{text}\033[0m"


def us(value: float | None) -> float | None:
    """A time as the JSON output states it (`US_DECIMALS`)."""
    return None if value is None else round(float(value), US_DECIMALS) + 0.0


@dataclass(frozen=True)
class GroupReport:
    """One group as explained: the group (target, cost, alternatives, reasons, refusals, launch
    overhead), its operators with their ONNX op types, and the transfers charged to it."""

    group: Group
    ops: tuple[tuple[str, str], ...]  # (node name, op type)
    transfers: tuple[Transfer, ...]

    @property
    def transfer_us(self) -> float:
        return sum(t.cost_us for t in self.transfers)


@dataclass(frozen=True)
class UnclaimedReport:
    node: str
    op: str
    refusals: tuple[Refusal, ...]  # one or more per accelerator

    @property
    def reason(self) -> str:
        return refusal_text(self.refusals)


@dataclass(frozen=True)
class Explanation:
    """Everything `explain` says, once: the text, JSON (and any other) formats only lay it out, so
    they cannot disagree."""

    graph: str
    mode: str
    quality: str  # "exact" (the least makespan), "within X % of the lower bound ..." or "heuristic"; then notes
    total_us: float
    groups: tuple[GroupReport, ...]
    transfers: tuple[Transfer, ...]
    unclaimed: tuple[UnclaimedReport, ...]
    cascades: tuple[Cascade, ...] = ()
    objective: str = "latency"  # what the search minimised
    energy: object | None = None  # the placement's EnergyReport (hetgen/partition/energy.py); None: no figures

    @property
    def price(self) -> Price:
        return price((r.group for r in self.groups), self.transfers)

    @property
    def group_us(self) -> float:
        return self.price.group_us

    @property
    def transfer_us(self) -> float:
        return self.price.transfer_us

    @property
    def launch_us(self) -> float:
        return self.price.launch_us


def explanation(placement: Placement, graph: Graph) -> Explanation:
    ops = {node.name: node.op for node in graph.nodes}
    quality = _quality(placement)
    charged = _charged_group(placement, graph)
    groups = tuple(
        GroupReport(
            group,
            tuple((name, ops.get(name, "?")) for name in group.nodes),
            tuple(t for t in placement.transfers if charged[t] == index),
        )
        for index, group in enumerate(placement.groups)
    )
    by_node: dict[str, list[Refusal]] = {}
    for refusal in placement.unclaimed_refusals:
        by_node.setdefault(refusal.node, []).append(refusal)
    unclaimed = tuple(UnclaimedReport(node, ops.get(node, "?"), tuple(items)) for node, items in by_node.items())
    total = placement_price(placement).total_us
    return Explanation(
        graph.name,
        placement.mode,
        quality,
        total,
        groups,
        placement.transfers,
        unclaimed,
        placement.cascades,
        placement.objective,
        placement.energy,
    )


def _quality(placement: Placement) -> str:
    """ "exact" only where the makespan is proven least (hetgen/partition/optimal.py); otherwise how
    far from the lower bound it may be; then how the search went."""
    gap = placement.gap
    if placement.objective == "energy" and placement.mode == "cost":
        quality = "exact: the least energy" if placement.optimal else "least energy not proven"
    elif placement.mode == "greedy" or gap is None:
        quality = "heuristic" if placement.mode == "greedy" else "not judged"
    elif placement.optimal:
        quality = "exact"
    else:
        quality = f"within {gap:.1%} of the lower bound {placement.bound_us:.1f} us"
    if gap is not None and abs(placement.total_us - placement.searched_us) > 1e-6 * max(1.0, placement.searched_us):
        quality += f" at the search's prices ({placement.searched_us:.1f} us before cascades and kernel choices)"
    if placement.mode == "cost" and not placement.exact:
        quality += ", beam-bounded search"
    return f"{quality}: {placement.search_note}" if placement.search_note else quality


def _charged_group(placement: Placement, graph: Graph) -> dict[Transfer, int]:
    """The group each transfer is charged to: the first group on its destination (or beyond it) that
    reads the tensor; failing that (a graph output returning to the root), the group that produced it."""
    index = {group.name: k for k, group in enumerate(placement.groups)}
    readers: dict[tuple[str, str], int] = {}
    producer: dict[str, int] = {}
    for node in graph.nodes:
        k = index[placement.group_of(node.name).name]
        for tensor in node.inputs:
            if tensor:
                key = (tensor, placement.groups[k].target)
                readers[key] = min(readers.get(key, k), k)
        for tensor in node.outputs:
            if tensor:
                producer[tensor] = k
    onward: dict[tuple[str, str], list[Transfer]] = {}  # (tensor, place) -> copies leaving it
    for transfer in placement.transfers:
        onward.setdefault((transfer.tensor, transfer.src), []).append(transfer)

    def first_reader(transfer: Transfer) -> int | None:
        """The first group reading the tensor where this copy lands, or beyond it (a copy through a
        co-processor's memory on the way to its accelerator)."""
        found = [readers[key]] if (key := (transfer.tensor, transfer.dst)) in readers else []
        found += [k for t in onward.get(key, ()) if (k := first_reader(t)) is not None]
        return min(found, default=None)

    charged = {}
    for transfer in placement.transfers:
        k = first_reader(transfer)
        k = producer.get(transfer.tensor) if k is None else k
        if k is None:
            raise InternalError(f"transfer of {transfer.tensor!r} has no reader on {transfer.dst} and no producer")
        charged[transfer] = k
    return charged


def _route(transfer: Transfer) -> str:
    return ", ".join(
        [f"{link.below} link {link.bandwidth_gbps:g} GB/s + {link.latency_us:g} us" for link in transfer.links]
        + [f"{dma.target} DMA {dma.bandwidth_gbps:g} GB/s" for dma in transfer.dma]
    )


def _transfer_line(t: Transfer) -> str:
    route = f" over {_route(t)}" if t.links or t.dma else ""
    return f"{t.tensor}: {t.src} -> {t.dst}, {format_bytes(t.bytes)}{route}, {t.cost_us:.1f} us"


def render_text(e: Explanation, colour: bool = False) -> str:
    """`colour`: each device's name in its colour on the page (`DEVICE_COLOURS`), for a terminal."""
    colours = device_colours(dict.fromkeys(r.group.target for r in e.groups))

    def device(target: str) -> str:
        return ansi(target, colours[target]) if colour and target in colours else target

    lines = [
        f"placement of '{e.graph}' ({e.mode} mode, {e.quality}): {e.total_us:.1f} us, "
        f"{len(e.groups)} groups, {len(e.transfers)} transfers",
        "",
    ]
    for report in e.groups:
        group = report.group
        lines.append(f"{group.name}  {device(group.target)}  [{group.label}]  {group.cost_us:.1f} us")
        lines.append(f"    ops: {', '.join(f'{name} ({op})' for name, op in report.ops)}")
        lines.append(f"    launch: {group.launch_us:.1f} us of the {group.cost_us:.1f} us")
        if group.searched_us is not None:
            lines.append(
                f"    kernels: {', '.join(group.variants)} (chosen after placement; "
                f"the search priced the table's kernels at {group.searched_us:.1f} us)"
            )
        if group.bank_us:
            lines.append(
                f"    memory: {', '.join(f'{bank} {us:.1f} us' for bank, us in group.bank_us)} "
                "(its traffic at the banks its buffers and weights live in; the search and the alternatives "
                "priced it at the CPU's one bandwidth)"
            )
        if group.weight_bytes:
            lines.append(
                f"    weights: {format_bytes(group.weight_bytes)} loaded into local memory by DMA, "
                f"{group.weight_us:.1f} us of the {group.cost_us:.1f} us"
            )
        for rank, a in enumerate(group.alternatives):
            lines.append(
                f"    {'runner-up' if rank == 0 else 'lost'}: {device(a.target)} [{a.label}] {a.cost_us:.1f} us, {a.why}"
            )
        for r in group.refused:
            lines.append(f"    refused: {r.node} on {r.target}: {r.text}")
        if group.reason:
            lines.append(f"    why: {group.reason}")
        for t in report.transfers:
            lines.append(f"    copies {_transfer_line(t)}")
        for tiling in group.tilings:
            lines.append(f"    tiles: {_tiling_line(tiling)}")
    lines.append("")
    if e.unclaimed:
        lines.append("operators no accelerator could take:")
        lines.extend(f"  {u.node} ({u.op}): {u.reason}" for u in e.unclaimed)
        lines.append("")
    if e.cascades:
        lines.append("cascades (chosen by price over layer by layer):")
        lines.extend(f"  {_cascade_line(c)}" for c in e.cascades)
        lines.append("")
    if e.transfers:
        lines.append("transfers:")
        lines.extend(f"  {_transfer_line(t)}" for t in e.transfers)
        lines.append("")
    lines.append(
        f"total: {e.total_us:.1f} us, devices running concurrently with their controllers (one at a time: "
        f"groups {e.group_us:.1f} us, of which launches {e.launch_us:.1f} us, + transfers {e.transfer_us:.1f} us)"
    )
    lines.extend(energy_lines(e, device))
    return "\n".join(lines) + "\n"


def energy_lines(e: Explanation, device=str) -> list[str]:
    """The energy per inference per device and in total (where the platform declares figures),
    and which objective the placement minimised (text and the HTML page print the same lines)."""
    if e.energy is None:  # latency, on a platform without energy figures: nothing to add
        return [] if e.objective == "latency" else [f"objective: {e.objective}"]
    energy = e.energy
    lines = [
        f"objective: {e.objective}; energy per inference {energy.total_nj / 1000:.3f} uJ"
        f" (static {energy.static_nj / 1000:.3f} uJ over {energy.makespan_us:.1f} us,"
        f" links {energy.link_nj / 1000:.3f} uJ)"
    ]
    for d in energy.devices:
        lines.append(
            f"  {device(d.path)}: {d.total_nj / 1000:.3f} uJ (compute {d.compute_nj / 1000:.3f} uJ for"
            f" {d.macs:.4g} MACs, {format_bytes(d.local_bytes)} local, {format_bytes(d.main_bytes)} main;"
            f" copies {d.copy_nj / 1000:.3f} uJ; static {d.static_nj / 1000:.3f} uJ)"
        )
    return lines


def _tiling_line(t: Tiling) -> str:
    shape = "x".join(map(str, t.tile_shape))
    buffering = "double-buffered" if t.double_buffered else "single-buffered"
    residual = f" of which the residual {format_bytes(t.residual_bytes)}" if t.residual_bytes else ""
    return (
        f"{t.unit}: {t.split}, {t.count} tile{'s' if t.count != 1 else ''} of {shape}, DMA {format_bytes(t.dma_bytes)} "
        f"(in {format_bytes(t.load_bytes)}{residual}, out {format_bytes(t.store_bytes)}), {buffering}, "
        f"SRAM {format_bytes(t.sram_bytes)}"
    )


def _cascade_line(c: Cascade) -> str:
    return (
        f"{', '.join(c.groups)} on {c.target}: {c.stripes} stripe{'s' if c.stripes != 1 else ''} of {c.stripe} "
        f"row{'s' if c.stripe != 1 else ''} (rows a stripe: {', '.join(map(str, c.rows))}; input buffers: "
        f"{', '.join(map(str, c.buffer_rows))} rows), SRAM {format_bytes(c.sram_bytes)} "
        f"(layer by layer {format_bytes(c.layer_sram_bytes)}), DMA {format_bytes(c.dma_bytes)} "
        f"(layer by layer {format_bytes(c.layer_dma_bytes)}, {format_bytes(c.saved_bytes)} saved), "
        f"SRAM-to-SRAM moves {format_bytes(c.move_bytes)}, "
        f"{c.cost_us:.1f} us (layer by layer {c.layer_us:.1f} us)"
    )


def _cascade_json(c: Cascade) -> dict:
    return {
        **asdict(c),
        "groups": list(c.groups),
        "units": list(c.units),
        "rows": list(c.rows),
        "buffer_rows": list(c.buffer_rows),
        "saved_bytes": c.saved_bytes,
    }


def _tiling_json(t: Tiling) -> dict:
    document = {**asdict(t), "tile_shape": list(t.tile_shape), "dma_bytes": t.dma_bytes}
    if not t.residual_bytes:  # only a fused residual unit has it
        del document["residual_bytes"]
    return document


def _transfer_json(t: Transfer) -> dict:
    return {
        "tensor": t.tensor,
        "src": t.src,
        "dst": t.dst,
        "bytes": t.bytes,
        "cost_us": t.cost_us,
        "links": [asdict(link) for link in t.links],
        "dma": [asdict(dma) for dma in t.dma],
        "route": _route(t),
    }


def _refusal_json(r: Refusal) -> dict:
    return {"node": r.node, "target": r.target, "label": r.label, "reason": r.reason, "text": r.text}


def _round_times(value, key: str = ""):
    """Every time in the document (a field named `us` or `..._us`) to `US_DECIMALS`, recursively."""
    if isinstance(value, dict):
        return {k: _round_times(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_round_times(v, key) for v in value]
    if isinstance(value, float) and (key == "us" or key.endswith("_us")):
        return us(value)
    return value


def _total(values) -> float:
    """A sum of rounded times, rounded: the parts as printed add up to the total as printed."""
    return us(sum(values))


def render_json(e: Explanation) -> dict:
    """The JSON document (docs/explain-json.md, `hetgen schema --explain`): times in microseconds
    rounded to 0.01 us; every sum is taken over the rounded parts, so the printed parts add up."""
    groups = []
    for r in e.groups:
        g = r.group
        transfers = [_round_times(_transfer_json(t)) for t in r.transfers]
        compared = us(g.alternatives[0].cost_us - g.alternatives[0].delta_us) if g.alternatives else None
        alternatives = []
        for a in g.alternatives:
            cost = us(a.cost_us)
            alternatives.append(
                {"target": a.target, "label": a.label, "cost_us": cost, "delta_us": us(cost - compared), "why": a.why}
            )
        copies_us = _total(t["cost_us"] for t in transfers)
        groups.append(
            {
                "name": g.name,
                "target": g.target,
                "ops": [name for name, _ in r.ops],
                "op_types": [op for _, op in r.ops],
                "cost_us": us(g.cost_us),
                "launch_us": us(g.launch_us),
                "variants": list(g.variants),
                "searched_us": us(g.searched_us),
                "bank_us": {bank: us(t) for bank, t in g.bank_us},
                "label": g.label,
                "reason": g.reason,
                "compared_us": compared,
                "alternatives": alternatives,
                "refused": [_refusal_json(x) for x in g.refused],
                "transfers": transfers,
                "transfer_us": copies_us,
                "weight_loads": {"bytes": g.weight_bytes, "us": us(g.weight_us)},
                "copies": {"count": len(r.transfers), "bytes": sum(t.bytes for t in r.transfers), "us": copies_us},
                "tiling": [_round_times(_tiling_json(t)) for t in g.tilings],
            }
        )
    transfers = [_round_times(_transfer_json(t)) for t in e.transfers]
    return {
        "graph": e.graph,
        "mode": e.mode,
        "quality": e.quality,
        "groups": groups,
        "transfers": transfers,
        "cascades": [_round_times(_cascade_json(c)) for c in e.cascades],
        "total_us": us(e.total_us),
        "objective": e.objective,
        "energy": None if e.energy is None else e.energy.to_json(),
        "group_us": _total(g["cost_us"] for g in groups),
        "launch_us": _total(g["launch_us"] for g in groups),
        "transfer_us": _total(t["cost_us"] for t in transfers),
        "unclaimed": [
            {"node": u.node, "op": u.op, "reason": u.reason, "refusals": [_refusal_json(x) for x in u.refusals]}
            for u in e.unclaimed
        ],
    }


def explain_text(placement: Placement, graph: Graph, colour: bool = False) -> str:
    text = render_text(explanation(placement, graph), colour)
    if placement.pipeline is not None:
        ending = text[len(text.rstrip("\n")) :]  # as render_text ends
        text = text.rstrip("\n") + "\n" + pipeline_text(placement.pipeline) + ending
    return text


def explain_json(placement: Placement, graph: Graph) -> dict:
    """A JSON-ready dict: the same facts as the text, with every number and reason as its own field."""
    document = render_json(explanation(placement, graph))
    if placement.pipeline is not None:  # objective throughput (hetgen/partition/throughput.py)
        document["pipeline"] = placement.pipeline.to_json()
    return document


def pipeline_text(pipeline) -> str:
    """The pipeline of a throughput placement: each resource's groups and work per frame, the period."""
    lines = [
        f"pipeline (objective throughput): period {pipeline.period_us:.1f} us, set by {pipeline.bottleneck}; "
        f"{pipeline.depth} frames in flight run at {pipeline.frames_period_us:.1f} us a frame "
        f"({pipeline.fps:.0f} frames/s); one frame alone {pipeline.latency_us:.1f} us, "
        f"in the pipeline {pipeline.frames_latency_us:.1f} us; the latency placement's period "
        f"{pipeline.latency_period_us:.1f} us"
    ]
    if pipeline.bound_us:
        lines.append(
            f"  at the search's prices: period {pipeline.searched_us:.1f} us, none below {pipeline.bound_us:.1f} us"
            f" (gap at most {pipeline.gap:.0%})"
        )
    for path, busy in pipeline.busy_us.items():
        groups = pipeline.stages.get(path, ())
        lines.append(f"  {path}: {busy:.1f} us a frame, {len(groups)} groups: {' '.join(groups)}")
    return "\n".join(lines)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def explain_dot(placement: Placement, graph: Graph) -> str:
    """Graphviz source: one cluster per target, copies across targets drawn in red."""
    ops = {node.name: node.op for node in graph.nodes}
    lines = ["digraph placement {", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
    for index, target in enumerate(placement.targets()):
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f"    label={_quoted(target)};")
        for group in placement.groups:
            if group.target != target:
                continue
            for name in group.nodes:
                label = _quoted(f"{name}\n{ops.get(name, '')} [{group.label}]")
                lines.append(f"    {_quoted(name)} [label={label}];")
        lines.append("  }")
    producer = {out: node.name for node in graph.nodes for out in node.outputs if out}
    for name in graph.inputs:
        if not graph.is_constant(name):
            lines.append(f"  {_quoted('in:' + name)} [shape=ellipse, label={_quoted(name)}];")
    for name in graph.outputs:
        lines.append(f"  {_quoted('out:' + name)} [shape=ellipse, label={_quoted(name)}];")
    for node in graph.nodes:
        for tensor in dict.fromkeys(node.inputs):
            if not tensor or graph.is_constant(tensor):
                continue
            source = producer.get(tensor)
            crossing = source is not None and placement.target_of(source) != placement.target_of(node.name)
            style = ", color=red" if crossing else ""
            tail = _quoted(source) if source else _quoted("in:" + tensor)
            lines.append(f"  {tail} -> {_quoted(node.name)} [label={_quoted(tensor)}{style}];")
    for name in graph.outputs:
        source = producer.get(name)
        if source is not None:
            lines.append(f"  {_quoted(source)} -> {_quoted('out:' + name)} [label={_quoted(name)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def priced_timeline(placement: Placement, graph: Graph, platform, trace: Trace) -> tuple[float, ProgramSteps]:
    """The program lowering emits for the placement, timed at the cost model's prices by the one
    interpreter (hetgen/spec/timeline.py), each step told to `trace`: the makespan is the total the
    placement reports (hetgen/partition/choices.py: `placement_makespan_of` times the same program)."""
    topology = Topology(platform)

    def copy_us(src: str, dst: str, nbytes: int) -> float:
        return sum(hop.us(nbytes) for hop in topology.copies(src, dst))

    program, groups = placement_program(placement.groups, graph, platform, placement.cascades)
    return run_timeline(program, estimated_timing(program, groups, copy_us), trace), program
