"""Gemm: Y = alpha * A' B' + beta * C, with A' = A or A^T, B' = B or B^T, C broadcast to Y.

Transposes cost nothing: `hg_sgemm_ex` reads its operands through strides, and a constant B (the
weights, transposed or not) is packed into the micro-kernel's panels at generate time
(`Prepacked`). alpha, beta * C and fused activations are applied in the GEMM epilogue, on each
finished tile of Y while it is in L1.
"""

from __future__ import annotations

from hetgen.ops import _gemm_plan, _in_place, _parallel
from hetgen.ops._common import input_arg_count, require_float32, total_bytes
from hetgen.ops.base import Kernel, OpDef, OpInstance, Prepacked, Tiling, Unsupported, WorkRule


def bias_strides(op: OpInstance, m: int, n: int) -> tuple[int, int] | None:
    """(row, column) element strides reading C broadcast to [m x n]; None without C."""
    if not op.has_input(2):
        return None
    shape = op.input_types[2].shape
    if len(shape) > 2:
        raise Unsupported(f"Gemm C of shape {shape}; accepted: rank 0 to 2, broadcastable to [{m}, {n}]")
    rows, cols = ((1, 1) + tuple(shape))[-2:]
    if rows not in (1, m) or cols not in (1, n):
        raise Unsupported(f"Gemm C of shape {shape} does not broadcast to [{m}, {n}]")
    return (cols if rows == m and m > 1 else 0), (1 if cols == n and n > 1 else 0)


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    a_type, b_type = op.input_types[0], op.input_types[1]
    if a_type.rank != 2 or b_type.rank != 2:
        raise Unsupported(f"Gemm on {a_type} and {b_type}; accepted: two matrices")
    trans_a, trans_b = int(op.attr("transA", 0)), int(op.attr("transB", 0))
    m, k = a_type.shape[::-1] if trans_a else a_type.shape
    k_b, n = b_type.shape[::-1] if trans_b else b_type.shape
    if k != k_b:
        raise Unsupported(f"Gemm inner dimensions differ: {k} and {k_b}")
    alpha, beta = float(op.attr("alpha", 1.0)), float(op.attr("beta", 1.0))
    strides = bias_strides(op, m, n)
    has_bias = strides is not None and beta != 0.0
    params = {
        "m": m,
        "n": n,
        "k": k,
        # A[i][p] = a[i * a_rs + p * a_cs]; B[p][j] = b[p * b_rs + j * b_cs]
        "a_rs": 1 if trans_a else k,
        "a_cs": m if trans_a else 1,
        "b_rs": 1 if trans_b else n,
        "b_cs": k if trans_b else 1,
        "alpha": alpha,
        "beta": beta,
        "has_bias": has_bias,
        "bias_rs": strides[0] if has_bias else 0,
        "bias_cs": strides[1] if has_bias else 0,
        "bias_index": 2,
        "pack_bytes": _gemm_plan.pack_bytes(m, n, k, op.gemm_blocks),
        "b_packed": False,
        "out_index": input_arg_count(op),
        "scratch_index": input_arg_count(op) + 1,
        "epilogue": op.epilogue,
    }
    prepacked = ()
    if op.constant(1) is not None:
        packed = _gemm_plan.pack_bytes(m, n, k, op.gemm_blocks, b_packed=True)
        layout = lambda b: _gemm_plan.b_panels(b.T if trans_b else b)  # noqa: E731
        prepacked = (Prepacked(1, layout, {"b_packed": True, "pack_bytes": packed}, packed),)
        bias = (2, params["bias_rs"], params["bias_cs"]) if has_bias else None
        in_place = _in_place.product_offer(
            m,
            n,
            k,
            (params["a_rs"], params["a_cs"]),
            (params["b_rs"], params["b_cs"]),
            alpha=alpha,
            beta=beta,
            bias=bias,
        )
        prepacked = (in_place, *prepacked)  # bare metal: B read in flash
    return Kernel(
        template="kernels/gemm.c.j2",
        params=params,
        scratch_bytes=params["pack_bytes"],
        flops=2 * m * n * k,
        bytes_accessed=total_bytes(*op.input_types, *op.output_types),
        helpers=(_gemm_plan.HELPER,),
        prepacked=prepacked,
        parallel=_parallel.gemm(_parallel.GemmCall(m, n, k, b_packed=bool(prepacked))),
    )


DEFS = (OpDef("Gemm", lower, fusable_epilogue=True, work=WorkRule.GEMM, tiling=Tiling.MATRIX),)
