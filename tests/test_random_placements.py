"""Differential test of scheduling across devices: random graphs, random pins onto the root, the
co-processor and the npu, random runtimes and SRAM sizes (small enough to force one-unit invocations
on some), compiled and run in one process, against onnxruntime."""

from __future__ import annotations

import json
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

SHAPE = [1, 8, 8, 8]
RUNTIMES = ("vm", "graph", "aot")


def random_model(rng: random.Random) -> onnx.ModelProto:
    tensors, nodes, inits = ["x"], [], []
    for index in range(rng.randint(6, 12)):
        op = rng.choice(["Conv", "Conv", "Add", "Add", "Relu", "Mul", "Sigmoid", "Tanh"])
        a = rng.choice(tensors[-4:])
        out = f"t{index}"
        if op == "Conv":
            weight = f"w{index}"
            values = np.random.default_rng(index).standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
            inits.append(numpy_helper.from_array(values, weight))
            nodes.append(helper.make_node("Conv", [a, weight], [out], pads=[1, 1, 1, 1], name=f"n{index}"))
        elif op in ("Add", "Mul"):
            nodes.append(helper.make_node(op, [a, rng.choice(tensors)], [out], name=f"n{index}"))
        else:
            nodes.append(helper.make_node(op, [a], [out], name=f"n{index}"))
        tensors.append(out)
    outputs = sorted({tensors[-1], rng.choice(tensors[1:])})
    graph = helper.make_graph(
        nodes,
        "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, SHAPE) for name in outputs],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def random_platform(rng: random.Random) -> str:
    return f"""
name: rnd
target:
  kind: aarch64
  runtime: {rng.choice(RUNTIMES)}
  devices:
    vdevice0:
      kind: accelerator-with-coprocessor
      link: {{bandwidth_gbps: 4, latency_us: 1}}
      host: {{kind: riscv64, runtime: {rng.choice(RUNTIMES)}}}
      devices:
        npu0: {{kind: npu, sram_kib: {rng.choice([72, 96, 512])}}}
"""


def live_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The nodes an output depends on (the frontend drops the others, and pins must name real nodes)."""
    needed = {output.name for output in model.graph.output}
    live = []
    for node in reversed(model.graph.node):
        if set(node.output) & needed:
            live.append(node)
            needed |= set(node.input)
    return live[::-1]


def random_pins(model: onnx.ModelProto, rng: random.Random) -> dict[str, str]:
    pins = {}
    for node in live_nodes(model):
        choices = ["rnd", "rnd/vdevice0/host"] + (["rnd/vdevice0/npu0"] * 2 if node.op_type in ("Conv", "Add") else [])
        if rng.random() < 0.8:
            pins[node.name] = rng.choice(choices)
    pins[live_nodes(model)[-1].name] = "rnd/vdevice0/host"  # at least one off the root
    return pins


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("HG_RANDOM_SEEDS", "8"))))
def test_random_heterogeneous_program_matches_onnxruntime(tmp_path, seed):
    rng = random.Random(seed)
    model = random_model(rng)
    platform = load_platform_text(random_platform(rng))
    pins = random_pins(model, rng)
    out = hetgen.compile(
        platform, model, out=tmp_path / "rnd", pins=pins, opt=("-O1",), native_tuning=False, native_only=True
    )
    roles = {t["path"]: t["kernels"] for t in json.loads((out / "hetgen.json").read_text())["targets"]}
    assert len(roles) >= 2, roles  # the pins spread the work over several targets
    x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
    got = hetgen.load(out).run({"x": x})
    expected = ort_session(model.SerializeToString()).run(None, {"x": x})
    for output, wanted in zip(model.graph.output, expected):
        np.testing.assert_allclose(got[output.name], wanted, rtol=1e-4, atol=1e-5, err_msg=output.name)
