"""The declarative `where` predicates of a pattern: may this device run this match?

Each predicate is a small function from (its value, the match) to a rejection reason, or None when
the match passes. The reasons end up in `hetgen explain`, so they name the tensor or node and the
numbers involved. The platform stage owns their names and validates their values (`hetgen/platform/predicates.py`),
so a typo is caught with a file position before any model is seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetgen.errors import InternalError
from hetgen.ir import Graph, Node
from hetgen.ops.registry import op_def
from hetgen.platform.model import Pattern, Target
from hetgen.platform.predicates import PREDICATE_VALIDATORS
from hetgen.spec import KernelTable
from hetgen.spec.invocation import group_plans, one_unit_per_invocation
from hetgen.spec.tiling import Unfit


@dataclass(frozen=True)
class MatchView:
    """What a predicate sees: the matched nodes, the graph they live in, the candidate target, and
    the graph's kernel table (what each node's kernel needs)."""

    nodes: tuple[Node, ...]
    graph: Graph
    target: Target
    kernels: KernelTable

    def tensors(self) -> list[str]:
        """Every tensor the match reads or writes, each once, in order of appearance."""
        names = (name for node in self.nodes for name in (*node.inputs, *node.outputs) if name)
        return [name for name in dict.fromkeys(names) if name in self.graph.types]


def working_set(view: MatchView) -> tuple[int, int, int]:
    """(input, output, weight) bytes of a match: what must sit in the device's memory at once."""
    graph = view.graph
    produced = {name for node in view.nodes for name in node.outputs if name}
    read = {name for node in view.nodes for name in node.inputs if name and name not in produced}
    weights = sum(graph.types[name].nbytes for name in read if graph.is_constant(name))
    inputs = sum(graph.types[name].nbytes for name in read if not graph.is_constant(name))
    outputs = sum(graph.types[name].nbytes for name in view.nodes[-1].outputs if name)
    return inputs, outputs, weights


def _weight_input(node: Node) -> int | None:
    """The input of `node` holding a weight with spatial kernel dimensions (`OpDef.weight_input`)."""
    definition = op_def(node.op)
    return definition.weight_input if definition is not None else None


def _kernel_dims(node: Node, graph: Graph) -> tuple[int, ...] | None:
    kernel_shape = node.attr("kernel_shape")
    if kernel_shape is not None:
        return tuple(int(k) for k in kernel_shape)
    index = _weight_input(node)
    if index is None or index >= len(node.inputs) or node.inputs[index] not in graph.types:
        return None
    return graph.types[node.inputs[index]].shape[2:]


def _check_dtype(value: Any, view: MatchView) -> str | None:
    accepted = (value,) if isinstance(value, str) else tuple(value)
    for name in view.tensors():
        label = view.graph.types[name].dtype.label
        if label not in accepted:
            return f"dtype {label} of tensor '{name}' not in [{', '.join(accepted)}]"
    return None


def _check_max_kernel(value: Any, view: MatchView) -> str | None:
    for node in view.nodes:
        dims = _kernel_dims(node, view.graph)
        if dims and max(dims) > value:
            return f"kernel {'x'.join(map(str, dims))} of {node.label} is too big (max_kernel {value})"
    return None


def _check_groups(value: Any, view: MatchView) -> str | None:
    accepted = value if isinstance(value, (list, tuple)) else (value,)
    for node in view.nodes:
        if _weight_input(node) is None:
            continue
        group = int(node.attr("group", 1))
        channels = view.graph.types[node.inputs[0]].shape[1] if node.inputs[0] in view.graph.types else None
        if group in accepted or ("depthwise" in accepted and group == channels):
            continue
        shown = ", ".join(map(str, accepted))
        return f"{node.label} has group={group} (input channels {channels}); accepted: {shown}"
    return None


def _check_max_rank(value: Any, view: MatchView) -> str | None:
    for name in view.tensors():
        rank = view.graph.types[name].rank
        if rank > value:
            return f"tensor '{name}' has rank {rank} > max_rank {value}"
    return None


def _normalized(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return _normalized(value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(_normalized(item) for item in value)
    return value


def _check_attrs(value: Any, view: MatchView) -> str | None:
    for key, wanted in value.items():
        for node in view.nodes:
            if node.has_attr(key) and _normalized(node.attr(key)) != _normalized(wanted):
                return f"{node.label} has {key}={_normalized(node.attr(key))}; accepted: {_normalized(wanted)}"
    return None


def _check_fits_memory(value: Any, view: MatchView) -> str | None:
    """A match fits when each of its kernel units has a tiling whose SRAM buffers fit
    (hetgen/spec/tiling.py); on other targets with bounded memory, when its working set does."""
    capacity = view.target.memory_bytes
    if not value or capacity is None:
        return None
    if one_unit_per_invocation(view.target):
        for plan in group_plans(view.nodes, view.graph, view.target, view.kernels):
            if isinstance(plan, Unfit) and not plan.memory:  # no kernel for it: no memory would help
                return f"{view.target.path_str} has no kernel for it: {plan.reason}"
            if isinstance(plan, Unfit):
                return f"does not fit memory: {plan.reason} of {view.target.path_str}"
        return None
    inputs, outputs, weights = working_set(view)
    scratch = max((view.kernels.node(node.name).scratch_bytes for node in view.nodes), default=0)
    total = inputs + outputs + weights + scratch
    if total <= capacity:
        return None
    return (
        f"does not fit memory: working set {total} bytes (inputs {inputs}, outputs {outputs}, "
        f"weights {weights}, kernel workspace {scratch}) > {capacity} bytes of {view.target.path_str}"
    )


# name -> check a match; exactly the names the platform stage validates
CHECKS: dict[str, Callable[[Any, MatchView], str | None]] = {
    "attrs": _check_attrs,
    "dtype": _check_dtype,
    "fits_memory": _check_fits_memory,
    "groups": _check_groups,
    "max_kernel": _check_max_kernel,
    "max_rank": _check_max_rank,
}
if set(CHECKS) != set(PREDICATE_VALIDATORS):  # one name list, two halves: a predicate is both or neither
    raise InternalError(
        f"predicates validated but never checked, or the reverse: {set(CHECKS) ^ set(PREDICATE_VALIDATORS)}"
    )


def rejection(pattern: Pattern, view: MatchView) -> str | None:
    """Why `pattern`'s predicates reject the match, or None when they all accept it."""
    for name, value in pattern.where.items():
        reason = CHECKS[name](value, view)
        if reason:
            return reason
    return None
