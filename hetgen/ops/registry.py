"""The explicit list of operators hetgen supports.

One module per operator (or per small family of operators that share one template), each exposing
`DEFS: tuple[OpDef, ...]`. Adding an operator is adding a module and one line below.
"""

from __future__ import annotations

# fmt: off
# -- compute operators (convolution, GEMM, pooling, normalisation) --
# -- elementwise, reduction and data-movement operators --
from hetgen.ops import (
    _compute_list,  # noqa: E402
    _quant_list,  # noqa: E402
    _tensor_list,  # noqa: E402
)
from hetgen.ops._float16 import with_float16_boundary
from hetgen.ops._function_list import EXPANDED_CONST_INPUTS, EXPANDED_OPS  # compiled through their ONNX function body
from hetgen.ops.base import OpDef

# fmt: on

OPS: dict[str, OpDef] = {
    d.op: with_float16_boundary(d) for module in (*_compute_list.MODULES, *_tensor_list.MODULES) for d in module.DEFS
}

OPS.update({d.op: d for module in _quant_list.MODULES for d in module.DEFS})


def supported_ops() -> frozenset[str]:
    return frozenset(OPS) | EXPANDED_OPS


def op_def(op: str) -> OpDef | None:
    return OPS.get(op)


def const_inputs(op: str) -> tuple[int, ...]:
    """The inputs of `op` that must be known at compile time (registered or expanded operators)."""
    definition = OPS.get(op)
    return definition.const_inputs if definition else EXPANDED_CONST_INPUTS.get(op, ())
