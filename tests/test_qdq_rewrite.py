"""The QDQ rewrite (hetgen/frontend/qdq.py) at the graph level: what it turns into integer operators,
what it must leave alone, and that the rewritten graph still means the same thing (exported back to
ONNX, com.microsoft operators included, it runs in onnxruntime with the original's results)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.frontend import export_onnx, import_model
from hetgen.runtime.reference import ort_session

RNG = np.random.default_rng(11)


def qdq_block(extra_reader: bool = False) -> onnx.ModelProto:
    """x → Q → DQ → Conv(DQ(int8 weights), DQ(int32 bias)) → Q → DQ → Add(DQ(skip)) → Q → DQ."""
    w = RNG.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8)
    inits = {
        "xs": np.float32(0.04),
        "xz": np.array(2, np.int8),
        "wq": w,
        "ws": (RNG.random(4) * 0.02 + 0.005).astype(np.float32),
        "wz": np.zeros(4, np.int8),
        "bq": RNG.integers(-500, 500, 4).astype(np.int32),
        "cs": np.float32(0.08),
        "cz": np.array(-3, np.int8),
        "ys": np.float32(0.1),
        "yz": np.array(0, np.int8),
    }
    inits["bs"] = (inits["xs"] * inits["ws"]).astype(np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "cs", "cz"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "cs", "cz"], ["cd"]),
        helper.make_node("Add", ["cd", "xd"], ["s"]),
        helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["sq"]),
        helper.make_node("DequantizeLinear", ["sq", "ys", "yz"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])]
    if extra_reader:  # the float convolution result is also a graph output: the island is not closed
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4, 8, 8]))
    graph = helper.make_graph(
        nodes,
        "qdq_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        outputs,
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_islands_become_integer_operators_and_mean_the_same():
    model = qdq_block()
    graph = import_model(model)
    assert Counter(n.op for n in graph.nodes) == Counter(
        {"QuantizeLinear": 1, "QLinearConv": 1, "QLinearAdd": 1, "DequantizeLinear": 1}
    )
    assert graph.types[graph.nodes[1].inputs[3]].dtype.label == "int8"  # the weights stayed int8
    exported = export_onnx(graph)
    assert {(o.domain, o.version) for o in exported.opset_import} >= {("com.microsoft", 1)}
    feeds = {"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    original = ort_session(model.SerializeToString()).run(None, feeds)[0]
    rewritten = ort_session(exported.SerializeToString()).run(None, feeds)[0]
    # onnxruntime's own QLinearAdd is fixed-point: within one output step of the float path
    assert np.abs(rewritten - original).max() <= 0.1 + 1e-6


def test_an_island_with_another_reader_stays_float():
    graph = import_model(qdq_block(extra_reader=True))
    ops = Counter(n.op for n in graph.nodes)
    assert ops["Conv"] == 1 and ops["QLinearConv"] == 0  # its float output is needed as it is
    assert ops["QLinearAdd"] == 1  # the island after it is still closed


@pytest.mark.parametrize("scale", [np.float32(0.04), np.float32(0.05)], ids=["same", "other"])
def test_maxpool_runs_on_the_quantized_tensor_only_at_one_scale(scale):
    inits = {"s": np.float32(0.04), "z": np.array(1, np.int8), "t": scale}
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
        helper.make_node("MaxPool", ["f"], ["p"], kernel_shape=[2, 2]),
        helper.make_node("QuantizeLinear", ["p", "t", "z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 2, 3, 3])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    ops = [n.op for n in import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).nodes]
    assert ops == (["MaxPool"] if scale == inits["s"] else ["DequantizeLinear", "MaxPool", "QuantizeLinear"])


# -- the rewrite loop: linear, and the same islands a rescan from the start finds -------------------


def _rescan_rewrite(work) -> None:
    """The rewrite as it was first written: after each rewrite, build the reader again and look
    again from the first node (quadratic). The linear loop must find exactly what this finds."""
    from hetgen.frontend.qdq import MATCHERS
    from hetgen.frontend.qdq_match import Reader

    if not any(node.op == "QuantizeLinear" for node in work.nodes):
        return
    index, reader = 0, Reader(work)
    while index < len(work.nodes):
        node = work.nodes[index]
        match = MATCHERS.get(node.op) if node.is_default_domain else None
        found = match(work, node, reader) if match else None
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
        index, reader = 0, Reader(work)


def random_qdq_model(seed: int, steps: int) -> onnx.ModelProto:
    """A random int8 network on [1, 4, 6, 6] tensors, as a quantizer might leave it and worse:
    Conv (± Relu), Add, MaxPool, Sigmoid and Relu islands at a few shared scales; DequantizeLinear
    outputs shared by several readers; float results read by a second node or made graph outputs
    (so their islands must stay float); float ops between islands."""
    rng = np.random.default_rng(seed)
    shape = [1, 4, 6, 6]
    inits = {f"s{k}": np.float32(0.02 * (k + 1)) for k in range(3)}
    inits.update({f"z{k}": np.array(k - 1, np.int8) for k in range(3)})
    nodes = [helper.make_node("QuantizeLinear", ["x", "s0", "z1"], ["q0"])]
    quantized = [("q0", 0, 1)]  # (tensor, scale index, zero point index)
    dequantized: dict[str, str] = {}
    floats: list[str] = []
    outputs: list[str] = []
    count = 0

    def fresh(base: str) -> str:
        nonlocal count
        count += 1
        return f"{base}{count}"

    def dq(entry) -> str:
        name, s, z = entry
        if name in dequantized and rng.random() < 0.5:  # share one DequantizeLinear between readers
            return dequantized[name]
        out = fresh("d")
        nodes.append(helper.make_node("DequantizeLinear", [name, f"s{s}", f"z{z}"], [out]))
        dequantized[name] = out
        return out

    def close(value: str) -> None:
        roll = rng.random()
        if roll < 0.15:
            outputs.append(value)  # a float result that is also a graph output: the island stays float
        elif roll < 0.25:
            floats.append(value)  # read again later by a float op
        if roll < 0.9:
            s, z = int(rng.integers(3)), int(rng.integers(3))
            q = fresh("q")
            nodes.append(helper.make_node("QuantizeLinear", [value, f"s{s}", f"z{z}"], [q]))
            quantized.append((q, s, z))
        else:
            floats.append(value)

    for _ in range(steps):
        pick = lambda: quantized[int(rng.integers(len(quantized)))]  # noqa: E731
        kind = rng.choice(["conv", "conv_relu", "add", "maxpool", "sigmoid", "relu", "float"])
        out = fresh("t")
        if kind in ("conv", "conv_relu"):
            w = fresh("w")
            inits[w] = rng.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8)
            inits[w + "s"] = (rng.random(4) * 0.02 + 0.005).astype(np.float32)
            inits[w + "z"] = np.zeros(4, np.int8)
            nodes.append(helper.make_node("DequantizeLinear", [w, w + "s", w + "z"], [w + "d"], axis=0))
            nodes.append(helper.make_node("Conv", [dq(pick()), w + "d"], [out], pads=[1, 1, 1, 1]))
            if kind == "conv_relu":
                relu = fresh("t")
                nodes.append(helper.make_node("Relu", [out], [relu]))
                out = relu
        elif kind == "add":
            nodes.append(helper.make_node("Add", [dq(pick()), dq(pick())], [out]))
        elif kind == "maxpool":
            nodes.append(helper.make_node("MaxPool", [dq(pick())], [out], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        elif kind == "sigmoid":
            nodes.append(helper.make_node("Sigmoid", [dq(pick())], [out]))
        elif kind == "relu":
            nodes.append(helper.make_node("Relu", [dq(pick())], [out]))
        else:  # a float op between islands, reading a float result when there is one
            source = floats[int(rng.integers(len(floats)))] if floats else dq(pick())
            nodes.append(helper.make_node("Mul", [source, dq(pick())], [out]))
        close(out)
    last = quantized[-1]
    nodes.append(helper.make_node("DequantizeLinear", [last[0], f"s{last[1]}", f"z{last[2]}"], ["y"]))
    graph = helper.make_graph(
        nodes,
        f"random_qdq_{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in ["y", *dict.fromkeys(outputs)]],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _imported_nodes(model: onnx.ModelProto) -> list[tuple]:
    graph = import_model(model)
    return [(n.op, tuple(n.inputs), tuple(n.outputs)) for n in graph.nodes]


@pytest.mark.parametrize("seed", range(40))
def test_the_linear_rewrite_finds_what_a_rescan_finds(seed, monkeypatch):
    from hetgen.frontend import qdq

    model = random_qdq_model(seed, steps=12 + seed % 20)
    linear = _imported_nodes(model)
    monkeypatch.setattr(qdq, "rewrite_qdq", _rescan_rewrite)
    rescanned = _imported_nodes(model)
    assert linear == rescanned


def test_the_random_networks_do_get_rewritten():
    """The comparison above means something only if islands are found in those networks, and left
    float where they must be."""
    ops = Counter(op for seed in range(0, 40, 4) for op, _, _ in _imported_nodes(random_qdq_model(seed, 20)))
    assert ops["QLinearConv"] >= 5 and ops["QLinearAdd"] >= 3 and ops["QLinearSigmoid"] >= 2, ops
    assert ops["Conv"] + ops["Add"] >= 2, ops  # islands with another reader of their float result


def _matcher_calls(units: int, monkeypatch) -> int:
    """How many times the rewrite asks a matcher, for a chain of `units` Conv → Relu islands."""
    from hetgen.frontend import qdq

    calls = 0

    def counting(match):
        def counted(*args):
            nonlocal calls
            calls += 1
            return match(*args)

        return counted

    monkeypatch.setattr(qdq, "MATCHERS", {op: counting(m) for op, m in qdq.MATCHERS.items()})
    # A chain: each unit is DequantizeLinear → Conv → Relu → QuantizeLinear.
    w = RNG.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8)
    inits = {"s": np.float32(0.05), "z": np.array(0, np.int8), "w": w}
    inits.update({"ws": np.full(4, 0.01, np.float32), "wz": np.zeros(4, np.int8)})
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"])]
    nodes.append(helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0))
    for i in range(units):
        nodes.append(helper.make_node("DequantizeLinear", [f"q{i}", "s", "z"], [f"d{i}"]))
        nodes.append(helper.make_node("Conv", [f"d{i}", "wd"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        nodes.append(helper.make_node("QuantizeLinear", [f"r{i}", "s", "z"], [f"q{i + 1}"]))
    nodes.append(helper.make_node("DequantizeLinear", [f"q{units}", "s", "z"], ["y"]))
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 6, 6]) for n in ("x", "y")]
    graph = helper.make_graph(
        nodes, "chain", info[:1], info[1:], initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ops = Counter(op for op, _, _ in _imported_nodes(model))
    assert ops["QLinearConv"] == units  # every island rewritten
    return calls


def test_the_rewrite_asks_each_node_a_bounded_number_of_times(monkeypatch):
    """Linear, not quadratic: 8x the islands costs at most ~8x the matcher calls (the rescan it
    replaced made 64x), so a 5,000-node QDQ model imports in about a second."""
    small, large = _matcher_calls(25, monkeypatch), _matcher_calls(200, monkeypatch)
    assert large <= 9 * small, (small, large)
