"""The declarative `where` predicates of a pattern: may this device run this match?

Each predicate is a small function from (its value, the match) to a rejection reason, or None when
the match passes. The reasons end up in `hetgen explain`, so they name the tensor or node and the
numbers involved. The platform loader validates `where` blocks with `validate_where` too, so a typo
is caught with a file position before any model is seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetgen.errors import Diagnostic, PlatformError
from hetgen.ir import DType, Graph, Node
from hetgen.platform.model import Kind, Pattern, Target
from hetgen.spec import KernelTable

# Operators whose weight input carries spatial kernel dimensions, and that input's index.
WEIGHT_INPUT = {"Conv": 1, "ConvTranspose": 1, "ConvInteger": 1, "QLinearConv": 3}

DTYPE_LABELS = tuple(dtype.label for dtype in DType)


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


def _kernel_dims(node: Node, graph: Graph) -> tuple[int, ...] | None:
    kernel_shape = node.attr("kernel_shape")
    if kernel_shape is not None:
        return tuple(int(k) for k in kernel_shape)
    index = WEIGHT_INPUT.get(node.op)
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
        if node.op not in WEIGHT_INPUT:
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
    (hetgen/lower/tiling.py); on other targets with bounded memory, when its working set does."""
    capacity = view.target.memory_bytes
    if not value or capacity is None:
        return None
    from hetgen.lower.invocation import group_plans, one_unit_per_invocation
    from hetgen.lower.tiling import Unfit

    if one_unit_per_invocation(view.target):
        for plan in group_plans(view.nodes, view.graph, view.target, view.kernels):
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


def _check_residual(value: Any, view: MatchView) -> str | None:
    """`residual: true`: the match is a Conv, its residual Add and the Add's activations, exactly as
    the kernel table fuses them into one kernel (hetgen/spec/patterns.py), so the device computes
    it as that one unit (each output tile adds its residual tile before it is stored)."""
    if not value:
        return None
    pattern = view.kernels.fused(node.name for node in view.nodes)
    if pattern is not None and pattern.residual is not None:
        return None
    conv, add = view.nodes[0], view.nodes[min(1, len(view.nodes) - 1)]
    residuals = [p for p in view.kernels.patterns.values() if p.residual is not None]
    mine = next((p for p in residuals if p.head.name == conv.name), None)
    if mine is not None:
        return f"{conv.label} with its residual Add is fused as {' + '.join(mine.names)}, not this chain"
    other = next((p for p in residuals if add.name in p.names), None)
    if other is not None:
        return f"{add.label} is fused with {other.head.label} (the first Conv it adds), not with {conv.label}"
    return (
        f"{conv.label} and {add.label} are not a residual unit (the Add's other input must be a computed "
        "float32 tensor of the Conv's output shape, and the Conv's output read only by the Add)"
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _valid_dtype(value: Any) -> str | None:
    labels = [value] if isinstance(value, str) else value
    if not isinstance(labels, (list, tuple)) or not labels or not all(isinstance(v, str) for v in labels):
        return f"dtype must be a dtype name or a list of them, not {value!r}"
    unknown = [label for label in labels if label not in DTYPE_LABELS]
    if unknown:
        return f"dtype: unknown {', '.join(unknown)}; accepted: {', '.join(DTYPE_LABELS)}"
    return None


def _valid_groups(value: Any) -> str | None:
    items = value if isinstance(value, (list, tuple)) else [value]
    if items and all(_is_count(item) or item == "depthwise" for item in items):
        return None
    return f"groups must be 1, depthwise or a list of group counts, not {value!r}"


def _valid_count(name: str) -> Callable[[Any], str | None]:
    return lambda value: None if _is_count(value) else f"{name} must be a positive integer, not {value!r}"


def _valid_attrs(value: Any) -> str | None:
    if isinstance(value, dict) or hasattr(value, "items"):
        return None
    return f"attrs must map attribute names to values, not {value!r}"


def _valid_flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"fits_memory must be true or false, not {value!r}"


def _valid_residual(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"residual must be true or false, not {value!r}"


# name -> (validate the value, check a match)
PREDICATES: dict[str, tuple[Callable[[Any], str | None], Callable[[Any, MatchView], str | None]]] = {
    "attrs": (_valid_attrs, _check_attrs),
    "dtype": (_valid_dtype, _check_dtype),
    "fits_memory": (_valid_flag, _check_fits_memory),
    "groups": (_valid_groups, _check_groups),
    "max_kernel": (_valid_count("max_kernel"), _check_max_kernel),
    "max_rank": (_valid_count("max_rank"), _check_max_rank),
    "residual": (_valid_residual, _check_residual),
}
ACCEPTED_PREDICATES = tuple(sorted(PREDICATES))


def where_problems(pattern: Pattern) -> list[str]:
    """What is wrong with a pattern's `where` block, one message per problem (empty when valid)."""
    problems = []
    for name, value in pattern.where.items():
        entry = PREDICATES.get(name)
        if entry is None:
            problems.append(
                f"pattern '{pattern.label}': unknown predicate '{name}'; accepted: {', '.join(ACCEPTED_PREDICATES)}"
            )
            continue
        message = entry[0](value)
        if message:
            problems.append(f"pattern '{pattern.label}': {message}")
    if not (
        isinstance(pattern.efficiency, (int, float)) and 0 < pattern.efficiency and math.isfinite(pattern.efficiency)
    ):
        problems.append(f"pattern '{pattern.label}': efficiency must be a positive number, not {pattern.efficiency!r}")
    return problems


def validate_where(patterns: Sequence[Pattern], kind: Kind) -> None:
    """Raise PlatformError listing every bad predicate of a kind's pattern table."""
    problems = [message for pattern in patterns for message in where_problems(pattern)]
    if problems:
        where = kind.source
        raise PlatformError(
            f"kind '{kind.name}' has an invalid pattern table",
            tuple(Diagnostic(where.file, where.line, where.column, message) for message in problems),
        )


def rejection(pattern: Pattern, view: MatchView) -> str | None:
    """Why `pattern`'s predicates reject the match, or None when they all accept it."""
    for name, value in pattern.where.items():
        reason = PREDICATES[name][1](value, view)
        if reason:
            return reason
    return None
