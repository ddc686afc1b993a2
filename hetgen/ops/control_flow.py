"""If, Loop and Scan: compiled where folding decides them (hetgen/frontend/control_flow.py replaces an If
with a constant condition by its branch, and unrolls a Loop with constant trip count and
condition, and a Scan, whose length is static). No kernel runs; with a condition or trip count computed at run time the frontend
refuses the model, naming the node and the input (`const_inputs`)."""

from __future__ import annotations

from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def lower(op: OpInstance) -> Kernel:
    if op.node.op == "Scan":  # only opset 8's form stays: sequence_lens and a batch axis
        raise Unsupported("Scan of opset 8 (sequence_lens, a batch axis); accepted: Scan of opset 9 and later")
    raise Unsupported(f"{op.node.op} whose control is computed at run time; hetgen compiles static graphs")


DEFS = (
    OpDef("If", lower, const_inputs=(0,)),
    OpDef("Loop", lower, const_inputs=(0, 1)),
    OpDef("Scan", lower),  # opset 9 on: always unrolled (its length is its inputs' static extent)
)
