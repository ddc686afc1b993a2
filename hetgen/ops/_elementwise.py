"""The one kernel shape behind every elementwise operator: broadcast loads, a C expression, a store.

A lowering names its operands (which `args` slot, which C variable, which dtype and shape) and gives
the C expression of the result in terms of those variables; `elementwise_kernel` works out the
collapsed loop nest and each operand's index and fills the view-model of `elementwise.c.j2`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from hetgen.ir import DType, TensorType
from hetgen.ops import _parallel
from hetgen.ops._common import broadcast_strides, collapse, contiguous_strides, index_expr, loops_for
from hetgen.ops.base import Epilogue, Kernel, Unsupported

TEMPLATE = "kernels/elementwise.c.j2"


@dataclass(frozen=True)
class Operand:
    var: str  # the C variable that holds one element inside the loop
    arg: int  # its slot in `args`
    tensor: TensorType


def elementwise_kernel(
    operands: Sequence[Operand],
    out_type: TensorType,
    expression: str,
    *,
    out_arg: int,
    flops_per_element: int = 1,
    epilogue: Sequence[Epilogue] = (),
    helpers: bool = False,
) -> Kernel:
    """`out[i] = expression` over `out_type`, each operand broadcast to it (numpy rules).

    `helpers` says the expression calls functions from `templates/runtime/hg_tensor.h`.
    """
    out_shape = out_type.shape
    strides = [broadcast_strides(o.tensor.shape, out_shape) for o in operands]
    strides.append(contiguous_strides(out_shape))
    extents, collapsed = collapse(out_shape, strides)
    if not extents:  # one element: still one loop, as templates that strip-mine the innermost one expect
        extents, collapsed = (1,), tuple((0,) for _ in strides)
    loops = loops_for(extents)
    loads = [
        {
            "var": o.var,
            "ctype": o.tensor.dtype.c_type,
            "arg": o.arg,
            "index": index_expr(loops, s),
        }
        for o, s in zip(operands, collapsed)
        if re.search(rf"\b{o.var}\b", expression)  # e.g. Pow's exponent, when baked in
    ]
    size = out_type.size
    # the outermost loop in chunks; a lone loop in multiples of 64 elements (whole vectors)
    inner = size // loops[0].extent if size else 0
    split = _parallel.split(loops[0].extent, inner * (flops_per_element + len(epilogue)), 64 if len(loops) == 1 else 1)
    return Kernel(
        template=TEMPLATE,
        params={
            "empty": size == 0,
            "loads": loads,
            "loops": loops,
            "outer_loops": loops[:-1],  # the vector unit's kernel strip-mines the innermost loop
            "innermost_loop": loops[-1] if loops else None,
            "out_ctype": out_type.dtype.c_type,
            "out_arg": out_arg,
            "out_index": index_expr(loops, collapsed[-1]),
            "expression": expression,
            "epilogue": tuple(epilogue),
            "uses_helpers": helpers,
            "split": split,
        },
        flops=size * (flops_per_element + len(epilogue)),
        bytes_accessed=sum(o.tensor.nbytes for o in operands) + out_type.nbytes,
        helpers=(_parallel.HELPER,) if split else (),
        parallel=_parallel.tasks_of(split),
    )


def check_epilogue(epilogue: Sequence[Epilogue], dtype: DType, what: str) -> None:
    if epilogue and dtype is not DType.FLOAT32:
        raise Unsupported(f"a fused activation after {what} on {dtype.label}; accepted: float32")
