"""TfIdfVectorizer on integer tokens: n-gram counts (with skips) over each row, weighted as TF, IDF
or TFIDF, as the ONNX reference (and onnxruntime) count them: unigrams once, longer n-grams once per
skip distance. The pool of n-grams becomes a trie in the kernel's tables (Python builds it), so a
row is scanned with one table walk per start position."""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def _trie(op: OpInstance, low: int, high: int) -> tuple[list[int], list[int], list[int]]:
    """(parent, token, n-gram number + 1 or 0) per trie node; node 0 is the root."""
    pool = [int(v) for v in op.attr("pool_int64s", ()) or ()]
    counts = [int(c) for c in op.attr("ngram_counts")]
    parent, token, gram = [-1], [0], [0]
    number = 0
    for size_index, begin in enumerate(counts):
        size = size_index + 1
        end = counts[size_index + 1] if size_index + 1 < len(counts) else len(pool)
        for start in range(begin, end, size):
            number += 1
            if not low <= size <= high:
                continue
            node = 0
            for value in pool[start : start + size]:
                child = next((k for k in range(len(parent)) if parent[k] == node and token[k] == value), None)
                if child is None:
                    parent.append(node)
                    token.append(value)
                    gram.append(0)
                    child = len(parent) - 1
                node = child
            gram[node] = number
    return parent, token, gram


def lower(op: OpInstance) -> Kernel:
    x = op.input_types[0]
    if x.dtype not in (DType.INT32, DType.INT64) or op.attr("pool_strings", None):
        raise Unsupported(f"TfIdfVectorizer on {x.dtype.label}; accepted: int32, int64 tokens (pool_int64s)")
    low, high = int(op.attr("min_gram_length")), int(op.attr("max_gram_length"))
    parent, token, gram = _trie(op, low, high)
    indexes = [int(i) for i in op.attr("ngram_indexes")]
    weights = [float(w) for w in op.attr("weights", ()) or ()]
    mode = op.attr("mode")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rows, columns = (1, x.shape[0]) if x.rank <= 1 else x.shape
    width = max(indexes) + 1
    return Kernel(
        template="kernels/tfidf.c.j2",
        params={
            "ctype": x.dtype.c_type,
            "rows": rows,
            "columns": columns if x.rank else 1,
            "width": width,
            "nodes": len(parent),
            "parent": parent,
            "token": token,
            "gram": gram,
            "indexes": indexes,
            "weights": weights or [1.0] * width,
            "value": {
                "TF": "(float)counts[i]",
                "IDF": f"counts[i] > 0 ? weights[i % {width}u] : 0.0f",
            }.get(mode, f"weights[i % {width}u] * (float)counts[i]"),
            "low": low,
            "high": high,
            "skip_limit": int(op.attr("max_skip_count", 0)) + 1,
            "cells": rows * width,
            "out_arg": 1,
        },
        scratch_bytes=8 * rows * width,
        bytes_accessed=x.nbytes + op.output_types[0].nbytes,
    )


DEFS = (OpDef("TfIdfVectorizer", lower),)
