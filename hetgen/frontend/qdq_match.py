"""What the QDQ rewrite (hetgen/frontend/qdq.py) reads and writes: DequantizeLinear operands,
the QuantizeLinear (and Relu/Clip) that closes an island, and the constants it adds.

onnxruntime's arithmetic where the frontend computes at compile time: DequantizeLinear is
(float)(q - zero_point) * scale in float32, QuantizeLinear divides, clamps and rounds half to even.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetgen.frontend.work import Work, WorkNode, subgraph_inputs

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


# -- reading islands ----------------------------------------------------------------------------


class Reader:
    """Who produces and who reads each tensor of `work.nodes`, kept current by the rewrite through
    `remove` and `add` (rebuilding it after each rewrite made a QDQ model's import quadratic)."""

    def __init__(self, work: Work):
        self.work = work
        self.users = {name: list({id(n): n for n in users}.values()) for name, users in work.consumers().items()}
        self.producers = work.producers()

    def remove(self, node: WorkNode) -> None:
        for name in node.outputs:
            if name and self.producers.get(name) is node:
                del self.producers[name]
        for name in _read_names(node):
            if name in self.users:
                self.users[name] = [user for user in self.users[name] if user is not node]

    def add(self, node: WorkNode) -> None:
        for name in node.outputs:
            if name:
                self.producers[name] = node
        for name in _read_names(node):
            users = self.users.setdefault(name, [])
            if all(user is not node for user in users):
                users.append(node)

    def neighbours(self, node: WorkNode) -> list[WorkNode]:
        """The producers of what `node` reads and the readers of what it writes. Constants link
        nothing: matchers read them by value, and one shared scale would link every node."""
        found = [self.producers[name] for name in _read_names(node) if name in self.producers]
        for name in node.outputs:
            if name and name not in self.work.constants:
                found.extend(self.users.get(name, ()))
        return found

    def only_user(self, name: str, *ops: str) -> WorkNode | None:
        users = self.users.get(name, [])
        if len(users) != 1 or name in self.work.outputs or users[0].op not in ops:
            return None
        return users[0] if users[0].is_default_domain else None

    def dequantized_input(self, name: str) -> Dequantized | None:
        return dequantized(self.producers.get(name), self.work)


def _read_names(node: WorkNode) -> set[str]:
    return {name for name in (*node.inputs, *subgraph_inputs(node)) if name}


@dataclass(frozen=True)
class Output:
    """The QuantizeLinear that ends a pattern and the activation before it."""

    nodes: tuple[WorkNode, ...]  # [activation,] QuantizeLinear
    name: str  # the quantized output tensor
    scale: str
    zero_point: str
    scale_value: np.float32
    zp_value: int
    dtype: np.dtype
    clip: tuple[float | None, float | None] | None  # float bounds of a Relu/Clip, None without one


def quantized_output(work: Work, reader: Reader, produced: str) -> Output | None:
    activation = reader.only_user(produced, "Relu", "Clip", "QuantizeLinear")
    clip = None
    if activation is not None and activation.op != "QuantizeLinear":
        clip = float_bounds(work, activation)
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
    return Output(
        nodes=nodes,
        name=quantize.outputs[0],
        scale=quantize.inputs[1],
        zero_point=quantize.inputs[2],
        scale_value=np.float32(scale.reshape(-1)[0]),
        zp_value=int(zero_point.reshape(-1)[0]),
        dtype=zero_point.dtype,
        clip=clip,
    )


def float_bounds(work: Work, node: WorkNode) -> tuple[float | None, float | None] | None:
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


def int_constant(work: Work, base: str, value, dtype) -> str:
    return work.add_constant(base, np.asarray(value, dtype=dtype))


def zero_point_input(work: Work, dq: Dequantized, base: str) -> str:
    return int_constant(work, f"{base}_zero_point", dq.zero_point.reshape(() if dq.per_tensor else (-1,)), dq.dtype)


def quantized_operand(work: Work, reader: Reader, dequantized: str, dq: Dequantized) -> list[str]:
    """A QLinear operator's (x, x_scale, x_zero_point) for the DequantizeLinear output `dequantized`:
    its integer input, its own scale input, and the zero point as a constant."""
    return [dq.q, reader.producers[dequantized].inputs[1], zero_point_input(work, dq, dq.q)]


def scale_input(work: Work, dq: Dequantized, base: str) -> str:
    return work.add_constant(f"{base}_scale", dq.scale.reshape(() if dq.per_tensor else (-1,)).astype(np.float32))


def finish(work: Work, anchor: WorkNode, out: Output, produce) -> list[WorkNode]:
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
        int_constant(work, f"{out.name}_min", quantize_bound(lo, out.scale_value, out.zp_value, out.dtype), out.dtype)
        if lo is not None
        else ""
    )
    if hi is not None:
        inputs.append(
            int_constant(
                work, f"{out.name}_max", quantize_bound(hi, out.scale_value, out.zp_value, out.dtype), out.dtype
            )
        )
    while inputs and not inputs[-1]:
        inputs.pop()
    nodes.append(anchor.derive("Clip", inputs, [out.name], {}, max(work.opset, INT_OPSET)))
    return nodes
