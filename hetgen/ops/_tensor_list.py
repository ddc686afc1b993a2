"""Registered elementwise, reduction and data-movement operator modules."""

from hetgen.ops import (
    argmax,
    binary,
    cast,
    clip,
    concat,
    control_flow,
    cumsum,
    depth_to_space,
    einsum,
    expand,
    folded,
    gather,
    nms,
    nonzero,
    onehot,
    pad,
    range,
    reduce,
    reshape,
    resize,
    scatter,
    sequence_ops,
    shape,
    slice,
    split,
    tfidf,
    topk,
    transpose,
    trilu,
    unary,
    where,
)

MODULES: tuple = (
    # elementwise
    unary,
    binary,
    where,
    clip,
    cast,
    # reductions and scans
    reduce,
    argmax,
    cumsum,
    # data movement
    reshape,
    transpose,
    concat,
    split,
    slice,
    expand,
    depth_to_space,
    gather,
    scatter,
    pad,
    resize,
    trilu,
    onehot,
    # shapes and sequences (usually folded by the frontend)
    shape,
    range,
)
MODULES += (folded,)  # compile-time only: Unique, Compress, MelWeightMatrix
MODULES += (nonzero, nms)  # run-time length up to a static bound (hetgen/bounded.py)
MODULES += (einsum, topk)
MODULES += (control_flow,)  # If, Loop: decided at compile time
MODULES += (sequence_ops,)  # BitCast, MaxUnpool, ReverseSequence, TensorScatter
MODULES += (tfidf,)  # TfIdfVectorizer
