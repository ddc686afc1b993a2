"""Which of the kernel table's units a pattern can name: the platform stage's half of "one fusion
mechanism" (issue 19 item 4).

The kernel table (hetgen/spec) is the only source of multi-operator units; a kind's pattern table
only says which of them the device may run. A pattern's `chain` must therefore describe a unit the
table can form: one operator step (`Conv`, `Add|Mul`, `*`), or a head whose lowering takes an
epilogue followed by steps of activations it absorbs (`[Conv, "Relu|Clip?"]`: hetgen/spec/fusion.py;
a head step's other alternatives, `Mul` in `[Add|Mul, Relu?]`, run alone). The multi-operator units
that are not such a chain are named by kind (`unit: conv_residual`, with a chain of its operators
where the device runs only some: `[Conv, Add, "Relu?"]`); the spec stage gives the names
their meaning (hetgen/spec/patterns.py asserts it defines exactly these). Checked when a kind is
loaded, so a chain no table could form is refused with its file position before any model is seen.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetgen.ops.base import FUSABLE_ACTIVATIONS
from hetgen.ops.registry import OPS
from hetgen.platform.model import PatternStep

ANY_OP = "*"
# The kernel table's multi-operator unit kinds a pattern names with `unit:` (what each fuses).
NAMED_UNITS = {
    "attention": "MatMul, scale, mask, Softmax and MatMul with the Transposes around them, as one kernel",
    "conv_residual": "a Conv (or QLinearConv) whose epilogue adds a residual tensor (its Add, or QLinearAdd) and the "
    "Add's activations",
}
# a conv_residual unit's int8 form (hetgen/spec/patterns.py), as a pattern's chain starts
RESIDUAL_QUANTIZED_HEADS = [(("QLinearConv",), False), (("QLinearAdd",), False)]
CONTROLLER_UNITS = ("attention",)  # no tiling (hetgen/spec/tiling.py): only a controller runs them
EPILOGUE_HEADS = tuple(sorted(op for op, definition in OPS.items() if definition.fusable_epilogue))
ACTIVATIONS = tuple(sorted(FUSABLE_ACTIVATIONS))


def accepted_units() -> str:
    """The `accepted:` list of what a pattern may describe."""
    return (
        "one operator step ('Conv', 'Add|Mul', '*'); a head that takes an epilogue "
        f"({', '.join(EPILOGUE_HEADS)}) followed by activation steps ({', '.join(ACTIVATIONS)}); "
        f"or 'unit:' naming one of the kernel table's units ({', '.join(sorted(NAMED_UNITS))})"
    )


def chain_problem(chain: Sequence[PatternStep], unit: str | None = None) -> str | None:
    """Why `chain` describes no unit the kernel table forms (of kind `unit`, where the pattern names
    one), or None when it does."""
    if unit == "attention":
        return "attention is a graph of operators, not a chain; name it with 'unit: attention' alone"
    if unit == "conv_residual":
        if not chain:
            return None
        heads = [(step.ops, step.optional) for step in chain[:2]]
        if len(chain) < 2 or heads not in ([(("Conv",), False), (("Add",), False)], RESIDUAL_QUANTIZED_HEADS):
            return "a conv_residual unit is Conv, Add (or QLinearConv, QLinearAdd), then the Add's activations"
        return _activations_problem(chain[2:])
    if len(chain) <= 1:
        return None
    head, *rest = chain
    if ANY_OP not in head.ops and not set(head.ops) & set(EPILOGUE_HEADS):
        return f"its head {'|'.join(head.ops)} takes no epilogue, so no unit starts with it and goes on"
    return _activations_problem(rest)


def _activations_problem(steps: Sequence[PatternStep]) -> str | None:
    for step in steps:
        others = [op for op in step.ops if op not in ACTIVATIONS]
        if others:
            return f"{', '.join(others)} after the head is not an activation the head's epilogue absorbs"
    return None


def chain_text(chain: Sequence[PatternStep]) -> str:
    return ", ".join("|".join(step.ops) + ("?" if step.optional else "") for step in chain)
