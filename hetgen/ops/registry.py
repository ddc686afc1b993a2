"""The one list of operators hetgen supports.

Each lowered operator has one module (or one per small family of operators that share a template),
each exposing `DEFS: tuple[OpDef, ...]`, listed once in `MODULES` below; an operator whose meaning
changed with an opset has one entry per meaning (`OpDef.since`), and `op_def` picks the one for a
node's opset. Operators compiled through their ONNX function body are `Expanded` entries in
`EXPANDED`. Adding an operator is its module, one line here and its template (docs/operators.md).
"""

from __future__ import annotations

import dataclasses

from hetgen.ops import (
    argmax,
    batchnorm,
    binary,
    cast,
    clip,
    col2im,
    concat,
    control_flow,
    conv,
    conv_transpose,
    cumsum,
    deform_conv,
    depth_to_space,
    det,
    dft,
    einsum,
    expand,
    folded,
    gather,
    gemm,
    grid_sample,
    instancenorm,
    layernorm,
    lrn,
    matmul,
    nms,
    nonzero,
    onehot,
    pad,
    pool,
    qelementwise,
    qlinear,
    quantize,
    range,
    recurrent,
    reduce,
    reshape,
    resize,
    roi_align,
    scatter,
    sequence_ops,
    shape,
    slice,
    softmax,
    split,
    tfidf,
    topk,
    transpose,
    trilu,
    unary,
    where,
)
from hetgen.ops._float16 import with_float16_boundary
from hetgen.ops.base import Expanded, OpDef

# fmt: off
# -- compute operators: convolution, GEMM, pooling, normalisation --
COMPUTE = (
    batchnorm, conv, conv_transpose, gemm, instancenorm, layernorm, lrn, matmul, pool, softmax,
    recurrent,  # RNN, GRU, LSTM
    grid_sample, det, col2im, roi_align,
    dft,  # DFT, STFT
    deform_conv,
)
# -- elementwise, reduction and data-movement operators --
TENSOR = (
    # elementwise
    unary, binary, where, clip, cast,
    # reductions and scans
    reduce, argmax, cumsum,
    # data movement
    reshape, transpose, concat, split, slice, expand, depth_to_space, gather, scatter, pad, resize, trilu, onehot,
    # shapes and sequences (usually folded by the frontend)
    shape, range,
    folded,  # compile-time only: Unique, Compress, MelWeightMatrix
    nonzero, nms,  # run-time length up to a static bound (hetgen/bounded.py)
    einsum, topk,
    control_flow,  # If, Loop: decided at compile time
    sequence_ops,  # BitCast, MaxUnpool, ReverseSequence, TensorScatter
    tfidf,  # TfIdfVectorizer
)
# -- quantized arithmetic (int8/uint8): `float16_boundary=False` on each --
QUANTIZED = (quantize, qlinear, qelementwise)

MODULES = (*COMPUTE, *TENSOR, *QUANTIZED)

# -- compiled through their ONNX function body (hetgen/frontend/functions.py replaces each node of
# these by its body before anything else sees the graph, so their kernels are the registered
# primitives' kernels; listing an operator here claims it) --
EXPANDED: tuple[Expanded, ...] = (
    Expanded("Attention"),
    Expanded("BlackmanWindow", const_inputs=(0,)),
    Expanded("CenterCropPad", const_inputs=(1,)),
    Expanded("GroupNormalization"),
    Expanded("HammingWindow", const_inputs=(0,)),
    Expanded("HannWindow", const_inputs=(0,)),
    Expanded("MeanVarianceNormalization"),
    Expanded("NegativeLogLikelihoodLoss"),
    Expanded("RMSNormalization"),
    Expanded("RotaryEmbedding"),
    Expanded("SoftmaxCrossEntropyLoss"),
    Expanded("AffineGrid", const_inputs=(1,)),
    Expanded("SwiGLU"),
    Expanded("LinearAttention"),  # its body is a Scan, unrolled
    # no ONNX body: hetgen writes one (hetgen/frontend/functions.py, HETGEN_BODIES)
    Expanded("LpNormalization"),
    Expanded("LpPool"),
    Expanded("CausalConvWithState"),
)
# fmt: on


def _versions(definitions) -> dict[str, tuple[OpDef, ...]]:
    """Each operator's entries, oldest `since` first; entries of one operator differ only in
    `since` and `lower` (an opset changes the lowering, not the facts)."""
    versions: dict[str, list[OpDef]] = {}
    for definition in definitions:
        versions.setdefault(definition.op, []).append(with_float16_boundary(definition))
    for op, entries in versions.items():
        entries.sort(key=lambda d: d.since)
        sinces = [d.since for d in entries]
        assert len(set(sinces)) == len(sinces), f"{op}: two entries since opset {sinces}"
        facts = {dataclasses.replace(d, lower=None, since=1) for d in entries}
        assert len(facts) == 1, f"{op}: versioned entries differ in their traits"
    return {op: tuple(entries) for op, entries in versions.items()}


_VERSIONS = _versions(d for module in MODULES for d in module.DEFS)
# Each operator's newest entry: its traits, and the lowering of a node whose opset is not known.
OPS: dict[str, OpDef] = {op: entries[-1] for op, entries in _VERSIONS.items()}
# The older entries of operators whose meaning changed with an opset (Softmax 1/13, DFT 17/20).
EARLIER: dict[str, tuple[OpDef, ...]] = {op: entries[:-1] for op, entries in _VERSIONS.items() if len(entries) > 1}
EXPANDED_OPS: frozenset[str] = frozenset(e.op for e in EXPANDED)
_EXPANDED_CONST_INPUTS = {e.op: e.const_inputs for e in EXPANDED}


def supported_ops() -> frozenset[str]:
    return frozenset(OPS) | EXPANDED_OPS


def op_def(op: str, opset: int | None = None) -> OpDef | None:
    """The entry of `op` for a node at `opset` (the version of the operator's domain it follows,
    `Node.opset`): the one with the largest `since` not above it; an opset older than every entry
    gets the oldest. Without an opset, the newest: the traits, which every entry shares."""
    newest = OPS.get(op)
    if newest is None or opset is None or opset >= newest.since:
        return newest
    older = EARLIER.get(op, ())
    return next((d for d in reversed(older) if d.since <= opset), older[0] if older else newest)


def const_inputs(op: str) -> tuple[int, ...]:
    """The inputs of `op` that must be known at compile time (registered or expanded operators)."""
    definition = OPS.get(op)
    return definition.const_inputs if definition else _EXPANDED_CONST_INPUTS.get(op, ())
