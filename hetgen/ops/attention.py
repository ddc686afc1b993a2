"""Fused attention: softmax(scale(Q Kᵀ) + mask) V as one kernel, one block of query rows at a time.

Formed by `hetgen/spec/attention.py` from the separate operators, never written in a model.
Per batch and head, K (as Kᵀ) and V are first packed into the GEMM micro-kernel's B panels, once,
read through strides (transposed or head-split layouts cost nothing). Then each block of query rows
gets its scores from the GEMM (`hg_sgemm_ex`, Q read in place), scaled and masked in the GEMM's
epilogue while each tile is in L1, then the softmax of each row, then the block's context rows from
a second GEMM with V's panels, written straight into the output (through its row stride, so a
merge-heads Transpose after it is free). The full score matrix never exists: scratch holds one
block of `block_rows` x Sk scores, beside one head's K and V panels.

With a worker pool, the heads are shared between threads (one head per task, its GEMMs run by that
thread alone), each in its thread's own scratch from the pool, so the workspace stays one head's.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.ops import _gemm_plan, _parallel
from hetgen.ops._common import float_literal
from hetgen.ops.base import Kernel, OpInstance

# The score block: at most this many bytes (it stays in L2 between the GEMMs and the softmax).
SCORE_BLOCK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Operand:
    """Q [B, H, Sq, D], K [B, H, Sk, D] or V [B, H, Sk, Dv] as a view of one kernel input."""

    index: int  # which of the kernel's inputs holds it
    shape: tuple[int, int, int, int]
    strides: tuple[int, int, int, int]  # elements per step along each axis


@dataclass(frozen=True)
class MaskSpec:
    kind: str  # "add" (scores + mask), "where_fill_true" (cond ? fill : s), "where_keep_true" (cond ? s : fill)
    index: int  # the kernel input holding the mask (float32) or the condition (bool)
    strides: tuple[int, int, int, int]  # over the scores [B, H, Sq, Sk]; 0 where broadcast
    fill: float = 0.0

    @property
    def apply(self) -> str:
        """The C statement that meets a score `v` with its mask entry (the template lays it out)."""
        entry = f"mask[j * {self.strides[3]}u]"
        if self.kind == "add":
            return f"v += {entry};"
        fill = float_literal(self.fill)
        return f"v = {entry} ? {fill} : v;" if self.kind == "where_fill_true" else f"v = {entry} ? v : {fill};"


@dataclass(frozen=True)
class AttentionSpec:
    batch: int
    heads: int
    sq: int
    sk: int
    d: int
    dv: int
    q: Operand
    k: Operand
    v: Operand
    out_strides: tuple[int, int, int, int]  # of the context [B, H, Sq, Dv] in the output tensor
    scale_op: str = ""  # "", "*" or "/": how the scores meet the scale, as the model wrote it
    scale: float = 1.0
    mask: MaskSpec | None = None
    pre_scale: float = 1.0  # a scalar both Q and Kᵀ were multiplied by, combined (Attention's body)


def block_rows(spec: AttentionSpec) -> int:
    """Query rows per block: a multiple of the micro-kernel's panel height that fits the budget."""
    rows = SCORE_BLOCK_BYTES // (4 * spec.sk) // _gemm_plan.PANEL_M * _gemm_plan.PANEL_M
    return max(_gemm_plan.PANEL_M, min(rows, spec.sq))


def block_gemms(spec: AttentionSpec, rows: int) -> _parallel.Parallel:
    """Heads one after another: per block of query rows, scores = Q x K^T and context = P x V, each
    split at run time by the GEMM (K and V are in panels); the last block may be shorter."""
    heads, full, rest = spec.batch * spec.heads, spec.sq // rows, spec.sq % rows
    calls = []
    for block, count in ((rows, heads * full), (rest, heads if rest else 0)):
        calls.append(_parallel.GemmCall(block, spec.sk, spec.d, count, b_packed=True))
        calls.append(_parallel.GemmCall(block, spec.dv, spec.sk, count, b_packed=True))
    return _parallel.gemm(*calls)


def lower(spec: AttentionSpec, op: OpInstance) -> Kernel:
    rows = block_rows(spec)
    scores_bytes = _gemm_plan.align(4 * rows * spec.sk)
    k_panel_bytes = _gemm_plan.align(4 * spec.d * _gemm_plan.align(spec.sk, _gemm_plan.PANEL_N))
    v_panel_bytes = _gemm_plan.align(4 * spec.sk * _gemm_plan.align(spec.dv, _gemm_plan.PANEL_N))
    pack = max(_gemm_plan.pack_bytes(rows, spec.sk, spec.d), _gemm_plan.pack_bytes(rows, spec.dv, spec.sk))
    mask = spec.mask
    heads = spec.batch * spec.heads
    flops = 2 * heads * spec.sq * spec.sk * (spec.d + spec.dv) + 5 * heads * spec.sq * spec.sk
    # one head per task, each in its thread's own scratch (hg_threads.h), when there is enough to share
    parallel_heads = _parallel.split(heads, flops // heads) is not None
    params = {
        "spec": spec,
        "block_rows": rows,
        "scores_bytes": scores_bytes,
        "k_panels_offset": scores_bytes,
        "v_panels_offset": scores_bytes + k_panel_bytes,
        "pack_offset": scores_bytes + k_panel_bytes + v_panel_bytes,
        "panel_n": _gemm_plan.PANEL_N,
        "pack_bytes": pack,
        "mask_type": None if mask is None else ("float" if mask.kind == "add" else "uint8_t"),
        "out_index": len(op.node.inputs),
        "scratch_index": len(op.node.inputs) + 1,
        "batch_heads": spec.batch * spec.heads,
        "parallel_heads": parallel_heads,
    }
    return Kernel(
        template="kernels/attention.c.j2",
        params=params,
        scratch_bytes=scores_bytes + k_panel_bytes + v_panel_bytes + pack,
        flops=flops,
        bytes_accessed=sum(t.nbytes for t in op.input_types if t is not None) + sum(t.nbytes for t in op.output_types),
        helpers=(_gemm_plan.HELPER, _parallel.HELPER) if parallel_heads else (_gemm_plan.HELPER,),
        parallel=_parallel.tasks_of(heads) if parallel_heads else block_gemms(spec, rows),
    )
