"""DepthToSpace (DCR and CRD) and SpaceToDepth: a reshape to 6-D, a transpose, a reshape back,
which is one strided copy."""

from __future__ import annotations

from hetgen.ops._common import element_view
from hetgen.ops._copy import copy_from_view, copy_kernel
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def _source_view(op: OpInstance, root):
    b, c, h, w = op.input_types[0].shape
    k = int(op.attr("blocksize"))
    if op.node.op == "SpaceToDepth":
        if h % k or w % k:
            raise Unsupported(f"SpaceToDepth blocksize {k} does not divide {h}x{w}")
        blocks = root.reshape(b, c, h // k, k, w // k, k)
        mode = op.attr("mode", "DCR")
        if mode == "DCR":
            return blocks.transpose(0, 3, 5, 1, 2, 4)
        if mode == "CRD":
            return blocks.transpose(0, 1, 3, 5, 2, 4)
        raise Unsupported(f"SpaceToDepth mode {mode!r}; accepted: 'DCR', 'CRD'")
    if c % (k * k):
        raise Unsupported(f"DepthToSpace blocksize {k} does not divide {c} channels")
    mode = op.attr("mode", "DCR")
    if mode == "DCR":
        return root.reshape(b, k, k, c // (k * k), h, w).transpose(0, 3, 4, 1, 5, 2)
    if mode == "CRD":
        return root.reshape(b, c // (k * k), k, k, h, w).transpose(0, 1, 4, 2, 5, 3)
    raise Unsupported(f"DepthToSpace mode {mode!r}; accepted: 'DCR', 'CRD'")


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    if x_type.rank != 4:
        raise Unsupported(f"{op.node.op} on rank {x_type.rank}; accepted: 4")
    root = element_view(x_type.shape)
    view = _source_view(op, root)
    return copy_kernel([copy_from_view(0, 1, view, root)], x_type.dtype.itemsize)


DEFS = (OpDef("DepthToSpace", lower), OpDef("SpaceToDepth", lower))
