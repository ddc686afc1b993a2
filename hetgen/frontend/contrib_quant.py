"""onnxruntime's QOperator contrib operators (domain com.microsoft) as standard QDQ islands.

`quantize_static(..., quant_format=QuantFormat.QOperator)` writes QLinearConv and QLinearMatMul
(standard ONNX) but also com.microsoft operators: QGemm, QLinearAdd, QLinearMul,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearSoftmax, QLinearSigmoid,
QLinearLeakyRelu. Each is defined as "dequantize the inputs, run the float operator, quantize the
result", so each becomes exactly that: DequantizeLinear per quantized input, the default-domain
operator, QuantizeLinear. `qdq.rewrite_qdq` then lowers the islands it recognises (QGemm's Gemm) to
integer kernels, and the rest run as float between their Q/DQ nodes. onnxruntime computes some of
these with its own fixed-point shortcuts (QLinearAdd, QLinearSoftmax's lookup table), so results may
differ from its run by one quantisation step; tests/test_int8_models.py measures it.

Runs right after `convert`, before `resolve` types and normalises the new nodes.
"""

from __future__ import annotations

from hetgen.frontend.work import Work, WorkNode

CONTRIB = "com.microsoft"
# op -> (default-domain op, attributes kept)
UNARY = {
    "QLinearGlobalAveragePool": ("GlobalAveragePool", ()),
    "QLinearAveragePool": (
        "AveragePool",
        ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"),
    ),
    "QLinearSoftmax": ("Softmax", ("axis",)),
    "QLinearSigmoid": ("Sigmoid", ()),
    "QLinearLeakyRelu": ("LeakyRelu", ("alpha",)),
}
BINARY = {"QLinearAdd": "Add", "QLinearMul": "Mul"}


def expand_contrib(work: Work) -> None:
    nodes = []
    for node in work.nodes:
        expanded = _expand(work, node) if node.domain == CONTRIB else None
        nodes.extend(expanded if expanded is not None else [node])
    work.nodes = nodes


def _expand(work: Work, node: WorkNode) -> list[WorkNode] | None:
    if node.attrs.get("channels_last", 0):
        return None  # NHWC layouts: left as they are, so check.py names the operator
    inputs = list(node.inputs)
    if node.op in UNARY and len(inputs) >= 4:
        op, kept = UNARY[node.op]
        x, y_scale, y_zp = inputs[0:3], inputs[3], inputs[4] if len(inputs) > 4 else ""
        attrs = {k: v for k, v in node.attrs.items() if k in kept}
        opset = work.opset
        if node.op == "QLinearSoftmax":
            opset = int(node.attrs.get("opset", work.opset))  # the Softmax semantics it was made with
        return _island(work, node, [x], op, attrs, y_scale, y_zp, opset)
    if node.op in BINARY and len(inputs) >= 7:
        y_zp = inputs[7] if len(inputs) > 7 else ""
        return _island(work, node, [inputs[0:3], inputs[3:6]], BINARY[node.op], {}, inputs[6], y_zp)
    if node.op == "QLinearConcat" and len(inputs) >= 5 and (len(inputs) - 2) % 3 == 0:
        groups = [inputs[i : i + 3] for i in range(2, len(inputs), 3)]
        return _island(work, node, groups, "Concat", {"axis": node.attrs.get("axis", 0)}, inputs[0], inputs[1])
    if node.op == "QGemm" and len(inputs) >= 6:
        floats = [inputs[0:3], inputs[3:6]]
        bias = inputs[6] if len(inputs) > 6 else ""
        y_scale = inputs[7] if len(inputs) > 7 else ""
        y_zp = inputs[8] if len(inputs) > 8 else ""
        attrs = {k: node.attrs[k] for k in ("alpha", "transA", "transB") if k in node.attrs}
        if bias:
            attrs["beta"] = 1.0
        # a per-column B scale runs along N: axis 0 of a transposed B, axis 1 otherwise
        axes = (1, 0 if node.attrs.get("transB", 0) else 1)
        return _island(work, node, floats, "Gemm", attrs, y_scale, y_zp, bias=bias, axes=axes)
    return None


def _island(work, node, quantized, op, attrs, y_scale, y_zp, opset=None, bias="", axes=()) -> list[WorkNode]:
    opset = opset or work.opset
    nodes, floats = [], []
    for index, (x, scale, zero_point) in enumerate(quantized):
        name = work.fresh_name(f"{x}_dequantized")
        axis = {"axis": axes[index]} if index < len(axes) else {}
        nodes.append(_node(node, "DequantizeLinear", [x, scale, zero_point], [name], axis, work.opset))
        floats.append(name)
    if bias:
        # QGemm's bias is int32 with scale a_scale * b_scale (zero point 0)
        product = work.fresh_name(f"{bias}_scale")
        nodes.append(_node(node, "Mul", [quantized[0][1], quantized[1][1]], [product], {}, work.opset))
        name = work.fresh_name(f"{bias}_dequantized")
        nodes.append(_node(node, "DequantizeLinear", [bias, product], [name], {"axis": 0}, work.opset))
        floats.append(name)
    if not y_scale:  # QGemm without y_scale outputs float
        nodes.append(_node(node, op, floats, list(node.outputs), attrs, opset))
        return nodes
    result = work.fresh_name(f"{node.outputs[0]}_float")
    nodes.append(_node(node, op, floats, [result], attrs, opset))
    nodes.append(_node(node, "QuantizeLinear", [result, y_scale, y_zp], list(node.outputs), {}, work.opset))
    return nodes


def _node(origin: WorkNode, op, inputs, outputs, attrs, opset) -> WorkNode:
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    return WorkNode(op, list(inputs), list(outputs), dict(attrs), "", opset, origin.source_name)
