"""QDQ recognition: DequantizeLinear → Conv/MatMul/Gemm (→ Relu/Clip) → QuantizeLinear becomes one
integer kernel, the way onnxruntime's QDQ transformer lowers such graphs.

onnxruntime's `quantize_static` (QDQ format) wraps every quantized operator in DequantizeLinear
nodes on its inputs and a QuantizeLinear on its output. Run as written, that is float arithmetic
with fake quantisation. Here each such island becomes:

- Conv → QLinearConv (per-tensor or per-output-channel weights, int32 bias);
- MatMul → QLinearMatMul (per-tensor or per-column B);
- Gemm (rank-2, transA=0, alpha=beta=1, constant weights) → Reshape → 1x1 QLinearConv → Reshape,
  so its bias is fused too;
- Add, Mul, Concat, the pools, Sigmoid, LeakyRelu and the operators that only move elements:
  hetgen/frontend/qdq_islands.py;
- a Relu or Clip between the operator and its QuantizeLinear → a Clip on the quantized output with
  the bounds quantized exactly as QuantizeLinear would (quantisation is monotonic, so
  Q(clip(y, lo, hi)) = clip(Q(y), Q(lo), Q(hi))); hetgen fuses it into the integer kernel.

The bias is requantized to int32 with scale x_scale * w_scale (exact for the int32 biases the
quantizer writes). What no pattern matches keeps its DequantizeLinear/QuantizeLinear nodes and float
arithmetic in between ("the float ops in between stay float").

Constant weights: `keeps_quantized` tells `resolve` not to fold a DequantizeLinear of an integer
constant, so the integer weights are still visible here; `fold_dequantize` folds the ones no pattern
used, with onnxruntime's arithmetic ((float)(q - zero_point) * scale in float32), and then whatever
became constant because of that.
"""

from __future__ import annotations

import heapq

import numpy as np
import onnx

from hetgen.frontend import qdq_islands
from hetgen.frontend.qdq_match import (
    INT_OPSET,
    QUANTIZED,
    Reader,
    dequantize_value,
    dequantized,
    finish,
    int_constant,
    keeps_quantized,
    quantized_operand,
    quantized_output,
    scale_input,
    zero_point_input,
)
from hetgen.frontend.work import ValueType, Work, WorkNode

__all__ = ["fold_dequantize", "keeps_quantized", "rewrite_qdq"]

# -- the rewrite --------------------------------------------------------------------------------


def rewrite_qdq(work: Work) -> None:
    """Rewrite the first island that matches, then look again from the start (a rewrite can complete
    an island before it), until none does.

    Linear, not quadratic: whether a node matches depends only on the tensors within two steps of
    it (its inputs' producers, its outputs' readers and theirs), so after a rewrite only the nodes
    within three steps of what it touched can change their answer. Those go back on a heap ordered
    by position; every other node already examined still fails, so popping the first position
    finds exactly the island a full rescan from the start would. A float model (no
    QuantizeLinear, so no island can end) costs one pass over its ops."""
    if not any(node.op == "QuantizeLinear" for node in work.nodes):
        return
    reader = Reader(work)
    # A node's place in the list: replacements sort right after the last node they replace.
    order = {id(node): (index,) for index, node in enumerate(work.nodes)}
    alive = {id(node): node for node in work.nodes}
    replaced: list[WorkNode] = []  # kept referenced, so that no id() is reused while `order` holds it
    pending = [(key, ident) for ident, key in order.items()]
    heapq.heapify(pending)
    while pending:
        key, ident = heapq.heappop(pending)
        node = alive.get(ident)
        if node is None or order[ident] != key:
            continue
        match = MATCHERS.get(node.op) if node.is_default_domain else None
        found = match(work, node, reader) if match else None
        if found is None:
            continue
        matched, replacement = found
        last = max(order[id(n)] for n in matched)
        for n in matched:
            reader.remove(n)
            del alive[id(n)]
        replaced.extend(matched)
        for position, n in enumerate(replacement):
            order[id(n)] = (*last, position)
            alive[id(n)] = n
            reader.add(n)
        nearby = _within_three_steps(reader, [*matched, *replacement])
        for n in nearby:
            if id(n) in alive:
                heapq.heappush(pending, (order[id(n)], id(n)))
    work.nodes = sorted(alive.values(), key=lambda n: order[id(n)])


def _within_three_steps(reader: Reader, touched: list[WorkNode]) -> list[WorkNode]:
    """Nodes sharing a tensor with `touched` (one step), and those within two more steps of them.
    `touched` includes removed nodes, whose tensors' other readers and producers are found by
    name. Constants link nothing (see `Reader.neighbours`)."""
    constants = reader.work.constants
    names = {name for n in touched for name in (*n.inputs, *n.outputs) if name and name not in constants}
    seen = {id(n): n for name in names for n in (*reader.users.get(name, ()), reader.producers.get(name)) if n}
    frontier = list(seen.values())
    for _ in range(2):
        step = []
        for n in frontier:
            for neighbour in reader.neighbours(n):
                if id(neighbour) not in seen:
                    seen[id(neighbour)] = neighbour
                    step.append(neighbour)
        frontier = step
    return list(seen.values())


def _int_bias(work: Work, reader: Reader, name: str, x_scale: np.ndarray, w_scale: np.ndarray, n: int):
    """The bias as int32 with scale x_scale * w_scale (per output channel), or None if unknown."""
    value = work.constants.get(name)
    if value is None:
        producer = reader.producers.get(name)
        dq = dequantized(producer, work)
        if dq is None or dq.q not in work.constants:
            return None
        value = dequantize_value(work.constants[dq.q], dq)
    if value.dtype != np.float32 or value.size != n:
        return None
    scale = (np.float32(x_scale.reshape(-1)[0]) * w_scale.astype(np.float32)).astype(np.float32)
    if np.any(scale == 0):
        return None
    quantized = np.rint(value.reshape(-1).astype(np.float32) / scale)
    return np.clip(quantized, -(2**31), 2**31 - 1).astype(np.int32)


def _match_conv(work: Work, conv: WorkNode, reader: Reader):
    x = reader.dequantized_input(conv.inputs[0])
    w = reader.dequantized_input(conv.inputs[1])
    if x is None or w is None or not x.per_tensor or x.dtype not in QUANTIZED or w.dtype not in QUANTIZED:
        return None
    if w.q not in work.constants or (not w.per_tensor and w.axis != 0):
        return None
    out = quantized_output(work, reader, conv.outputs[0])
    if out is None:
        return None
    out_channels = work.constants[w.q].shape[0]
    bias = None
    if len(conv.inputs) > 2 and conv.inputs[2]:
        bias = _int_bias(work, reader, conv.inputs[2], x.scale, w.scale, out_channels)
        if bias is None:
            return None
    inputs = _qlinear_inputs(work, reader, conv.inputs[0], x, w, out)
    if bias is not None:
        inputs.append(work.add_constant(f"{conv.outputs[0]}_bias_int32", bias))
    attrs = {k: v for k, v in conv.attrs.items() if not k.startswith("_")}

    def produce(name: str) -> list[WorkNode]:
        return [conv.derive("QLinearConv", inputs, [name], attrs, max(work.opset, 10))]

    return [conv, *out.nodes], finish(work, conv, out, produce)


def _qlinear_inputs(work: Work, reader: Reader, dequantized_x: str, x, w, out) -> list[str]:
    """QLinearConv's and QLinearMatMul's first eight inputs: x, its scale (the DequantizeLinear's
    own) and zero point, w with its scale and zero point, then the output's scale and zero point."""
    return [
        *quantized_operand(work, reader, dequantized_x, x),
        w.q,
        scale_input(work, w, w.q),
        zero_point_input(work, w, w.q),
        out.scale,
        out.zero_point,
    ]


def _match_matmul(work: Work, matmul: WorkNode, reader: Reader):
    a = reader.dequantized_input(matmul.inputs[0])
    b = reader.dequantized_input(matmul.inputs[1])
    if a is None or b is None or not a.per_tensor or a.dtype not in QUANTIZED or b.dtype not in QUANTIZED:
        return None
    b_rank = len(work.types[b.q].shape)
    if not b.per_tensor and (b_rank < 2 or b.axis != b_rank - 1):
        return None
    out = quantized_output(work, reader, matmul.outputs[0])
    if out is None:
        return None
    inputs = _qlinear_inputs(work, reader, matmul.inputs[0], a, b, out)

    def produce(name: str) -> list[WorkNode]:
        return [matmul.derive("QLinearMatMul", inputs, [name], {}, max(work.opset, 10))]

    return [matmul, *out.nodes], finish(work, matmul, out, produce)


def _match_gemm(work: Work, gemm: WorkNode, reader: Reader):
    if gemm.attrs.get("transA", 0) or gemm.attrs.get("alpha", 1.0) != 1.0 or gemm.attrs.get("beta", 1.0) != 1.0:
        return None
    x = reader.dequantized_input(gemm.inputs[0])
    w = reader.dequantized_input(gemm.inputs[1])
    if x is None or w is None or not x.per_tensor or x.dtype not in QUANTIZED or w.dtype not in QUANTIZED:
        return None
    x_shape = work.types[x.q].shape
    if len(x_shape) != 2 or w.q not in work.constants or work.constants[w.q].ndim != 2:
        return None
    trans_b = bool(gemm.attrs.get("transB", 0))
    weights = work.constants[w.q] if trans_b else work.constants[w.q].T
    if not w.per_tensor and w.axis != (0 if trans_b else 1):
        return None
    rows, n = x_shape[0], weights.shape[0]
    out = quantized_output(work, reader, gemm.outputs[0])
    if out is None:
        return None
    bias = None
    if len(gemm.inputs) > 2 and gemm.inputs[2]:
        bias = _int_bias(work, reader, gemm.inputs[2], x.scale, w.scale, n)
        if bias is None:
            return None
    x_producer = reader.producers[gemm.inputs[0]]
    x_code = work.types[x.q].elem
    image = work.fresh_name(f"{x.q}_as_image")
    work.types[image] = ValueType(x_code, (rows, x_shape[1], 1, 1))
    inputs = [
        image,
        x_producer.inputs[1],
        zero_point_input(work, x, x.q),
        int_constant(work, f"{w.q}_1x1", np.ascontiguousarray(weights).reshape(n, -1, 1, 1), w.dtype),
        scale_input(work, w, w.q),
        zero_point_input(work, w, w.q),
        out.scale,
        out.zero_point,
    ]
    if bias is not None:
        inputs.append(work.add_constant(f"{gemm.outputs[0]}_bias_int32", bias))
    opset = max(work.opset, INT_OPSET)

    def produce(name: str) -> list[WorkNode]:
        conv_out = work.fresh_name(f"{name}_image")
        work.types[conv_out] = ValueType(onnx.helper.np_dtype_to_tensor_dtype(out.dtype), (rows, n, 1, 1))
        to_image = int_constant(work, f"{image}_shape", (rows, x_shape[1], 1, 1), np.int64)
        to_rows = int_constant(work, f"{name}_shape", (rows, n), np.int64)
        return [
            gemm.derive("Reshape", [x.q, to_image], [image], {}, opset),
            gemm.derive("QLinearConv", inputs, [conv_out], {}, opset),
            gemm.derive("Reshape", [conv_out, to_rows], [name], {}, opset),
        ]

    return [gemm, *out.nodes], finish(work, gemm, out, produce)


MATCHERS = {"Conv": _match_conv, "MatMul": _match_matmul, "Gemm": _match_gemm, **qdq_islands.MATCHERS}


# -- what the rewrite left --------------------------------------------------------------------


def fold_dequantize(work: Work, fold) -> None:
    """Fold the DequantizeLinear nodes of constants that no pattern used, then every node that became
    constant because of them (`fold` is resolve's folding of one node)."""
    kept = []
    for node in work.nodes:
        if keeps_quantized(node, work):
            dq = dequantized(node, work)
            if dq is not None:
                value = dequantize_value(work.constants[dq.q], dq)
                work.constants[node.outputs[0]] = value
                work.types[node.outputs[0]] = ValueType.of(value)
                continue
        if all(not name or name in work.constants for name in node.inputs) and fold(node, work):
            continue
        kept.append(node)
    work.nodes = kept
