"""Operators whose output shape depends on their input values: Unique, Compress, MelWeightMatrix.
(NonZero and NonMaxSuppression also run on run-time values, into a buffer of their output's bound:
hetgen/ops/nonzero.py, nms.py.)

hetgen needs static shapes, so these compile where every input is known at compile time: the
frontend then folds the node (onnx's reference evaluator computes it) and no kernel runs. With an
input computed at run time the frontend refuses the model, naming the node and the input
(`OpDef.const_inputs`); a static upper bound on such an output does not give the exact ONNX shape.
"""

from __future__ import annotations

from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported

# operator: the inputs that must be constants (all of them)
FOLDED = {
    "Compress": (0, 1),
    "MelWeightMatrix": (0, 1, 2, 3, 4),
    "Unique": (0,),
}


def lower(op: OpInstance) -> Kernel:
    raise Unsupported(
        f"{op.node.op} on values computed at run time: its output's shape depends on them, and hetgen "
        "needs static shapes (make its inputs constants so the frontend folds it)"
    )


DEFS = tuple(OpDef(name, lower, const_inputs=inputs) for name, inputs in sorted(FOLDED.items()))
