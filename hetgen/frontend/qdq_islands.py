"""QDQ islands around element-selecting, elementwise and pooling operators (the QDQ rewrite's
second half; hetgen/frontend/qdq.py has the matrix products and the rewrite loop).

- MaxPool, Reshape, Flatten, Transpose, Concat and other operators that only move or select
  elements run on the quantized tensor itself when their inputs and output share one scale and
  zero point (exact: Q(DQ(q)) = q, and quantisation preserves order);
- Add and Mul → QLinearAdd and QLinearMul, Concat of inputs at different scales → QLinearConcat,
  AveragePool → QLinearAveragePool, GlobalAveragePool → QLinearGlobalAveragePool, Sigmoid and
  LeakyRelu → QLinearSigmoid and QLinearLeakyRelu: onnxruntime's com.microsoft operators
  (hetgen/ops/qelementwise.py).
"""

from __future__ import annotations

from hetgen.frontend.qdq_match import (
    QUANTIZED,
    Reader,
    finish,
    quantized_operand,
    quantized_output,
)
from hetgen.frontend.work import Work, WorkNode
from hetgen.ops.registry import OPS

# Operators that only select or move elements (`OpDef.quantized_passthrough`): on a quantized tensor
# they give what quantizing their float result gives, when every input and the output share one
# scale and zero point (Q(DQ(q)) = q, and quantisation preserves order). Inputs beyond the first are
# constants, except Concat's.
PASSTHROUGH = tuple(op for op, definition in OPS.items() if definition.quantized_passthrough)


def _match_passthrough(work: Work, node: WorkNode, reader: Reader):
    if len([name for name in node.outputs if name]) != 1 or node.outputs[0] == "":
        return None
    data = node.inputs if node.op == "Concat" else node.inputs[:1]
    sources = [reader.dequantized_input(name) for name in data]
    if not sources or any(s is None or not s.per_tensor or s.dtype not in QUANTIZED for s in sources):
        return None
    if any(name and name not in work.constants for name in node.inputs[len(data) :]):
        return None
    out = quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None or out.dtype != sources[0].dtype:
        return None
    params = {(s.dtype, float(s.scale[0]), int(s.zero_point[0])) for s in sources}
    if params != {(out.dtype, float(out.scale_value), out.zp_value)}:
        return None
    inputs = [s.q for s in sources] + list(node.inputs[len(data) :])
    return [node, *out.nodes], [node.derive(node.op, inputs, [out.name], node.attrs, node.opset)]


def _match_binary(work: Work, node: WorkNode, reader: Reader):
    if len(node.inputs) != 2:
        return None
    a, b = (reader.dequantized_input(name) for name in node.inputs)
    if a is None or b is None or not (a.per_tensor and b.per_tensor) or {a.dtype, b.dtype} - set(QUANTIZED):
        return None
    out = quantized_output(work, reader, node.outputs[0])
    if out is None:
        return None
    inputs = []
    for name, source in zip(node.inputs, (a, b)):
        inputs += quantized_operand(work, reader, name, source)
    inputs += [out.scale, out.zero_point]
    op = {"Add": "QLinearAdd", "Mul": "QLinearMul"}[node.op]

    def produce(name: str) -> list[WorkNode]:
        return [node.derive(op, inputs, [name], {}, work.opset)]

    return [node, *out.nodes], finish(work, node, out, produce)


def _match_global_average_pool(work: Work, node: WorkNode, reader: Reader):
    x = reader.dequantized_input(node.inputs[0])
    if x is None or not x.per_tensor or x.dtype not in QUANTIZED:
        return None
    out = quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None:
        return None
    inputs = [*quantized_operand(work, reader, node.inputs[0], x), out.scale, out.zero_point]
    return [node, *out.nodes], [node.derive("QLinearGlobalAveragePool", inputs, [out.name], {}, work.opset)]


def _match_concat(work: Work, node: WorkNode, reader: Reader):
    """Concat whose inputs have different scales (one shared scale is a passthrough, matched first)."""
    found = _match_passthrough(work, node, reader)
    if found is not None:
        return found
    sources = [reader.dequantized_input(name) for name in node.inputs]
    if not sources or any(s is None or not s.per_tensor or s.dtype not in QUANTIZED for s in sources):
        return None
    out = quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None or any(s.dtype != out.dtype for s in sources):
        return None
    inputs = [out.scale, out.zero_point]
    for name, source in zip(node.inputs, sources):
        inputs += quantized_operand(work, reader, name, source)
    attrs = {"axis": node.attrs.get("axis", 0)}
    return [node, *out.nodes], [node.derive("QLinearConcat", inputs, [out.name], attrs, work.opset)]


def _match_average_pool(work: Work, node: WorkNode, reader: Reader):
    if any(int(d) != 1 for d in node.attrs.get("dilations", ())):
        return None  # onnxruntime's QLinearAveragePool has no dilations
    x = reader.dequantized_input(node.inputs[0])
    if x is None or not x.per_tensor or x.dtype not in QUANTIZED or len(node.outputs) != 1:
        return None
    out = quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None:
        return None
    inputs = [*quantized_operand(work, reader, node.inputs[0], x), out.scale, out.zero_point]
    kept = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
    attrs = {k: v for k, v in node.attrs.items() if k in kept}
    return [node, *out.nodes], [node.derive("QLinearAveragePool", inputs, [out.name], attrs, work.opset)]


def _match_lookup(work: Work, node: WorkNode, reader: Reader):
    """Sigmoid and LeakyRelu: onnxruntime's table-driven QLinearSigmoid and QLinearLeakyRelu."""
    x = reader.dequantized_input(node.inputs[0])
    if x is None or not x.per_tensor or x.dtype not in QUANTIZED:
        return None
    out = quantized_output(work, reader, node.outputs[0])
    if out is None or out.clip is not None:
        return None
    inputs = [*quantized_operand(work, reader, node.inputs[0], x), out.scale, out.zero_point]
    attrs = {"alpha": node.attrs.get("alpha", 0.01)} if node.op == "LeakyRelu" else {}
    return [node, *out.nodes], [node.derive(f"QLinear{node.op}", inputs, [out.name], attrs, work.opset)]


MATCHERS = dict.fromkeys(PASSTHROUGH, _match_passthrough)
MATCHERS.update(Add=_match_binary, Mul=_match_binary, GlobalAveragePool=_match_global_average_pool)
MATCHERS.update(AveragePool=_match_average_pool, Sigmoid=_match_lookup, LeakyRelu=_match_lookup)
MATCHERS["Concat"] = _match_concat  # a passthrough when the scales agree, else QLinearConcat
