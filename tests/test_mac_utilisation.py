"""The npu's cost model prices each MAC-array tile at the share of the array its shape keeps busy
(issue 8, item 3). The simulated array (templates/runtime/hg_sim.c) takes ceil(m/mac_rows) *
ceil(n/mac_cols) * k steps for a product of m x n outputs over a depth of k, so a tile with fewer
output channels than the array has columns leaves cells idle; the estimate now says so, from the
kind's mac_rows / mac_cols figures (a kind without them keeps full utilisation)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench_support import bench_json
from hetgen.frontend import import_model
from hetgen.platform.loader import load_platform_text
from hetgen.spec import build_kernel_specs
from hetgen.spec.invocation import group_plans, tile_rates
from hetgen.spec.tiling import Rates, TilePlan, mac_utilisation, plan_us

# The npu as docs/simulator.md describes it: 16 x 16 MACs at 1000 MHz (512 GFLOP/s).
PLATFORM = """
name: mu
target:
  kind: native
  runtime: vm
  devices:
    npu0:
      kind: npu
      macs_per_cycle: 256
      mac_rows: 16
      clock_mhz: 1000
      sram_kib: {sram_kib}
      link: {{bandwidth_gbps: 8, latency_us: 5}}
"""
NPU = "mu/npu0"

# A YAML-declared kind without the array's shape among its figures: priced as before.
SHAPELESS = """
name: plain
kinds:
  acc:
    role: accelerator
    doc: An accelerator whose figures say nothing of a MAC array's shape.
    attributes:
      sram_kib: {type: int, default: 512, minimum: 1, doc: "Local memory in KiB."}
    figures: {peak_gflops: 512, bandwidth_gbps: 8, launch_us: 2, command_us: 0.05}
    memory: {local_bytes: "sram_kib * 1024"}
    patterns:
      - {label: conv2d, chain: [Conv], where: {dtype: float32, fits_memory: true}, efficiency: 1.0}
target:
  kind: native
  runtime: vm
  devices:
    acc0: {kind: acc, link: {bandwidth_gbps: 8, latency_us: 5}}
"""


def _npu(platform, path=NPU):
    return next(t for t in platform.targets() if t.path_str == path)


def conv(out_channels: int, channels: int = 64, size: int = 16, kernel: int = 5, group: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(
        (rng.standard_normal((out_channels, channels // group, kernel, kernel)) * 0.1).astype(np.float32), "w"
    )
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[kernel // 2] * 4, group=group)
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_channels, size, size])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _plan(model, platform_text, path=NPU, sram_kib=512):
    platform = load_platform_text(
        platform_text.format(sram_kib=sram_kib) if "{sram_kib}" in platform_text else platform_text
    )
    graph = import_model(model)
    target = _npu(platform, path)
    (plan,) = group_plans(list(graph.nodes), graph, target, build_kernel_specs(graph, platform))
    assert isinstance(plan, TilePlan)
    return plan, target


def test_the_figures_carry_the_arrays_shape_from_its_attributes():
    platform = load_platform_text(PLATFORM.format(sram_kib=512))
    figures = _npu(platform).figures
    assert (figures.mac_rows, figures.mac_cols, figures.int8_mac_cols, figures.int8_mac_depth) == (16, 16, 16, 4)
    rates = tile_rates(_npu(platform), 1.0)
    assert (rates.mac_rows, rates.mac_cols) == (16, 16)


def test_utilisation_by_hand():
    rates = Rates(1.0, 1.0, mac_rows=16, mac_cols=16)
    assert mac_utilisation([(1, 1, 256, 2)], rates) == pytest.approx(2 / 16)  # 2 output channels of 16 columns
    assert mac_utilisation([(1, 1, 256, 16)], rates) == 1.0
    assert mac_utilisation([(1, 1, 20, 16)], rates) == pytest.approx(20 / 32)  # 20 output pixels: 2 row steps
    # a depthwise conv: one output channel a group, 32 groups of 256 pixels
    assert mac_utilisation([(1, 32, 256, 1)], rates) == pytest.approx(1 / 16)
    # tiles of two shapes weigh by their work: 3 full tiles and one of 8 channels
    assert mac_utilisation([(3, 1, 256, 16), (1, 1, 256, 8)], rates) == pytest.approx((3 * 16 + 8) / (4 * 16))
    assert mac_utilisation([(1, 1, 256, 2)], Rates(1.0, 1.0)) == 1.0  # no shape: not modelled
    assert mac_utilisation([], rates) == 1.0  # the vector unit's work


def test_a_two_channel_conv_tile_is_priced_at_two_sixteenths_of_the_array():
    """Conv 64 -> 2 channels, 5 x 5, 16 x 16 pixels: each tile's product has n = 2 output channels
    of the 16 columns and a multiple of 16 output pixels (full rows), so the array works at 2/16:
    with DMA and commands free, the plan takes 8 times its flops at the array's peak (3.2 us of
    1.6 MFLOP at 512 GFLOP/s: 25.6 us)."""
    plan, npu = _plan(conv(2), PLATFORM)
    rates = tile_rates(npu, 1.0)
    for products in plan.mac_products:
        ((_, batch, m, n),) = products
        assert (batch, n, m % 16) == (1, 2, 0)
        assert mac_utilisation(products, rates) == pytest.approx(2 / 16)
    flops = sum(tile.flops for tile in plan.tiles)
    assert flops == 2 * 256 * 2 * 64 * 25
    compute_only = dataclasses.replace(rates, us_per_byte=0.0, command_us=0.0, us_per_local_byte=0.0)
    assert plan_us(plan, compute_only) == pytest.approx(8 * flops / 512e3)
    blind = dataclasses.replace(compute_only, mac_rows=0, mac_cols=0)
    assert plan_us(plan, blind) == pytest.approx(flops / 512e3)


def test_a_depthwise_conv_is_priced_at_one_column_of_sixteen():
    plan, npu = _plan(conv(32, channels=32, kernel=3, group=32), PLATFORM)
    rates = tile_rates(npu, 1.0)
    for products in plan.mac_products:
        assert mac_utilisation(products, rates) == pytest.approx(1 / 16)


def test_the_tiling_search_prefers_tiles_that_keep_the_array_busy():
    """Conv 512 -> 512 channels, 3 x 3, on 14 x 14 (ResNet-18 at 224, last stage) in 512 KiB: blind to the
    array's shape the cheapest fit is 8 output channels a tile (half the 16 columns idle); priced
    with the shape, the search keeps whole columns busy."""
    model = conv(512, channels=512, size=14, kernel=3)
    platform = load_platform_text(PLATFORM.format(sram_kib=512))
    graph = import_model(model)
    npu = _npu(platform)
    from hetgen.spec.tiling import unit_plan

    rates = tile_rates(npu, 1.0, list(graph.nodes))
    shaped = unit_plan(list(graph.nodes), graph, (), npu.memory_bytes, rates)
    blind = unit_plan(
        list(graph.nodes), graph, (), npu.memory_bytes, dataclasses.replace(rates, mac_rows=0, mac_cols=0)
    )
    assert isinstance(shaped, TilePlan) and isinstance(blind, TilePlan)
    assert blind.tile_shape[1] % 16 != 0  # what the search picked before the array's shape was priced
    assert shaped.tile_shape[1] % 16 == 0
    assert plan_us(shaped, rates) < plan_us(blind, rates)


def test_a_kind_without_the_arrays_shape_is_priced_with_its_device_models_array():
    """A YAML kind whose figures say nothing of a MAC array is simulated with its device model's
    (the defaults: 16 x 16, hetgen/platform/device_model.py), so it is priced with that array too
    (issue 19: one machine model; it used to be priced at full utilisation while its simulator
    counted the idle columns)."""
    platform = load_platform_text(SHAPELESS)
    acc = _npu(platform, "plain/acc0")
    assert (acc.figures.mac_rows, acc.figures.mac_cols) == (16, 16)
    assert acc.figures.command_us == 0.05  # a figure the kind declares stays the kind's
    rates = tile_rates(acc, 1.0)
    assert (rates.mac_rows, rates.mac_cols) == (16, 16)
    plan, _ = _plan(conv(2), SHAPELESS, "plain/acc0")
    assert mac_utilisation(plan.mac_products[0], rates) == pytest.approx(2 / 16)


@pytest.mark.cc
@pytest.mark.parametrize(
    "what, model",
    [
        ("depthwise", lambda: conv(64, channels=64, size=56, kernel=3, group=64)),
        ("two channels", lambda: conv(2, channels=64, size=32, kernel=5)),
    ],
)
def test_the_simulator_agrees_with_the_priced_utilisation(tmp_path, what, model):
    """Per group, estimate and simulation agree within 5 % where the array is mostly idle: a
    depthwise conv (1/16 busy; its efficiency 1.0, so the loss is not counted twice) and a
    2-output-channel conv (2/16). Before the utilisation was priced they simulated at 1.36x and 2.6x."""

    import hetgen

    onnx_model = model()
    platform = load_platform_text(PLATFORM.format(sram_kib=512))
    out = hetgen.compile(platform, onnx_model, out=tmp_path / "g", pins={"conv": NPU}, native_only=True, opt=("-O2",))
    document = bench_json(out)
    (group,) = [g for g in document["groups"] if g["target"] == NPU]
    assert group["simulated_us"] == pytest.approx(group["estimate_us"], rel=0.05), what


def test_a_mac_array_figure_must_be_positive():
    from hetgen.errors import HetgenError

    text = PLATFORM.format(sram_kib=512).replace(
        "      sram_kib: 512\n", "      sram_kib: 512\n      figures: {mac_cols: 0}\n"
    )
    with pytest.raises(HetgenError, match="figure 'mac_cols' of .* is 0; it must be positive"):
        load_platform_text(text)


def test_the_output_stage_bounds_a_tile_that_does_few_macs_an_output():
    """A device model's output_cycles_per_element (the Ethos-U kinds': docs/ethos-u.md) bounds each
    MAC tile at its outputs x that many cycles, overlapped with the array: a 64 -> 2 channel 5 x 5
    conv does 1600 MACs an output, so 4 cycles an output hide under the array; 100 do not."""
    plan, npu = _plan(conv(2), PLATFORM)
    rates = dataclasses.replace(tile_rates(npu, 1.0), us_per_byte=0.0, command_us=0.0, us_per_local_byte=0.0)
    outputs = sum(batch * m * n for tile in plan.tiles for (_, batch, m, n) in plan.mac_products[tile.kernel])
    assert outputs == 2 * 16 * 16
    array = plan_us(plan, rates)
    assert plan_us(plan, dataclasses.replace(rates, us_per_output_element=4 / 1000)) == pytest.approx(array)
    slow = dataclasses.replace(rates, us_per_output_element=100 / 1000)
    assert plan_us(plan, slow) == pytest.approx(outputs * 100 / 1000)
