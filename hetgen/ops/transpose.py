"""Transpose: a strided copy; dimensions that stay neighbours in order are merged first, so e.g.
NCHW -> NHWC is a three-deep nest (N, HW, C) and a permutation that keeps the last axis copies rows.
"""

from __future__ import annotations

import numpy as np

from hetgen.ops._common import element_view, normalize_axis
from hetgen.ops._copy import copy_from_view, copy_kernel
from hetgen.ops.base import CARRIES, Kernel, OpDef, OpInstance, Unsupported


def permutation(op: OpInstance) -> tuple[int, ...]:
    rank = op.input_types[0].rank
    perm = op.attr("perm", None)
    perm = tuple(reversed(range(rank))) if perm is None else tuple(normalize_axis(int(p), rank) for p in perm)
    if sorted(perm) != list(range(rank)):
        raise Unsupported(f"Transpose perm {perm} is not a permutation of {rank} axes")
    return perm


def lower(op: OpInstance) -> Kernel:
    x_type = op.input_types[0]
    root = element_view(x_type.shape)
    copy = copy_from_view(0, 1, root.transpose(permutation(op)), root)
    return copy_kernel([copy], x_type.dtype.itemsize)


def moved(op: OpInstance, x: np.ndarray) -> np.ndarray:
    return x.transpose(permutation(op))


DEFS = (OpDef("Transpose", lower, input_roles=CARRIES, quantized_passthrough=True, moved=moved),)
