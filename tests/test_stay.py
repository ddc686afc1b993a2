"""Tensors stay where they are (issue 8, item 2): a tensor produced behind a link and read there
again is not copied back to the root, the co-processor keeps what passes between npu invocations in
its own memory, and a tensor crosses each link once per consumer device."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen import lower
from hetgen.frontend import import_model
from hetgen.lower.program import DeviceCopyIn, DeviceCopyOut, Invoke, ProgramRole
from hetgen.partition import place
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session

SOC = """
name: s
target:
  kind: native
  runtime: vm
  devices:
    vdev:
      kind: accelerator-with-coprocessor
      link: {{bandwidth_gbps: 4, latency_us: 20}}
      host: {{kind: native, runtime: graph}}
      devices:
        npu0: {{kind: npu, sram_kib: {sram_kib}, dma_gbps: {dma_gbps}}}
"""
NPU = "s/vdev/npu0"
CHANNELS, SIDE = 32, 8


def conv_chain(count: int = 3) -> onnx.ModelProto:
    """x -> Conv -> Relu -> Conv -> Relu -> ... -> y, every Conv 32 -> 32 channels, 3x3, padded."""
    rng = np.random.default_rng(1)
    nodes, weights, previous = [], [], "x"
    for index in range(count):
        w = f"w{index}"
        weights.append(
            numpy_helper.from_array((rng.standard_normal((CHANNELS, CHANNELS, 3, 3)) * 0.1).astype(np.float32), w)
        )
        conv_out = f"c{index}"
        nodes.append(helper.make_node("Conv", [previous, w], [conv_out], name=f"conv{index}", pads=[1, 1, 1, 1]))
        last = index == count - 1
        out = "y" if last else f"r{index}"
        nodes.append(helper.make_node("Relu", [conv_out], [out], name=f"relu{index}"))
        previous = out
    shape = [1, CHANNELS, SIDE, SIDE]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def lowered_on_npu(model: onnx.ModelProto, sram_kib: int, pinned: tuple[str, ...], options: str = ""):
    platform = load_platform_text(SOC.format(sram_kib=sram_kib, dma_gbps=8) + options)
    graph = import_model(model)
    placement = place(graph, platform, pins={name: NPU for name in pinned})
    return lower.lower(graph, platform, placement)


def copies(lowered, path: str) -> tuple[int, int, int]:
    """(copies in, copies out, invocations) in the program of the controller at `path`."""
    program = next(p for p in lowered.programs if p.target.path_str == path)
    assert program.role is not ProgramRole.ACCELERATOR
    steps = program.steps
    return (
        sum(isinstance(s, DeviceCopyIn) for s in steps),
        sum(isinstance(s, DeviceCopyOut) for s in steps),
        sum(isinstance(s, Invoke) for s in steps),
    )


CONVS_AND_RELUS = tuple(f"conv{i}" for i in range(3)) + tuple(f"relu{i}" for i in range(3))


@pytest.mark.parametrize("sram_kib", [300, 4096])
def test_a_chain_on_the_npu_crosses_the_link_once_each_way(sram_kib):
    """Three convolutions (300 KiB: they do not fit the SRAM together, one does; 4096 KiB: they
    would). Either way the npu runs one invocation per group, as the cost model prices it
    (hetgen/spec/invocation.py), and what passes between invocations never goes back to the root."""
    # layer by layer (no cascade: hetgen/partition/cascades.py would run some of them as one invocation)
    lowered = lowered_on_npu(
        conv_chain(), sram_kib=sram_kib, pinned=CONVS_AND_RELUS, options="options: {cascade: false}\n"
    )
    assert copies(lowered, "s") == (1, 1, 1)  # x in, y out, one invocation of the co-processor
    # one invocation per group; x in once, the intermediates stay in the npu, y out
    assert copies(lowered, "s/vdev/host") == (1, 1, 3)


def test_the_estimate_prices_weight_loads_and_copies_at_the_dma_rate():
    """One conv on the npu (4 MiB of SRAM): its 36864 bytes of weights, its 8192-byte input and its
    8192-byte output each cross the DMA once (hetgen/spec/tiling.py). The least-priced plan at both
    rates is two double-buffered channel tiles (the second half of the weights loads while the
    first half computes; the input stays in SRAM for both), so at 1 GB/s the DMA is the critical
    path: the group costs its launch, every byte at the DMA rate and each of its five DMA commands'
    overhead (the input, two weight halves, two output halves); going from 8 to 1 GB/s adds no
    more than the bytes' time at the slower rate."""
    model, costs = conv_chain(1), {}
    for dma in (8, 1):
        platform = load_platform_text(SOC.format(sram_kib=4096, dma_gbps=dma))
        placement = place(import_model(model), platform, pins={"conv0": NPU, "relu0": NPU})
        (group,) = [g for g in placement.groups if g.target == NPU]
        (tiling,) = group.tilings
        assert (tiling.count, tiling.double_buffered) == (2, True)
        costs[dma] = group.cost_us
    moved = 36864 + 8192 + 8192
    assert tiling.load_bytes + tiling.store_bytes == moved
    (npu,) = [t for t in platform.targets() if t.path_str == NPU]
    figures = npu.figures
    assert costs[1] == pytest.approx(figures.launch_us + moved / 1e3 + 5 * figures.command_us)
    assert costs[1] - costs[8] <= moved * (1 / 1e3 - 1 / 8e3)


@pytest.mark.parametrize("sram_kib", [300, 4096])
def test_a_tensor_read_by_two_npu_groups_crosses_the_link_once(sram_kib):
    """x feeds conv0 and, after a root-side Relu in between, conv1: both on the npu. x is copied
    over the link once; the second group finds it in the co-processor."""
    rng = np.random.default_rng(2)
    shape = [1, CHANNELS, SIDE, SIDE]
    w0, w1 = ((rng.standard_normal((CHANNELS, CHANNELS, 3, 3)) * 0.1).astype(np.float32) for _ in range(2))
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"], name="relu_root"),
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "c"], ["y"], name="add_root"),
    ]
    graph = helper.make_graph(
        nodes,
        "fanout",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=[numpy_helper.from_array(w0, "w0"), numpy_helper.from_array(w1, "w1")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    platform = load_platform_text(SOC.format(sram_kib=sram_kib, dma_gbps=8))
    ir = import_model(model)
    placement = place(ir, platform, pins={"conv0": NPU, "conv1": NPU, "relu_root": "s", "add_root": "s"})
    lowered = lower.lower(ir, platform, placement)
    root = next(p for p in lowered.programs if p.role is ProgramRole.ROOT)
    sent = [s.tensor for s in root.steps if isinstance(s, DeviceCopyIn)]
    assert sent.count("x") == 1, sent


@pytest.mark.cc
def test_a_tight_chain_still_matches_onnxruntime(tmp_path):
    model = conv_chain()
    platform = load_platform_text(SOC.format(sram_kib=300, dma_gbps=8))
    out = hetgen.compile(platform, model, out=tmp_path / "g", pins={n: NPU for n in CONVS_AND_RELUS}, opt=("-O1",))
    x = np.random.default_rng(3).standard_normal((1, CHANNELS, SIDE, SIDE)).astype(np.float32)
    got = hetgen.load(out).run({"x": x})["y"]
    (want,) = ort_session(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
