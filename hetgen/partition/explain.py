"""Explain a placement: as text for people, as JSON for tools, as Graphviz for pictures."""

from __future__ import annotations

from hetgen.ir import Graph
from hetgen.partition.cost import format_bytes
from hetgen.partition.placement import Placement


def explain_text(placement: Placement, graph: Graph) -> str:
    ops = {node.name: node.op for node in graph.nodes}
    group_us = sum(g.cost_us for g in placement.groups)
    transfer_us = sum(t.cost_us for t in placement.transfers)
    quality = "exact" if placement.exact else ("heuristic" if placement.mode == "greedy" else "beam-bounded")
    lines = [
        f"placement of '{graph.name}' ({placement.mode} mode, {quality}): {placement.total_us:.1f} us, "
        f"{len(placement.groups)} groups, {len(placement.transfers)} transfers",
        "",
    ]
    for group in placement.groups:
        lines.append(f"{group.name}  {group.target}  [{group.label}]  {group.cost_us:.1f} us")
        members = ", ".join(f"{name} ({ops.get(name, '?')})" for name in group.nodes)
        lines.append(f"    ops: {members}")
        if group.alternatives:
            runner_up = group.alternatives[0]
            lines.append(f"    runner-up: {runner_up.target} [{runner_up.label}] {runner_up.why}")
        if group.reason:
            lines.append(f"    why: {group.reason}")
    lines.append("")
    if placement.unclaimed:
        lines.append("operators no accelerator could take:")
        lines.extend(f"  {name} ({ops.get(name, '?')}): {reason}" for name, reason in placement.unclaimed)
        lines.append("")
    if placement.transfers:
        lines.append("transfers:")
        lines.extend(
            f"  {t.tensor}: {t.src} -> {t.dst}, {format_bytes(t.bytes)}, {t.cost_us:.1f} us"
            for t in placement.transfers
        )
        lines.append("")
    lines.append(f"total: {placement.total_us:.1f} us (groups {group_us:.1f} us + transfers {transfer_us:.1f} us)")
    return "\n".join(lines) + "\n"


def explain_json(placement: Placement, graph: Graph | None = None) -> dict:
    """A JSON-ready dict: groups (target, ops, cost_us, label, alternatives), transfers, total, unclaimed."""
    return {
        "groups": [
            {
                "target": group.target,
                "ops": list(group.nodes),
                "cost_us": group.cost_us,
                "label": group.label,
                "alternatives": [
                    {"target": a.target, "label": a.label, "cost_us": a.cost_us, "delta_us": a.delta_us}
                    for a in group.alternatives
                ],
            }
            for group in placement.groups
        ],
        "transfers": [
            {"tensor": t.tensor, "src": t.src, "dst": t.dst, "bytes": t.bytes, "cost_us": t.cost_us}
            for t in placement.transfers
        ],
        "total_us": placement.total_us,
        "unclaimed": [{"node": name, "reason": reason} for name, reason in placement.unclaimed],
    }


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
