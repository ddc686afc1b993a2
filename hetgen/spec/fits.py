"""Before placement: is there a target of the platform that could hold each tensor at all?"""

from __future__ import annotations

from hetgen.errors import PlacementError
from hetgen.ir import Graph
from hetgen.platform.model import Platform, Role


def check_graph_fits(graph: Graph, platform: Platform) -> None:
    """Before placement: refuse a tensor that no target of the platform could hold at all.

    Inputs and outputs live in the caller's buffers: each must fit some target's address space.
    Every other tensor (intermediates, weights) lives in a program's static data or a device's
    local memory. Placement and lowering would otherwise build per-element tables and cost
    figures for terabyte tensors before the per-target checks of `check_sizes` could say no.
    """
    targets = [t for t in platform.targets() if t.role is not Role.COMPOSITE]
    address = _largest(t.address_bytes for t in targets)
    held = _largest(t.memory_bytes if t.role is Role.ACCELERATOR else t.static_bytes for t in targets)
    caller = set(graph.inputs) | set(graph.outputs)
    for name, tensor_type in sorted(graph.types.items(), key=lambda item: (-item[1].nbytes, item[0])):
        if name in caller:
            limit, what = address, "address it (the largest address space: {} bytes, memory.address_bytes)"
        else:
            limit, what = held, "hold it (the most static data or local memory: {} bytes, memory.static_bytes)"
        if limit is not None and tensor_type.nbytes > limit:
            raise PlacementError(
                f"tensor {name!r} {tuple(tensor_type.shape)} of {tensor_type.dtype.label} needs {tensor_type.nbytes} "
                f"bytes; no target of platform '{platform.name}' can {what.format(limit)}. Reduce the model's shapes"
            )
        if tensor_type.nbytes <= min(x for x in (address, held, 1 << 64) if x is not None):
            return  # sorted by size: every remaining tensor fits


def _largest(sizes) -> int | None:
    """The largest bound, or None (no bound) when any target has none."""
    sizes = list(sizes)
    return None if not sizes or None in sizes else max(sizes)
