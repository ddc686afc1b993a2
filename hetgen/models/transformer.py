"""A small transformer encoder classifier, written the way exporters write one.

Token Gather embedding plus a sliced positional table; per layer: LayerNorm, fused QKV MatMul+Add
split in three, heads made by Reshape (its target computed at run time from Shape → Gather →
Unsqueeze → Concat, as torch exports it) and Transpose, scaled MatMul scores, a padding mask
applied with Where, Softmax, context MatMul, Gemm output projection, residual Adds, and an
Erf-based Gelu feed-forward. The head takes the first token (Slice) into a Gemm classifier.

`layer_norm="fused"` uses LayerNormalization (opset 17+); `"decomposed"` spells it out with
ReduceMean, Sub, Pow, Add, Sqrt, Div, Mul, Add; `"auto"` picks fused where the opset has it.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from hetgen.models._builder import Builder


def transformer_encoder(
    opset: int = 17,
    seed: int = 0,
    layer_norm: str = "auto",
    vocab: int = 64,
    seq: int = 16,
    dim: int = 32,
    heads: int = 4,
    layers: int = 2,
    ffn: int = 64,
    classes: int = 4,
) -> onnx.ModelProto:
    if opset < 9:
        raise ValueError(f"opset {opset}: transformer_encoder needs opset 9 or later (Erf, Where)")
    if layer_norm not in ("auto", "fused", "decomposed"):
        raise ValueError(f"layer_norm={layer_norm!r}; accepted: 'auto', 'fused', 'decomposed'")
    if layer_norm == "fused" and opset < 17:
        raise ValueError(f"opset {opset} has no LayerNormalization (17+); use layer_norm='decomposed'")
    fused = layer_norm == "fused" or (layer_norm == "auto" and opset >= 17)
    b = Builder("transformer_encoder", opset, seed)
    e = _Encoder(b, fused, seq, dim, heads)
    ids = b.input("input_ids", (1, seq), TensorProto.INT64)
    tokens = b.op("Gather", [b.weight((vocab, dim), "tok_emb", fan_in=dim * 8), ids], axis=0)
    table = b.weight((1, 2 * seq, dim), "pos_emb", fan_in=dim * 8)
    h = b.op("Add", [tokens, b.slice(table, [0], [seq], [1])])
    padding = b.op("Equal", [ids, b.const(np.zeros((), np.int64), "pad_id")])
    mask = b.unsqueeze(b.unsqueeze(padding, [1]), [1])  # [1, 1, 1, seq]
    for layer in range(layers):
        h = b.op("Add", [h, e.attention(e.layer_norm(h), mask)])
        h = b.op("Add", [h, e.feed_forward(e.layer_norm(h), ffn, exact_division=layer % 2 == 0)])
    first = b.slice(e.layer_norm(h), [0], [1], [1])  # [1, 1, dim]
    pooled = b.op("Reshape", [first, b.ints([1, dim])])
    b.output(b.gemm(pooled, dim, classes), (1, classes))
    return b.model()


class _Encoder:
    def __init__(self, b: Builder, fused: bool, seq: int, dim: int, heads: int):
        self.b, self.fused, self.seq, self.dim, self.heads = b, fused, seq, dim, heads

    def layer_norm(self, x: str) -> str:
        b = self.b
        gamma = b.const(b.rng.uniform(0.8, 1.2, self.dim).astype(np.float32), "ln_gamma")
        beta = b.const((b.rng.standard_normal(self.dim) * 0.05).astype(np.float32), "ln_beta")
        if self.fused:
            return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
        mean = b.reduce_mean(x, [2])  # positive: negative axes arrived in opset 11
        centred = b.op("Sub", [x, mean])
        variance = b.reduce_mean(b.op("Pow", [centred, b.scalar(2.0, "two")]), [2])
        std = b.op("Sqrt", [b.op("Add", [variance, b.scalar(1e-5, "eps")])])
        return b.op("Add", [b.op("Mul", [b.op("Div", [centred, std]), gamma]), beta])

    def linear(self, x: str, features_in: int, features_out: int) -> str:
        """MatMul with a 2-D weight broadcast over [1, seq, in], then Add of the bias."""
        b = self.b
        w = b.weight((features_in, features_out), "w", fan_in=features_in)
        return b.op("Add", [b.op("MatMul", [x, w]), b.bias(features_out, "b")])

    def split_heads(self, x: str) -> str:
        """[1, seq, dim] → [1, heads, seq, dim/heads], the Reshape target computed from Shape."""
        b = self.b
        shape = b.op("Shape", [x])
        batch = b.unsqueeze(b.op("Gather", [shape, b.const(np.asarray(0, np.int64), "i0")], axis=0), [0])
        length = b.unsqueeze(b.op("Gather", [shape, b.const(np.asarray(1, np.int64), "i1")], axis=0), [0])
        target = b.op("Concat", [batch, length, b.ints([self.heads, self.dim // self.heads])], axis=0)
        return b.op("Transpose", [b.op("Reshape", [x, target])], perm=[0, 2, 1, 3])

    def attention(self, x: str, mask: str) -> str:
        b = self.b
        q, k, v = b.split(self.linear(x, self.dim, 3 * self.dim), [self.dim] * 3, axis=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        k_t = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        scale = b.scalar(math.sqrt(self.dim // self.heads), "scale")
        scores = b.op("Div", [b.op("MatMul", [q, k_t]), scale])  # [1, heads, seq, seq]
        scores = b.op("Where", [mask, b.scalar(-1e4, "masked"), scores])
        context = b.op("MatMul", [b.softmax(scores, 4), v])
        merged = b.op("Reshape", [b.op("Transpose", [context], perm=[0, 2, 1, 3]), b.ints([self.seq, self.dim])])
        w = b.weight((self.dim, self.dim), "proj_w", fan_in=self.dim)
        projected = b.op("Gemm", [merged, w, b.bias(self.dim, "proj_b")])
        return b.op("Reshape", [projected, b.ints([1, self.seq, self.dim])])

    def feed_forward(self, x: str, hidden: int, exact_division: bool) -> str:
        b = self.b
        h = self.linear(x, self.dim, hidden)
        half = b.scalar(0.5, "half")
        if exact_division:  # (x * 0.5) * (1 + erf(x / sqrt(2))), as torch writes it
            scaled = b.op("Div", [h, b.scalar(math.sqrt(2.0), "sqrt2")])
            one_plus = b.op("Add", [b.op("Erf", [scaled]), b.scalar(1.0, "one")])
            gelu = b.op("Mul", [b.op("Mul", [h, half]), one_plus])
        else:  # (x * (1 + erf(x * (1 / sqrt(2))))) * 0.5, as some converters write it
            scaled = b.op("Mul", [h, b.scalar(1.0 / math.sqrt(2.0), "inv_sqrt2")])
            one_plus = b.op("Add", [b.scalar(1.0, "one"), b.op("Erf", [scaled])])
            gelu = b.op("Mul", [b.op("Mul", [h, one_plus]), half])
        return self.linear(gelu, hidden, self.dim)
