"""MatMul with numpy semantics: 1-D operands, broadcast batch dimensions.

When B has no batch (the common activations x weights case), A's batch is folded into the rows
of one large GEMM, and a constant B is packed into the micro-kernel's panels at generate time
(`Prepacked`). Otherwise each output batch is one `hg_sgemm` call whose operand offsets come
from per-dimension strides (0 along broadcast dimensions).
"""

from __future__ import annotations

import math

import numpy as np

from hetgen.ops import _gemm_plan, _in_place, _parallel
from hetgen.ops._common import input_arg_count, require_float32, total_bytes
from hetgen.ops.base import Kernel, OpDef, OpInstance, Prepacked, Tiling, Unsupported, WorkRule


def batch_strides(batch: tuple[int, ...], out_batch: tuple[int, ...], matrix: int) -> tuple[int, ...]:
    """Element strides of an operand's batch dimensions, aligned to `out_batch`; 0 where broadcast."""
    padded = (1,) * (len(out_batch) - len(batch)) + batch
    strides, step = [], matrix
    for size in reversed(padded):
        strides.append(step if size > 1 else 0)
        step *= size
    return tuple(reversed(strides))


def matmul_shapes(op_name: str, a_shape, b_shape):
    """numpy.matmul's shapes: (m, n, k, A's batch dims, B's batch dims, their broadcast), 1-D
    operands promoted (A as a row, B as a column); Unsupported when they do not multiply."""
    if not a_shape or not b_shape:
        raise Unsupported(f"{op_name} on a scalar; accepted: operands of rank >= 1")
    (m, k) = (1, a_shape[0]) if len(a_shape) == 1 else a_shape[-2:]
    (k_b, n) = (b_shape[0], 1) if len(b_shape) == 1 else b_shape[-2:]
    if k != k_b:
        raise Unsupported(f"{op_name} inner dimensions differ: {a_shape} x {b_shape}")
    a_batch, b_batch = tuple(a_shape[:-2]), tuple(b_shape[:-2])
    try:
        out_batch = tuple(np.broadcast_shapes(a_batch, b_batch))
    except ValueError:
        raise Unsupported(f"{op_name} batch dimensions of {a_shape} and {b_shape} do not broadcast") from None
    return m, n, k, a_batch, b_batch, out_batch


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    a_shape, b_shape = op.input_types[0].shape, op.input_types[1].shape
    m, n, k, a_batch, b_batch, out_batch = matmul_shapes("MatMul", a_shape, b_shape)
    batches = math.prod(out_batch)
    fold = math.prod(b_batch) == 1 and math.prod(a_batch) == batches
    rows = m * batches if fold else m
    params = {
        "m": rows,
        "n": n,
        "k": k,
        "batches": 1 if fold else batches,
        "batch_dims": out_batch,
        "a_strides": batch_strides(a_batch, out_batch, m * k),
        "b_strides": batch_strides(b_batch, out_batch, k * n),
        "c_stride": m * n,
        "pack_bytes": _gemm_plan.pack_bytes(rows, n, k, op.gemm_blocks),
        "b_packed": False,
        "out_index": input_arg_count(op),
        "scratch_index": input_arg_count(op) + 1,
        "epilogue": op.epilogue,
    }
    prepacked = ()
    if op.constant(1) is not None and math.prod(b_batch) == 1:
        packed = _gemm_plan.pack_bytes(rows, n, k, op.gemm_blocks, b_packed=True)
        layout = lambda b: _gemm_plan.b_panels(b.reshape(k, n))  # noqa: E731
        prepacked = (Prepacked(1, layout, {"b_packed": True, "pack_bytes": packed}, packed),)
        if fold:  # bare metal: B read in flash
            prepacked = (_in_place.product_offer(rows, n, k, (k, 1), (n, 1)), *prepacked)
    return Kernel(
        template="kernels/matmul.c.j2",
        params=params,
        scratch_bytes=params["pack_bytes"],
        flops=2 * batches * m * n * k,
        bytes_accessed=total_bytes(*op.input_types, *op.output_types),
        helpers=(_gemm_plan.HELPER,),
        prepacked=prepacked,
        parallel=_parallel.gemm(_parallel.GemmCall(rows, n, k, params["batches"], b_packed=bool(prepacked))),
    )


DEFS = (OpDef("MatMul", lower, fusable_epilogue=True, work=WorkRule.MATMUL, tiling=Tiling.MATRIX),)
