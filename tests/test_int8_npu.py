"""int8 on the simulated npu: its int8 patterns take QLinearConv, the placement chooses them because
they pay, the device computes exactly what the CPU computes (the same kernels, hg_quant.h's
rounding), and its MAC array counts int8 work at its own rate (int8_macs_per_cycle).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.frontend import import_model
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session
from hetgen.spec import build_kernel_specs
from hetgen.spec.invocation import group_plans, tile_rates
from hetgen.spec.tiling import plan_us

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

PLATFORM = """
name: q8
target:
  kind: native
  runtime: vm
  devices:
    npu0:
      kind: npu
      macs_per_cycle: 256
      int8_macs_per_cycle: 1024
      mac_rows: 16
      clock_mhz: 1000
      command_cycles: 64
      dma_gbps: 2048
      link: {bandwidth_gbps: 8, latency_us: 5}
"""
NPU = "q8/npu0"
# dma_gbps 2048 (2048 bytes a cycle): so quick that a second tile of the int8 convolution would hide
# under the first's compute less DMA than its own 64-cycle command costs, so its least-priced plan is
# one whole tile, the one whose kernel command the test counts by hand.


def conv_pair() -> onnx.ModelProto:
    """The same 8 -> 64 channel 3x3 convolution on 16 x 16, once quantized (QDQ) and once float,
    each followed by the same 64-channel 3x3 depthwise convolution (QDQ after the int8 one)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 8, 3, 3)).astype(np.float32) * 0.1
    w_scale = (np.abs(w).reshape(64, -1).max(axis=1) / 127).astype(np.float32)
    w_q = np.clip(np.rint(w / w_scale[:, None, None, None]), -127, 127).astype(np.int8)
    dw = rng.standard_normal((64, 1, 3, 3)).astype(np.float32) * 0.3
    dw_scale = (np.abs(dw).reshape(64, -1).max(axis=1) / 127).astype(np.float32)
    dw_q = np.clip(np.rint(dw / dw_scale[:, None, None, None]), -127, 127).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.float32(0.03), "xs"),
        numpy_helper.from_array(np.int8(0), "xz"),
        numpy_helper.from_array(w_q, "wq"),
        numpy_helper.from_array(w_scale, "ws"),
        numpy_helper.from_array(np.zeros(64, np.int8), "wz"),
        numpy_helper.from_array(np.float32(0.02), "ys"),
        numpy_helper.from_array(np.int8(-128), "yz"),
        numpy_helper.from_array(w, "wf"),
        numpy_helper.from_array(dw_q, "dwq"),
        numpy_helper.from_array(dw_scale, "dws"),
        numpy_helper.from_array(np.zeros(64, np.int8), "dwz"),
        numpy_helper.from_array(np.float32(0.01), "ds"),
        numpy_helper.from_array(np.int8(0), "dz"),
        numpy_helper.from_array(dw, "dwf"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="quantize"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0, name="dq_w"),
        helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1], name="qconv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"], name="quantize_y"),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dq_y"),
        helper.make_node("Conv", ["x", "wf"], ["f"], pads=[1, 1, 1, 1], name="fconv"),
        helper.make_node("DequantizeLinear", ["dwq", "dws", "dwz"], ["dwd"], axis=0, name="dq_dw"),
        helper.make_node("Conv", ["y", "dwd"], ["d"], pads=[1, 1, 1, 1], group=64, name="qdw"),
        helper.make_node("QuantizeLinear", ["d", "ds", "dz"], ["dq"], name="quantize_d"),
        helper.make_node("DequantizeLinear", ["dq", "ds", "dz"], ["yd"], name="dq_d"),
        helper.make_node("Conv", ["f", "dwf"], ["fd"], pads=[1, 1, 1, 1], group=64, name="fdw"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_pair",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 64, 16, 16]) for n in ("y", "f", "yd", "fd")],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_int8_conv_runs_on_the_npu_bit_exactly_at_the_int8_rate(tmp_path):
    model = conv_pair()
    # layer by layer: a cascade would run the input's QuantizeLinear into the convolution stripe by
    # stripe (tests/test_npu_int8_tiling.py), and this test counts the convolution's own command
    platform = load_platform_text(PLATFORM + "options: {cascade: false}\n")
    pins = {"qdw": NPU, "fdw": NPU}  # the depthwise pair on the npu, to count them (the rest by cost)
    out = hetgen.compile(platform, model, out=tmp_path / "npu", pins=pins, native_only=True, opt=("-O1",))
    host = hetgen.compile("host", model, out=tmp_path / "host", native_only=True, opt=("-O1",))

    manifest = json.loads((out / "hetgen.json").read_text())
    (npu,) = [t for t in manifest["targets"] if t["path"] == NPU]
    # keyed by the group's first IR node less its "nN_" index: "qlinearconv_qconv" (the fused
    # QLinearConv), "clip_qconv" (its Relu, fused into it or not), "conv_fconv"
    kernels = {c["nodes"][0].split("_", 1)[1]: i for i, c in enumerate(npu["counters"]) if c["what"] == "kernel"}
    assert "qlinearconv_qconv" in kernels, "the cost placement should put the int8 convolution on the npu"
    qconv = [c for c in npu["counters"] if c["what"] == "kernel" and c["nodes"][0].endswith("_qlinearconv_qconv")]
    assert len(qconv) == 1  # one whole tile: one kernel command
    groups = {e["nodes"][0].split("_", 1)[1]: e for e in manifest["estimates"] if e["nodes"] and not e.get("tensor")}
    assert groups["qlinearconv_qconv"]["label"] == "qconv2d" and groups["conv_fconv"]["label"] == "conv2d"
    # the int8 pattern is priced at peak_int8_gops (4x the float peak here): same MACs, less time
    assert groups["qlinearconv_qconv"]["estimate_us"] < groups["conv_fconv"]["estimate_us"]

    feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)}
    on_npu = hetgen.load(out)
    got = on_npu.run(feeds)
    np.testing.assert_array_equal(got["y"], hetgen.load(host).run(feeds)["y"])  # the device rounds as the CPU
    np.testing.assert_array_equal(got["y"], ort_session(model.SerializeToString()).run(["y"], feeds)[0])

    cycles = on_npu.device_counters(npu["counters_offset"], len(npu["counters"]))
    # M = 256 output pixels, N = 64 output channels, K = 8 * 3 * 3 = 72 taps on 16 rows:
    # int8: 1024 MACs = 16 x 16 multipliers of 4 products along the depth, so 16 * 4 * 72 / 4 = 1152
    # steps (+64 to start the command)
    assert cycles[kernels["qlinearconv_qconv"]] == 64 + 1152
    # float: 256 MACs = 16 x 16, so 16 * 4 * 72 = 4608 steps: the same convolution, 4x the time, also
    # one whole tile at this DMA rate (SRAM: x 8192 + w 18432 + y 65536 bytes / 64 = 1440, hidden)
    fconv = [i for i, c in enumerate(npu["counters"]) if c["what"] == "kernel" and c["nodes"][0].endswith("_fconv")]
    assert len(fconv) == 1 and cycles[fconv[0]] == 64 + 4608

    # The depthwise pair: 64 groups of one output channel (one column busy), 256 pixels, 9 taps.
    # int8: each multiplier sums 4 int8 products along the depth (int8_mac_depth 4: 1024 / 256), so
    # a channel takes 16 * 1 * ceil(9 / 4) = 48 steps, 64 * 48 = 3072; float: 16 * 1 * 9 = 144 a
    # channel, 9216. Before the dot products, int8 spread its 4x over 64 columns and took 9216 too.
    np.testing.assert_array_equal(got["yd"], hetgen.load(host).run(feeds)["yd"])
    depthwise = {"qdw": 64 * 16 * 3, "fdw": 64 * 16 * 9}
    graph = import_model(model)
    kernels_of = build_kernel_specs(graph, platform)
    (target,) = [t for t in platform.targets() if t.path_str == NPU]
    for name, steps in depthwise.items():
        (index,) = [i for i, c in enumerate(npu["counters"]) if c["what"] == "kernel" and c["nodes"][0].endswith(name)]
        assert cycles[index] == 64 + steps, name
        # priced at the same steps: its plan with DMA, commands and SRAM streaming free
        node = next(n for n in graph.nodes if n.name.endswith(name) and n.op in ("Conv", "QLinearConv"))
        (plan,) = group_plans([node], graph, target, kernels_of)
        rates = tile_rates(target, 1.0, [node])
        compute = dataclasses.replace(rates, us_per_byte=0.0, command_us=0.0, us_per_local_byte=0.0)
        assert plan_us(plan, compute) == pytest.approx(steps / 1000), name
