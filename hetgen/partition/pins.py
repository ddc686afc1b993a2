"""User pins: `{node name | ONNX node name | pattern label: target path}`.

A pinned node only goes to its target. A node name beats an ONNX name, which beats a pattern label
(a label pins every node some target's pattern of that label matches). A pin that cannot be honoured
is the user's problem: a PlacementError naming the node, the target and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetgen.errors import PlacementError
from hetgen.partition.space import Candidate, SearchSpace
from hetgen.platform.model import Role


@dataclass(frozen=True)
class Pin:
    loc: int
    key: str  # the pin entry that put the node there, for messages


def _location(space: SearchSpace, key: str, path: str) -> int:
    loc = space.loc_of_path.get(path)
    if loc is not None:
        return loc
    root = space.platform.root.name
    if not path.startswith(f"{root}/") and f"{root}/{path}" in space.loc_of_path:
        return space.loc_of_path[f"{root}/{path}"]  # paths may omit the root's name, as in the platform file
    for target in space.platform.root.walk():
        if target.path_str == path and target.role is Role.COMPOSITE and target.host is not None:
            return space.loc_of_path[target.host.path_str]
    raise PlacementError(f"pin {key!r}: no target {path!r}; targets that run operators: {', '.join(space.paths)}")


def resolve_pins(space: SearchSpace, pins: Mapping[str, str]) -> dict[int, Pin]:
    """Node index -> its pin."""
    by_source: dict[str, list[int]] = {}
    for index, node in enumerate(space.graph.nodes):
        if node.source_name:
            by_source.setdefault(node.source_name, []).append(index)
    by_label: dict[str, set[int]] = {}
    for match in space.matches.matches:
        by_label.setdefault(match.label, set()).update(match.nodes)
    for rejection in space.matches.rejections:
        by_label.setdefault(rejection.label, set())

    resolved: dict[int, tuple[int, Pin]] = {}  # node -> (precedence, pin)
    for key, path in pins.items():
        loc = _location(space, key, path)
        if key in space.node_index:
            nodes, rank = [space.node_index[key]], 2
        elif key in by_source:
            nodes, rank = by_source[key], 1
        elif key in by_label:
            nodes, rank = sorted(by_label[key]), 0
        elif key in space.graph.removed_sources:
            raise PlacementError(
                f"pin {key!r} names an ONNX node that hetgen's frontend removed before placement (folded into a "
                "constant or into the operator before it, e.g. BatchNormalization into Conv, or dropped as an "
                "Identity, Dropout or dead node); pin the node it was folded into, or see `hetgen explain` for "
                "the nodes that are placed"
            )
        else:
            raise PlacementError(f"pin {key!r} names no node, ONNX node name or pattern label of this model")
        for node in nodes:
            if node not in resolved or resolved[node][0] < rank:
                resolved[node] = (rank, Pin(loc, key))
    return {node: pin for node, (_, pin) in resolved.items()}


def restrict(space: SearchSpace, pins: Mapping[int, Pin]) -> tuple[Candidate, ...]:
    """The candidates the pins allow; raise when a pinned node is left with none."""

    def allowed(candidate: Candidate) -> bool:
        return all(node not in pins or pins[node].loc == candidate.loc for node in candidate.nodes)

    kept = tuple(c for c in space.candidates if allowed(c))
    covered = {node for c in kept for node in c.nodes}
    for node in sorted(pins):
        if node not in covered:
            raise PlacementError(_impossible(space, node, pins))
    return kept


def _impossible(space: SearchSpace, node: int, pins: Mapping[int, Pin]) -> str:
    pin = pins[node]
    graph_node = space.graph.nodes[node]
    path = space.paths[pin.loc]
    head = f"cannot pin {graph_node.label} to {path} (pin {pin.key!r})"
    reasons = sorted(
        {f"pattern '{r.label}': {r.reason}" for r in space.matches.rejections if r.target == path and node in r.nodes}
    )
    if reasons:
        return f"{head}: {'; '.join(reasons)}"
    there = [c for c in space.candidates if c.loc == pin.loc and node in c.nodes]
    if there:
        others = sorted(
            {
                f"{space.graph.nodes[n].name} (pinned to {space.paths[pins[n].loc]})"
                for c in there
                for n in c.nodes
                if n in pins and pins[n].loc != pin.loc
            }
        )
        return f"{head}: every group that could run it there also holds {', '.join(others)}"
    kind = space.targets[pin.loc].kind.name
    return f"{head}: no pattern of kind '{kind}' matches {graph_node.op} here"
