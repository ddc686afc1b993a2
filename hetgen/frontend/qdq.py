"""QDQ recognition: DequantizeLinear → Conv/MatMul/Gemm (→ Relu/Clip) → QuantizeLinear becomes one
integer kernel, the way onnxruntime's QDQ transformer lowers such graphs.

onnxruntime's `quantize_static` (QDQ format) wraps every quantized operator in DequantizeLinear
nodes on its inputs and a QuantizeLinear on its output. Run as written, that is float arithmetic
with fake quantisation. Here each such island becomes:

- Conv → QLinearConv (per-tensor or per-output-channel weights, int32 bias);
- MatMul → QLinearMatMul (per-tensor or per-column B);
- Gemm (rank-2, transA=0, alpha=beta=1, constant weights) → Reshape → 1x1 QLinearConv → Reshape,
  so its bias is fused too;
- AveragePool → QLinearAveragePool (exact integer window sums), Sigmoid and LeakyRelu →
  QLinearSigmoid and QLinearLeakyRelu (a table over the 256 input levels),
- Add and Mul → QLinearAdd and QLinearMul, GlobalAveragePool → QLinearGlobalAveragePool, Concat of
  inputs at different scales → QLinearConcat
  (onnxruntime's com.microsoft operators, channels first; hetgen/ops/qelementwise.py);
- MaxPool, Reshape, Flatten, Transpose, Concat and other operators that only move or select
  elements run on the quantized tensor itself when their inputs and output share one scale and
  zero point (exact: Q(DQ(q)) = q and quantisation preserves order);
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

from dataclasses import dataclass

import numpy as np
import onnx

from hetgen.frontend.work import ValueType, Work, WorkNode

QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))
Q_RANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}
INT_OPSET = 13  # Clip on int8/uint8 and Reshape with a shape input: opset 13 forms


def keeps_quantized(node: WorkNode, work: Work) -> bool:
    """A DequantizeLinear of integer constants: left unfolded until the QDQ rewrite has seen it."""
    if node.op != "DequantizeLinear" or not node.is_default_domain:
        return False
    value = work.constants.get(node.inputs[0])
    return value is not None and value.dtype in (*QUANTIZED, np.dtype(np.int32))


@dataclass(frozen=True)
class Dequantized:
    """A DequantizeLinear's operands: integer tensor, constant scale and zero point, axis."""

    q: str
    scale: np.ndarray  # float32, as stored (scalar or 1-D)
    zero_point: np.ndarray  # same shape as scale, the integer tensor's dtype
    axis: int  # normalised; meaningful only when scale has more than one element
    dtype: np.dtype

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1


def dequantized(node: WorkNode | None, work: Work) -> Dequantized | None:
    """The operands of `node` if it is a per-tensor or per-axis DequantizeLinear with constant
    scale and zero point of an int8/uint8/int32 tensor, else None."""
    if node is None or node.op != "DequantizeLinear" or not node.is_default_domain:
        return None
    if node.attrs.get("block_size", 0):
        return None
    q = node.inputs[0]
    scale = work.constants.get(node.inputs[1])
    known = work.types.get(q)
    if scale is None or known is None or scale.dtype != np.float32 or scale.ndim > 1:
        return None
    dtype = known.numpy
    if dtype not in (*QUANTIZED, np.dtype(np.int32)):
        return None
    zp_name = node.inputs[2] if len(node.inputs) > 2 else ""
    zero_point = work.constants.get(zp_name) if zp_name else np.zeros(scale.shape, dtype)
    if zero_point is None or zero_point.shape != scale.shape and zero_point.size != scale.size:
        return None
    axis = int(node.attrs.get("axis", 1))
    rank = len(known.shape)
    if scale.size > 1:
        if not -rank <= axis < rank or known.shape[axis % rank] != scale.size:
            return None
        axis %= rank
    return Dequantized(q, scale.reshape(-1), zero_point.reshape(-1).astype(dtype), axis, dtype)


def dequantize_value(value: np.ndarray, dq: Dequantized) -> np.ndarray:
    """onnxruntime's DequantizeLinear: (float)(q - zero_point) * scale, in float32."""
    shape = [1] * value.ndim
    if dq.scale.size > 1:
        shape[dq.axis] = dq.scale.size
    centred = value.astype(np.int32) - dq.zero_point.astype(np.int32).reshape(shape or ())
    return (centred.astype(np.float32) * dq.scale.reshape(shape or ())).astype(np.float32)


def quantize_bound(value: float, scale: np.float32, zero_point: int, dtype: np.dtype) -> int:
    """QuantizeLinear of one float, as hg_quant.h computes it (divide, clamp, round half to even)."""
    qmin, qmax = Q_RANGE[dtype]
    scaled = np.float32(value) / np.float32(scale)
    scaled = np.clip(scaled, np.float32(qmin - zero_point), np.float32(qmax - zero_point))
    return int(np.rint(scaled)) + zero_point


# -- the rewrite --------------------------------------------------------------------------------


def rewrite_qdq(work: Work) -> None:
    index = 0
    while index < len(work.nodes):
        node = work.nodes[index]
        match = MATCHERS.get(node.op) if node.is_default_domain else None
        found = match(work, node, _Reader(work)) if match else None
        if found is None:
            index += 1
            continue
        matched, replacement = found
        gone = {id(n) for n in matched}
        last = max(i for i, n in enumerate(work.nodes) if id(n) in gone)
        rebuilt = []
        for i, n in enumerate(work.nodes):
            if i == last:
                rebuilt.extend(replacement)
            elif id(n) not in gone:
                rebuilt.append(n)
        work.nodes = rebuilt
        index = 0


class _Reader:
    def __init__(self, work: Work):
        self.work = work
        self.users = {name: list({id(n): n for n in users}.values()) for name, users in work.consumers().items()}
        self.producers = work.producers()

    def only_user(self, name: str, *ops: str) -> WorkNode | None:
        users = self.users.get(name, [])
        if len(users) != 1 or name in self.work.outputs or users[0].op not in ops:
            return None
        return users[0] if users[0].is_default_domain else None

    def dequantized_input(self, name: str) -> Dequantized | None:
        return dequantized(self.producers.get(name), self.work)


@dataclass(frozen=True)
class _Output:
    """The QuantizeLinear that ends a pattern and the activation before it."""

    nodes: tuple[WorkNode, ...]  # [activation,] QuantizeLinear
    name: str  # the quantized output tensor
    scale: str
    zero_point: str
    scale_value: np.float32
    zp_value: int
    dtype: np.dtype
    clip: tuple[float | None, float | None] | None  # float bounds of a Relu/Clip, None without one


def _quantized_output(work: Work, reader: _Reader, produced: str) -> _Output | None:
    activation = reader.only_user(produced, "Relu", "Clip", "QuantizeLinear")
    clip = None
    if activation is not None and activation.op != "QuantizeLinear":
        clip = _float_bounds(work, activation)
        if clip is None or activation.inputs[0] != produced:
            return None
        quantize = reader.only_user(activation.outputs[0], "QuantizeLinear")
        nodes = (activation, quantize)
    else:
        quantize, nodes = activation, (activation,)
    if quantize is None or quantize.inputs[0] != (nodes[0].outputs[0] if clip else produced):
        return None
    if quantize.attrs.get("block_size", 0) or len(quantize.inputs) < 3 or not quantize.inputs[2]:
        return None
    scale, zero_point = work.constants.get(quantize.inputs[1]), work.constants.get(quantize.inputs[2])
    if scale is None or zero_point is None or scale.size != 1 or zero_point.size != 1:
        return None
    if scale.dtype != np.float32 or zero_point.dtype not in QUANTIZED:
        return None
    return _Output(
        nodes=nodes,
        name=quantize.outputs[0],
        scale=quantize.inputs[1],
        zero_point=quantize.inputs[2],
        scale_value=np.float32(scale.reshape(-1)[0]),
        zp_value=int(zero_point.reshape(-1)[0]),
        dtype=zero_point.dtype,
        clip=clip,
    )


def _float_bounds(work: Work, node: WorkNode) -> tuple[float | None, float | None] | None:
    if node.op == "Relu":
        return (0.0, None)
    bounds = []
    for index in (1, 2):
        name = node.inputs[index] if len(node.inputs) > index else ""
        if not name:
            bounds.append(None)
            continue
        value = work.constants.get(name)
        if value is None or value.size != 1:
            return None
        bounds.append(float(value.reshape(-1)[0]))
    return bounds[0], bounds[1]


def _int_constant(work: Work, base: str, value, dtype) -> str:
    return work.add_constant(base, np.asarray(value, dtype=dtype))


def _zero_point_input(work: Work, dq: Dequantized, base: str) -> str:
    return _int_constant(work, f"{base}_zero_point", dq.zero_point.reshape(() if dq.per_tensor else (-1,)), dq.dtype)


def _scale_input(work: Work, dq: Dequantized, base: str) -> str:
    return work.add_constant(f"{base}_scale", dq.scale.reshape(() if dq.per_tensor else (-1,)).astype(np.float32))


def _finish(work: Work, anchor: WorkNode, out: _Output, produce) -> list[WorkNode]:
    """`produce(name)` builds the nodes that write the quantized result to `name`; a clamp follows
    when the pattern had a Relu/Clip."""
    if out.clip is None:
        return produce(out.name)
    raw = work.fresh_name(f"{out.name}_unclamped")
    work.types[raw] = work.types[out.name]
    nodes = produce(raw)
    lo, hi = out.clip
    inputs = [raw]
    inputs.append(
        _int_constant(work, f"{out.name}_min", quantize_bound(lo, out.scale_value, out.zp_value, out.dtype), out.dtype)
        if lo is not None
        else ""
    )
    if hi is not None:
        inputs.append(
            _int_constant(
                work, f"{out.name}_max", quantize_bound(hi, out.scale_value, out.zp_value, out.dtype), out.dtype
            )
        )
    while inputs and not inputs[-1]:
        inputs.pop()
    nodes.append(anchor.derive("Clip", inputs, [out.name], {}, max(work.opset, INT_OPSET)))
    return nodes


def _int_bias(work: Work, reader: _Reader, name: str, x_scale: np.ndarray, w_scale: np.ndarray, n: int):
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


def _match_conv(work: Work, conv: WorkNode, reader: _Reader):
    x = reader.dequantized_input(conv.inputs[0])
    w = reader.dequantized_input(conv.inputs[1])
    if x is None or w is None or not x.per_tensor or x.dtype not in QUANTIZED or w.dtype not in QUANTIZED:
        return None
    if w.q not in work.constants or (not w.per_tensor and w.axis != 0):
        return None
    out = _quantized_output(work, reader, conv.outputs[0])
    if out is None:
        return None
    out_channels = work.constants[w.q].shape[0]
    bias = None
    if len(conv.inputs) > 2 and conv.inputs[2]:
        bias = _int_bias(work, reader, conv.inputs[2], x.scale, w.scale, out_channels)
        if bias is None:
            return None
    x_producer = reader.producers[conv.inputs[0]]
    inputs = [
        x.q,
        x_producer.inputs[1],
        _zero_point_input(work, x, x.q),
        w.q,
        _scale_input(work, w, w.q),
        _zero_point_input(work, w, w.q),
        out.scale,
        out.zero_point,
    ]
    if bias is not None:
        inputs.append(work.add_constant(f"{conv.outputs[0]}_bias_int32", bias))
    attrs = {k: v for k, v in conv.attrs.items() if not k.startswith("_")}

    def produce(name: str) -> list[WorkNode]:
        return [conv.derive("QLinearConv", inputs, [name], attrs, max(work.opset, 10))]

    return [conv, *out.nodes], _finish(work, conv, out, produce)


def _match_matmul(work: Work, matmul: WorkNode, reader: _Reader):
    a = reader.dequantized_input(matmul.inputs[0])
    b = reader.dequantized_input(matmul.inputs[1])
    if a is None or b is None or not a.per_tensor or a.dtype not in QUANTIZED or b.dtype not in QUANTIZED:
        return None
    b_rank = len(work.types[b.q].shape)
    if not b.per_tensor and (b_rank < 2 or b.axis != b_rank - 1):
        return None
    out = _quantized_output(work, reader, matmul.outputs[0])
    if out is None:
        return None
    a_producer = reader.producers[matmul.inputs[0]]
    inputs = [
        a.q,
        a_producer.inputs[1],
        _zero_point_input(work, a, a.q),
        b.q,
        _scale_input(work, b, b.q),
        _zero_point_input(work, b, b.q),
        out.scale,
        out.zero_point,
    ]

    def produce(name: str) -> list[WorkNode]:
        return [matmul.derive("QLinearMatMul", inputs, [name], {}, max(work.opset, 10))]

    return [matmul, *out.nodes], _finish(work, matmul, out, produce)


def _match_gemm(work: Work, gemm: WorkNode, reader: _Reader):
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
    out = _quantized_output(work, reader, gemm.outputs[0])
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
        _zero_point_input(work, x, x.q),
        _int_constant(work, f"{w.q}_1x1", np.ascontiguousarray(weights).reshape(n, -1, 1, 1), w.dtype),
        _scale_input(work, w, w.q),
        _zero_point_input(work, w, w.q),
        out.scale,
        out.zero_point,
    ]
    if bias is not None:
        inputs.append(work.add_constant(f"{gemm.outputs[0]}_bias_int32", bias))
    opset = max(work.opset, INT_OPSET)

    def produce(name: str) -> list[WorkNode]:
        conv_out = work.fresh_name(f"{name}_image")
        work.types[conv_out] = ValueType(onnx.helper.np_dtype_to_tensor_dtype(out.dtype), (rows, n, 1, 1))
        to_image = _int_constant(work, f"{image}_shape", (rows, x_shape[1], 1, 1), np.int64)
        to_rows = _int_constant(work, f"{name}_shape", (rows, n), np.int64)
        return [
            gemm.derive("Reshape", [x.q, to_image], [image], {}, opset),
            gemm.derive("QLinearConv", inputs, [conv_out], {}, opset),
            gemm.derive("Reshape", [conv_out, to_rows], [name], {}, opset),
        ]

    return [gemm, *out.nodes], _finish(work, gemm, out, produce)


# Operators that only select or move elements: on a quantized tensor they give what quantizing
# their float result gives, when every input and the output share one scale and zero point
# (Q(DQ(q)) = q, and quantisation preserves order). Inputs beyond the first are constants, except
# Concat's.
PASSTHROUGH = ("MaxPool", "GlobalMaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Concat")


def _match_passthrough(work: Work, node: WorkNode, reader: _Reader):
    if len([name for name in node.outputs if name]) != 1 or node.outputs[0] == "":
        return None
    data = node.inputs if node.op == "Concat" else node.inputs[:1]
    sources = [reader.dequantized_input(name) for name in data]
    if not sources or any(s is None or not s.per_tensor or s.dtype not in QUANTIZED for s in sources):
        return None
    if any(name and name not in work.constants for name in node.inputs[len(data) :]):
        return None
    out = _quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None or out.dtype != sources[0].dtype:
        return None
    params = {(s.dtype, float(s.scale[0]), int(s.zero_point[0])) for s in sources}
    if params != {(out.dtype, float(out.scale_value), out.zp_value)}:
        return None
    inputs = [s.q for s in sources] + list(node.inputs[len(data) :])
    return [node, *out.nodes], [node.derive(node.op, inputs, [out.name], node.attrs, node.opset)]


def _match_binary(work: Work, node: WorkNode, reader: _Reader):
    if len(node.inputs) != 2:
        return None
    a, b = (reader.dequantized_input(name) for name in node.inputs)
    if a is None or b is None or not (a.per_tensor and b.per_tensor) or {a.dtype, b.dtype} - set(QUANTIZED):
        return None
    out = _quantized_output(work, reader, node.outputs[0])
    if out is None:
        return None
    inputs = []
    for name, source in zip(node.inputs, (a, b)):
        inputs += [source.q, reader.producers[name].inputs[1], _zero_point_input(work, source, source.q)]
    inputs += [out.scale, out.zero_point]
    op = {"Add": "QLinearAdd", "Mul": "QLinearMul"}[node.op]

    def produce(name: str) -> list[WorkNode]:
        return [node.derive(op, inputs, [name], {}, work.opset)]

    return [node, *out.nodes], _finish(work, node, out, produce)


def _match_global_average_pool(work: Work, node: WorkNode, reader: _Reader):
    x = reader.dequantized_input(node.inputs[0])
    if x is None or not x.per_tensor or x.dtype not in QUANTIZED:
        return None
    out = _quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None:
        return None
    scale = reader.producers[node.inputs[0]].inputs[1]
    inputs = [x.q, scale, _zero_point_input(work, x, x.q), out.scale, out.zero_point]
    return [node, *out.nodes], [node.derive("QLinearGlobalAveragePool", inputs, [out.name], {}, work.opset)]


def _match_concat(work: Work, node: WorkNode, reader: _Reader):
    """Concat whose inputs have different scales (one shared scale is a passthrough, matched first)."""
    found = _match_passthrough(work, node, reader)
    if found is not None:
        return found
    sources = [reader.dequantized_input(name) for name in node.inputs]
    if not sources or any(s is None or not s.per_tensor or s.dtype not in QUANTIZED for s in sources):
        return None
    out = _quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None or any(s.dtype != out.dtype for s in sources):
        return None
    inputs = [out.scale, out.zero_point]
    for name, source in zip(node.inputs, sources):
        inputs += [source.q, reader.producers[name].inputs[1], _zero_point_input(work, source, source.q)]
    attrs = {"axis": node.attrs.get("axis", 0)}
    return [node, *out.nodes], [node.derive("QLinearConcat", inputs, [out.name], attrs, work.opset)]


def _match_average_pool(work: Work, node: WorkNode, reader: _Reader):
    if any(int(d) != 1 for d in node.attrs.get("dilations", ())):
        return None  # onnxruntime's QLinearAveragePool has no dilations
    x = reader.dequantized_input(node.inputs[0])
    if x is None or not x.per_tensor or x.dtype not in QUANTIZED or len(node.outputs) != 1:
        return None
    out = _quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None:
        return None
    scale = reader.producers[node.inputs[0]].inputs[1]
    inputs = [x.q, scale, _zero_point_input(work, x, x.q), out.scale, out.zero_point]
    kept = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
    attrs = {k: v for k, v in node.attrs.items() if k in kept}
    return [node, *out.nodes], [node.derive("QLinearAveragePool", inputs, [out.name], attrs, work.opset)]


def _match_lookup(work: Work, node: WorkNode, reader: _Reader):
    """Sigmoid and LeakyRelu: onnxruntime's table-driven QLinearSigmoid and QLinearLeakyRelu."""
    x = reader.dequantized_input(node.inputs[0])
    if x is None or not x.per_tensor or x.dtype not in QUANTIZED:
        return None
    out = _quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None:
        return None
    scale = reader.producers[node.inputs[0]].inputs[1]
    inputs = [x.q, scale, _zero_point_input(work, x, x.q), out.scale, out.zero_point]
    attrs = {"alpha": node.attrs.get("alpha", 0.01)} if node.op == "LeakyRelu" else {}
    return [node, *out.nodes], [node.derive(f"QLinear{node.op}", inputs, [out.name], attrs, work.opset)]


MATCHERS = {"Conv": _match_conv, "MatMul": _match_matmul, "Gemm": _match_gemm}
MATCHERS.update(Add=_match_binary, Mul=_match_binary, GlobalAveragePool=_match_global_average_pool)
MATCHERS.update(dict.fromkeys(PASSTHROUGH, _match_passthrough))
MATCHERS["Concat"] = _match_concat
MATCHERS["AveragePool"] = _match_average_pool
MATCHERS.update(
    Sigmoid=_match_lookup, LeakyRelu=_match_lookup
)  # a passthrough when the scales agree, else QLinearConcat


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
