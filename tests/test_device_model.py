"""One machine model (issue 19, item 2): an accelerator kind declares its simulated device once, as
data (`device:` in its kind file, defaults in hetgen/platform/device_model.py), and one function,
`device_model(target)`, gives both the simulator's C configuration and the cost model's rates.

The defect this fixed: platforms/dual.yaml's `vecunit` declared `lanes: 32` and its figures used
them, but its generated simulator was configured with the npu's defaults (16 lanes, a 16 x 16
array), and the cost model knew nothing of its command overheads or its local memory's rate: its
groups simulated at 4.3x to 4.9x their estimate (1.25x on large tensors)."""

from __future__ import annotations

import json

import pytest

from hetgen.errors import PlatformError
from hetgen.platform.device_model import PARAMETERS, device_model
from hetgen.platform.loader import load_platform, load_platform_text
from hetgen.templates_dir import platforms_dir


def target(platform, path):
    return next(t for t in platform.root.walk() if t.path_str == path)


def test_the_npu_model_is_its_attributes():
    npu = target(load_platform(str(platforms_dir() / "dual.yaml")), "dual/npu0")
    model = device_model(npu)
    assert (model.clock_mhz, model.mac_rows, model.mac_cols, model.int8_mac_cols) == (800.0, 16, 16, 16)
    assert model.int8_mac_depth == 4  # its 1024 int8 MACs: 4 products a multiplier along the depth
    assert (model.vector_lanes, model.command_cycles, model.dma_setup_cycles, model.invoke_cycles) == (16, 64, 32, 1600)
    assert model.dma_bytes_per_cycle == 8 * 1e3 / 800 and model.sram_bytes_per_cycle == 64.0
    # the cost model's rates are the model's: the same numbers npu.yaml's formulas gave
    figures = npu.figures
    assert (figures.local_gbps, figures.command_us, figures.vector_gops) == (51.2, 0.06, 12.8)
    assert (figures.mac_rows, figures.mac_cols, figures.int8_mac_cols, figures.int8_mac_depth) == (16, 16, 16, 4)


def test_the_vecunit_is_simulated_with_its_own_lanes():
    vec = target(load_platform(str(platforms_dir() / "dual.yaml")), "dual/vec0")
    model = device_model(vec)
    assert (model.vector_lanes, model.mac_rows, model.mac_cols, model.clock_mhz) == (32, 1, 32, 1000.0)
    assert model.invoke_cycles == 1000  # its launch_us figure at its clock
    assert vec.figures.vector_gops == 32.0 and vec.figures.local_gbps == 64.0
    assert vec.figures.command_us == (64 + 32) / 2 / 1000


VEC = """
name: p
kinds:
  vec:
    role: accelerator
    attributes:
      lanes: {type: int, default: 8, minimum: 1}
    figures: {peak_gflops: 10, bandwidth_gbps: 10, launch_us: 1}
    memory: {local_bytes: 65536}
    device: {DEVICE}
    patterns:
      - {label: add, chain: [Add]}
target:
  kind: native
  devices:
    v0: {TARGET}
"""


def vec_platform(device: str, node: str = "{kind: vec}"):
    return load_platform_text(VEC.replace("{DEVICE}", device).replace("{TARGET}", node), "p.yaml")


def test_a_device_block_reads_the_targets_attributes_and_defaults_the_rest():
    v0 = target(vec_platform("{vector_lanes: lanes * 2, clock_mhz: 500}", "{kind: vec, lanes: 4}"), "p/v0")
    model = device_model(v0)
    assert (model.vector_lanes, model.clock_mhz) == (8, 500.0)
    assert model.mac_rows == PARAMETERS["mac_rows"].default and model.command_cycles == 64
    assert model.dma_bytes_per_cycle == 10 * 1e3 / 500  # dma_gbps: its bandwidth figure


def test_a_declared_figure_wins_over_the_models_rate():
    text = VEC.replace("launch_us: 1}", "launch_us: 1, local_gbps: 3}")
    text = text.replace("{DEVICE}", "{}").replace("{TARGET}", "{kind: vec}")
    assert target(load_platform_text(text, "p.yaml"), "p/v0").figures.local_gbps == 3


@pytest.mark.parametrize(
    ("device", "node", "message"),
    [
        ("{vector_lane: 4}", "{kind: vec}", r"p.yaml:10:14: unknown key 'vector_lane' .*did you mean 'vector_lanes'"),
        ("{vector_lanes: width}", "{kind: vec}", r"p.yaml:10:28: device parameter 'vector_lanes' of kind 'vec' uses width"),
        ("{vector_lanes: lanes - 8}", "{kind: vec}", r"p.yaml:16:9: device parameter 'vector_lanes' \(lanes - 8\) of target 'p/v0'.* is 0; its simulated device needs an integer from 1"),
        ("{clock_mhz: 0}", "{kind: vec}", r"'clock_mhz'\) of target 'p/v0' .*is 0.0|clock_mhz.* is 0; its simulated device needs a positive number"),
        ("4", "{kind: vec}", r"p.yaml:10:13: 'device' of kind 'vec' must be a mapping"),
    ],
)  # fmt: skip
def test_a_device_block_is_checked_where_it_is_written(device, node, message):
    with pytest.raises(PlatformError, match=message):
        vec_platform(device, node)


def test_only_accelerators_declare_a_device():
    text = """
name: p
kinds:
  core:
    refines: native
    device: {vector_lanes: 4}
target: {kind: core}
"""
    with pytest.raises(PlatformError, match=r"p.yaml:6:5: 'device' is not accepted on controller kind 'core'"):
        load_platform_text(text, "p.yaml")


def test_a_refinement_inherits_the_device_block_parameter_by_parameter():
    text = VEC.replace("{DEVICE}", "{vector_lanes: lanes, command_cycles: 10}").replace("{TARGET}", "{kind: wide}")
    text = text.replace("target:", "  wide:\n    refines: vec\n    device: {command_cycles: 20}\ntarget:")
    model = device_model(target(load_platform_text(text, "p.yaml"), "p/v0"))
    assert (model.vector_lanes, model.command_cycles) == (8, 20)


def test_targets_and_schema_show_the_device_model(cli):
    from hetgen.platform.describe import kinds_table

    targets = cli("targets")
    assert targets.returncode == 0, targets.stderr
    shown = targets.stdout
    # the npu's: its block's int8 dots, then its attributes
    assert "device: int8_mac_depth = int8_macs_per_cycle / macs_per_cycle, clock_mhz = clock_mhz, dma_gbps" in shown
    dual = load_platform(str(platforms_dir() / "dual.yaml"))
    table = kinds_table(dual.declared_kinds)
    assert (
        "device: vector_lanes = lanes, macs_per_cycle = lanes, mac_rows = 1, clock_mhz = clock_mhz; defaults:" in table
    )
    printed = cli("schema")
    assert printed.returncode == 0, printed.stderr
    schema = json.loads(printed.stdout)
    device = json.dumps(schema)
    for name in PARAMETERS:
        assert f'"{name}"' in device


def test_a_controller_drives_at_most_max_devices():
    """hg_coproc.c binds a co-processor's devices in arrays of HG_MAX_DEVICES: more is refused at load."""
    from hetgen.abi import MAX_DEVICES

    def platform(count: int) -> str:
        devices = "".join(f"\n      npu{i}: {{kind: npu}}" for i in range(count))
        return f"name: many\ntarget:\n  kind: aarch64\n  runtime: vm\n  devices:{devices}\n"

    assert len(load_platform_text(platform(MAX_DEVICES)).root.devices) == MAX_DEVICES
    with pytest.raises(PlatformError) as refused:
        load_platform_text(platform(MAX_DEVICES + 1))
    text = str(refused.value) + "".join(str(d) for d in getattr(refused.value, "diagnostics", ()))
    assert f"drives {MAX_DEVICES + 1} devices; a controller drives at most {MAX_DEVICES}" in text


def test_a_queued_dma_hides_its_setup_behind_the_reads_in_flight():
    """dma_outstanding_bytes: a DMA queued behind another hides min(setup, outstanding / rate)
    cycles of its setup (hetgen/platform/device_model.py), in the cost model's two-engine timeline
    as in hg_sim.c: the first DMA and one that waited for the compute engine pay it whole."""
    from hetgen.platform.device_model import hidden_setup_cycles
    from hetgen.spec.tiling import two_engine_us

    assert hidden_setup_cycles(500, 3072, 3.75) == 500  # 819 cycles of reads in flight: all of it
    assert hidden_setup_cycles(32, 128, 8.0) == 16  # 16 of 32
    assert hidden_setup_cycles(32, 0, 8.0) == 0
    # load, load queued behind it, compute after the second load, store after the compute
    steps = [(True, 0, 10.0, 5.0), (True, 0, 10.0, 5.0), (False, 1, 20.0, 1.0), (True, 1, 10.0, 5.0)]
    assert two_engine_us(steps) == 15 + 15 + 21 + 15
    assert two_engine_us(steps, 5.0) == 15 + 10 + 21 + 15  # only the second is queued
    assert two_engine_us(steps, 8.0) == 15 + 10 + 21 + 15  # never below no overhead
