"""One small model per way of omitting the optional inputs of each operator hetgen supports.

For every supported operator whose ONNX schema has optional inputs, `SPECS` holds a node with every
input given (small constants, the data input a graph input) and the omissions worth trying: each
optional input alone, and all of them together, unless the operator needs one of a pair (Resize's
scales or sizes). Each omission is written both ways ONNX allows: an empty name in the middle
(`Clip(x, "", max)`) and, where the omitted inputs are the last ones, left off the end (`Clip(x)`).
`cases()` turns these into models whose outputs onnx's strict shape inference types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

F32, I64, I32, U8 = np.float32, np.int64, np.int32, np.uint8


@dataclass(frozen=True)
class Feed:
    """A graph input of this shape and dtype (values drawn from `low`..`high`)."""

    shape: tuple[int, ...]
    dtype: type = F32
    low: float = -2.0
    high: float = 2.0


@dataclass(frozen=True)
class Spec:
    op: str
    inputs: Callable[[frozenset[int]], list] | list  # per input: Feed, ndarray; or a function of the omitted set
    attrs: Callable[[frozenset[int]], dict] | dict = field(default_factory=dict)
    opset: int = 21
    domain: str = ""
    outputs: Callable[[frozenset[int]], int] | int = 1
    omissions: tuple[frozenset[int], ...] | None = None  # None: each optional alone, then all together
    compare: bool = True  # onnxruntime runs it (with every omission) at this opset
    # (shape, dtype) per output where onnx cannot infer them (contrib operators), or a function of the omitted set
    output_types: Callable[[frozenset[int]], tuple] | tuple[tuple[tuple[int, ...], type], ...] = ()
    # what an omitted input means, given explicitly: the oracle where onnxruntime refuses the omission
    defaults: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.op if not self.domain else f"{self.domain}.{self.op}"


def rng_values(shape, dtype, low=-2.0, high=2.0, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(low, high, shape).astype(dtype)
    return rng.integers(int(low), int(high) + 1, shape).astype(dtype)


def c(values, dtype=F32) -> np.ndarray:
    return np.array(values, dtype)


def r(shape, dtype=F32, low=-2.0, high=2.0, seed=1) -> np.ndarray:
    return rng_values(shape, dtype, low, high, seed)


def _rnn(op: str, gates: int) -> Spec:
    h, d_in, seq, batch = 3, 4, 3, 2
    inputs = [
        Feed((seq, batch, d_in)),
        r((1, gates * h, d_in), low=-0.5, high=0.5),
        r((1, gates * h, h), low=-0.5, high=0.5, seed=2),
        r((1, 2 * gates * h), low=-0.5, high=0.5, seed=3),
        c([3, 2], I32),
        r((1, batch, h), seed=4),
    ]
    if op == "LSTM":
        inputs += [r((1, batch, h), seed=5), r((1, 3 * h), low=-0.5, high=0.5, seed=6)]
    return Spec(op, inputs, {"hidden_size": h}, outputs=2)


def _rotary(omitted: frozenset[int]) -> list:
    batch, seq, heads, size = 1, 3, 2, 4
    if 3 in omitted:  # without position ids the caches are indexed by (batch, position)
        cache_shape = (batch, seq, size // 2)
        return [Feed((batch, seq, heads * size)), r(cache_shape, seed=2), r(cache_shape, seed=3)]
    cache_shape = (8, size // 2)
    return [Feed((batch, seq, heads * size)), r(cache_shape, seed=2), r(cache_shape, seed=3), c([[0, 5, 2]], I64)]


def _attention(omitted: frozenset[int]) -> list:
    """Q, K, V, a mask over the past and present keys, the past keys and values."""
    total = 2 if 4 in omitted else 5
    return [Feed((1, 2, 3, 4)), r((1, 2, 2, 4)), r((1, 2, 2, 4), seed=2), r((3, total), seed=3),
            r((1, 2, 3, 4), seed=4), r((1, 2, 3, 4), seed=5)]  # fmt: skip


def _split_attrs(omitted: frozenset[int]) -> dict:
    return {"axis": 0, "num_outputs": 2} if 1 in omitted else {"axis": 0}


def _pad_inputs(omitted: frozenset[int]) -> list:
    pads = c([1, 0, 2, 1], I64) if 3 in omitted else c([1, 2], I64)
    return [Feed((2, 3)), pads, c(1.5), c([1], I64)]


def _qlinear_binary(op: str) -> Spec:
    a, b = Feed((2, 3), U8, 0, 255), r((2, 3), U8, 0, 255, seed=2)
    inputs = [a, c(0.05), c(120, U8), b, c(0.03), c(100, U8), c(0.07), c(128, U8)]
    omissions = (frozenset({2}), frozenset({5, 7}), frozenset({2, 5, 7}))
    defaults = {2: c(0, U8), 5: c(0, U8), 7: c(0, U8)}
    return Spec(
        op, inputs, domain="com.microsoft", omissions=omissions, compare=False, output_types=(((2, 3), U8),),
        defaults=defaults,
    )  # fmt: skip


def _qlinear_unary(op: str, shape=(1, 2, 3, 3), **attrs) -> Spec:
    inputs = [Feed((1, 2, 3, 3), U8, 0, 255), c(0.05), c(120, U8), c(0.04), c(128, U8)]
    omissions = (frozenset({2}), frozenset({4}), frozenset({2, 4}))
    return Spec(
        op, inputs, attrs, domain="com.microsoft", omissions=omissions, compare=False, output_types=((shape, U8),),
        defaults={2: c(0, U8), 4: c(0, U8)},
    )  # fmt: skip


SPECS: tuple[Spec, ...] = (
    Spec("Clip", [Feed((1, 8, 4, 4)), c(-0.5), c(1.0)]),
    Spec("Clip", [Feed((2, 3), I64, -5, 5), c(-1, I64), c(2, I64)]),
    Spec("Conv", [Feed((1, 3, 6, 6)), r((4, 3, 3, 3)), r((4,), seed=2)], {"pads": [1, 1, 1, 1]}),
    # past an NPU's SRAM: tiled by rows, each tile's kernel naming the inputs the tile passes it
    Spec("Conv", [Feed((1, 32, 48, 48)), r((8, 32, 3, 3)), r((8,), seed=2)], {"pads": [1, 1, 1, 1]}),
    Spec(
        "ConvInteger",
        [Feed((1, 2, 5, 5), U8, 0, 255), r((3, 2, 3, 3), U8, 0, 255), c(100, U8), c(120, U8)],
    ),
    Spec("ConvTranspose", [Feed((1, 3, 4, 4)), r((3, 2, 3, 3)), r((2,), seed=2)], {"strides": [2, 2]}),
    Spec(
        "DFT",
        [Feed((1, 8, 1)), c(6, I64), c(1, I64)],
        {"onesided": 0},
        opset=20,
        defaults={1: c(8, I64), 2: c(-2, I64)},
    ),
    Spec(
        "DeformConv",
        [
            Feed((1, 2, 5, 5)),
            r((3, 2, 3, 3)),
            r((1, 18, 3, 3), low=-1, high=1, seed=2),
            r((3,), seed=3),
            r((1, 9, 3, 3), low=0, high=1, seed=4),
        ],
    ),  # fmt: skip
    Spec("DequantizeLinear", [Feed((2, 3), U8, 0, 255), c(0.1), c(120, U8)]),
    Spec("Dropout", [Feed((2, 3)), c(0.3), c(False, np.bool_)]),
    _rnn("GRU", 3),
    _rnn("LSTM", 4),
    _rnn("RNN", 1),
    Spec("Gemm", [Feed((3, 4)), r((4, 5)), r((5,), seed=2)]),
    Spec("LayerNormalization", [Feed((2, 3, 4)), r((4,)), r((4,), seed=2)]),
    Spec("MatMulInteger", [Feed((3, 4), U8, 0, 255), r((4, 5), U8, 0, 255), c(110, U8), c(130, U8)]),
    Spec(
        "MaxUnpool",
        [Feed((1, 1, 2, 2)), c([[[[0, 3], [9, 14]]]], I64), c([1, 1, 5, 5], I64)],
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        # onnx's inference gives no shape for MaxUnpool(x, i, ""), and onnxruntime refuses it
        output_types=lambda omitted: ((((1, 1, 4, 4) if 2 in omitted else (1, 1, 5, 5)), F32),),
        defaults={2: c([1, 1, 4, 4], I64)},
    ),
    Spec("NegativeLogLikelihoodLoss", [Feed((3, 5)), c([1, 0, 4], I64), r((5,), low=0.1, high=1.0)]),
    Spec(
        "NonMaxSuppression",
        [Feed((1, 6, 4), F32, 0, 4), Feed((1, 1, 6), F32, 0, 1), c([3], I64), c([0.5]), c([0.2])],
        {"center_point_box": 0},
    ),
    Spec("Pad", _pad_inputs),
    Spec(
        "QLinearConv",
        [
            Feed((1, 2, 5, 5), U8, 0, 255),
            c(0.05),
            c(120, U8),
            r((3, 2, 3, 3), U8, 0, 255),
            c(0.02),
            c(128, U8),
            c(0.3),
            c(100, U8),
            c([100, -50, 7], I32),
        ],
    ),  # fmt: skip
    Spec("QuantizeLinear", [Feed((2, 3)), c(0.05), c(10, U8)]),
    *(
        Spec(op, [Feed((2, 3, 4), F32, 0.1, 2.0), c([1], I64)], {"keepdims": 1}, opset=18)
        for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMean", "ReduceProd")
        + ("ReduceSumSquare", "ReduceMax", "ReduceMin", "ReduceSum")
    ),
    Spec("ReduceSum", [Feed((2, 3, 4)), c([1], I64)], {"keepdims": 0, "noop_with_empty_axes": 1}, opset=18),
    Spec(
        "Resize",
        [Feed((1, 1, 2, 3)), c([0, 0, 0, 0, 1, 1, 1, 1]), c([1, 1, 2, 1.5]), c([1, 1, 4, 4], I64)],
        {"mode": "linear"},
        omissions=(frozenset({1, 3}), frozenset({1, 2}), frozenset({3}), frozenset({2})),
    ),
    Spec(
        "STFT",
        [Feed((1, 16, 1)), c(4, I64), r((8,), low=0.0, high=1.0), c(8, I64)],
        opset=17,
        omissions=(frozenset({2}), frozenset({3})),
    ),  # fmt: skip
    Spec("Slice", [Feed((4, 5)), c([1, 0], I64), c([4, 5], I64), c([0, 1], I64), c([2, 1], I64)]),
    Spec("SoftmaxCrossEntropyLoss", [Feed((3, 5)), c([1, 0, 4], I64), r((5,), low=0.1, high=1.0)]),
    Spec("Split", [Feed((6, 2)), c([2, 4], I64)], _split_attrs, opset=18, outputs=2),
    Spec("Squeeze", [Feed((1, 3, 1, 2)), c([0], I64)], defaults={1: c([0, 2], I64)}),
    Spec("Trilu", [Feed((3, 4)), c(1, I64)]),
    Spec(
        "Attention",
        _attention,
        opset=23,
        outputs=lambda omitted: 1 if 4 in omitted else 3,  # onnxruntime wants present_key with past_key
        omissions=(frozenset({3}), frozenset({4, 5}), frozenset({3, 4, 5})),
    ),
    Spec("RotaryEmbedding", _rotary, {"num_heads": 2}, opset=23),
    Spec("TensorScatter", [Feed((2, 1, 5, 3)), r((2, 1, 2, 3)), c([1, 2], I64)], opset=24),
    _qlinear_binary("QLinearAdd"),
    _qlinear_binary("QLinearMul"),
    _qlinear_unary("QLinearSigmoid"),
    _qlinear_unary("QLinearLeakyRelu", alpha=0.1),
    _qlinear_unary("QLinearGlobalAveragePool", (1, 2, 1, 1), channels_last=0),
    _qlinear_unary("QLinearAveragePool", (1, 2, 2, 2), kernel_shape=[2, 2]),
)


# Supported operators with optional inputs that have no case here, and why.
LEFT_OUT = {
    "Loop": "control flow: an omitted trip count or condition is a property of its body (tests/test_control_flow.py)",
    "LinearAttention": "opset 27: onnxruntime has no kernel to compare with",
    "CausalConvWithState": "opset 27: onnxruntime has no kernel to compare with",
}


def schema(spec: Spec):
    return onnx.defs.get_schema(spec.op, spec.opset, spec.domain)


def optional_indices(spec: Spec) -> tuple[int, ...]:
    """The inputs the operator's schema marks optional, of those the spec gives."""
    try:
        formal = schema(spec).inputs
    except onnx.defs.SchemaError:  # a contrib operator onnx does not describe: its zero points are
        formal = None
    given = len(spec.inputs(frozenset()) if callable(spec.inputs) else spec.inputs)
    if formal is None:
        return tuple(sorted({i for s in spec.omissions or () for i in s}))
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    return tuple(i for i in range(given) if i < len(formal) and formal[i].option == optional)


def omission_sets(spec: Spec) -> tuple[frozenset[int], ...]:
    if spec.omissions is not None:
        return spec.omissions
    optional = optional_indices(spec)
    sets = [frozenset({i}) for i in optional]
    if len(optional) > 1:
        sets.append(frozenset(optional))
    return tuple(sets)


@dataclass(frozen=True)
class Case:
    id: str
    spec: Spec
    omitted: frozenset[int]
    trailing: bool  # the omitted inputs at the end are left off, not written as ""
    model: onnx.ModelProto
    feeds: dict


def with_defaults(case: Case) -> onnx.ModelProto:
    """The case's model with each omitted input given its default value (the spec's `defaults`)."""
    slots = case.spec.inputs(case.omitted) if callable(case.spec.inputs) else case.spec.inputs
    filled = [case.spec.defaults[i] if i in case.omitted else slot for i, slot in enumerate(slots)]
    model, _ = build(dataclasses.replace(case.spec, inputs=filled), frozenset(), False)
    return model


def build(spec: Spec, omitted: frozenset[int], trailing: bool, name: str = "node") -> tuple[onnx.ModelProto, dict]:
    slots = spec.inputs(omitted) if callable(spec.inputs) else spec.inputs
    attrs = spec.attrs(omitted) if callable(spec.attrs) else spec.attrs
    names, graph_inputs, initializers, feeds = [], [], [], {}
    for index, slot in enumerate(slots):
        if index in omitted:
            names.append("")
            continue
        tensor = f"in{index}"
        names.append(tensor)
        if isinstance(slot, Feed):
            graph_inputs.append(
                helper.make_tensor_value_info(tensor, helper.np_dtype_to_tensor_dtype(np.dtype(slot.dtype)), slot.shape)
            )
            feeds[tensor] = rng_values(slot.shape, slot.dtype, slot.low, slot.high, seed=index + 10)
        else:
            initializers.append(numpy_helper.from_array(np.asarray(slot), tensor))
    while trailing and names and names[-1] == "":
        names.pop()
    count = spec.outputs(omitted) if callable(spec.outputs) else spec.outputs
    outputs = [f"out{i}" for i in range(count)]
    node = helper.make_node(spec.op, names, outputs, name=name, domain=spec.domain, **attrs)
    imports = [helper.make_opsetid("", spec.opset)]
    if spec.domain:
        imports.append(helper.make_opsetid(spec.domain, 1))
    graph = helper.make_graph([node], f"optional_{spec.op}", graph_inputs, [], initializer=initializers)
    graph.output.extend(helper.make_empty_tensor_value_info(o) for o in outputs)
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 9 if spec.opset <= 21 else 10
    return _typed_outputs(model, spec, omitted), feeds


def _typed_outputs(model: onnx.ModelProto, spec: Spec, omitted: frozenset[int]) -> onnx.ModelProto:
    """The model with its outputs typed: by onnx's strict shape inference, or as the spec says."""
    given = spec.output_types(omitted) if callable(spec.output_types) else spec.output_types
    if given:
        typed = [
            helper.make_tensor_value_info(o.name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
            for o, (shape, dtype) in zip(model.graph.output, given)
        ]
    else:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        known = {vi.name: vi for vi in inferred.graph.value_info}
        typed = [known[o.name] for o in model.graph.output]
    del model.graph.output[:]
    model.graph.output.extend(typed)
    return model


def cases() -> list[Case]:
    found, seen = [], set()
    for spec in SPECS:
        for omitted in omission_sets(spec):
            given = len(spec.inputs(omitted) if callable(spec.inputs) else spec.inputs)
            forms = [False]
            if max(omitted) == given - 1:
                forms.append(True)
            for trailing in forms:
                gone = "+".join(str(i) for i in sorted(omitted))
                case_id = f"{spec.key}-omit{gone}{'-trailing' if trailing else ''}"
                suffix = 1
                while case_id in seen:
                    suffix += 1
                    case_id = f"{spec.key}#{suffix}-omit{gone}{'-trailing' if trailing else ''}"
                seen.add(case_id)
                model, feeds = build(spec, omitted, trailing)
                found.append(Case(case_id, spec, omitted, trailing, model, feeds))
    return found
