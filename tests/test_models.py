"""Every model family, built with random weights, compiled and run, against onnxruntime.

Host-only placements for every family (and older opsets for a few), then heterogeneous placements
of a CNN and a transformer: npu-heavy (a big-SRAM npu behind a fast link) and co-processor-heavy (a
fast co-processor, no npu work), on the soc topology, every target built natively in one process.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import hetgen
from hetgen.models import BUILDERS, resnet, squeezenet, transformer_encoder
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session, random_inputs

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

# Compile time matters here, not kernel speed; the simulation only (tests/test_board.py runs boards).
FAST = {"opt": ("-O1",), "native_tuning": False, "native_only": True}
FAMILIES = [name for name in BUILDERS]
HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"

SOC_NPU_HEAVY = """
name: soc_npu
target:
  kind: aarch64
  runtime: vm
  devices:
    vdevice0:
      kind: accelerator-with-coprocessor
      link: {bandwidth_gbps: 64, latency_us: 0.5}
      host: {kind: riscv64, runtime: graph}
      devices:
        npu0: {kind: npu, sram_kib: 16384, macs_per_cycle: 1024, clock_mhz: 1000}
"""

SOC_COPROCESSOR_HEAVY = """
name: soc_cop
target:
  kind: aarch64
  runtime: aot
  figures: {peak_gflops: 1}
  devices:
    vdevice0:
      kind: accelerator-with-coprocessor
      link: {bandwidth_gbps: 64, latency_us: 0.1}
      host: {kind: riscv64, runtime: vm, figures: {peak_gflops: 500, bandwidth_gbps: 100}}
      devices:
        npu0: {kind: npu, sram_kib: 1, dma_gbps: 0.01}
"""


def check_against_onnxruntime(out, model_proto, rtol=1e-4, atol=1e-5):
    model = hetgen.load(out)
    session = ort_session(model_proto.SerializeToString())
    feeds = random_inputs(model.inputs, seed=7)
    got = model.run(feeds)
    expected = session.run(None, feeds)
    for info, wanted in zip(model.outputs, expected):
        np.testing.assert_allclose(got[info.name], wanted, rtol=rtol, atol=atol, err_msg=info.name)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_on_host_matches_onnxruntime(tmp_path, family):
    proto = BUILDERS[family]()
    out = hetgen.compile(load_platform_text(HOST), proto, out=tmp_path / family, **FAST)
    check_against_onnxruntime(out, proto)


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_resnet_at_older_opsets(tmp_path, opset):
    proto = resnet(opset=opset)
    out = hetgen.compile(load_platform_text(HOST), proto, out=tmp_path / f"r{opset}", **FAST)
    check_against_onnxruntime(out, proto)


def placed_targets(out) -> dict[str, int]:
    manifest = json.loads((out / "hetgen.json").read_text())
    return {t["path"]: t["kernels"] for t in manifest["targets"]}


def wide_transformer():
    """Wide enough that its projections pay for the npu's launch overhead and the link."""
    return transformer_encoder(seq=64, dim=128, ffn=256, layers=1)


@pytest.mark.parametrize("builder", [resnet, wide_transformer], ids=["resnet", "transformer"])
def test_npu_heavy_placement_matches_onnxruntime(tmp_path, builder):
    proto = builder()
    out = hetgen.compile(load_platform_text(SOC_NPU_HEAVY), proto, out=tmp_path / "npu", **FAST)
    kernels = placed_targets(out)
    assert kernels.get("soc_npu/vdevice0/npu0", 0) >= 3, kernels  # the convolutions / projections
    check_against_onnxruntime(out, proto)


@pytest.mark.parametrize(
    "builder", [resnet, transformer_encoder, squeezenet], ids=["resnet", "transformer", "squeezenet"]
)
def test_coprocessor_heavy_placement_matches_onnxruntime(tmp_path, builder):
    """squeezenet: its fire modules' Concats are views on the co-processor (hetgen/lower/views.py):
    its three 1x1 and three 3x3 expands write their ranges there, and the Concats run nothing."""
    proto = builder()
    out = hetgen.compile(load_platform_text(SOC_COPROCESSOR_HEAVY), proto, out=tmp_path / "cop", **FAST)
    kernels = placed_targets(out)
    assert kernels.get("soc_cop/vdevice0/host", 0) > kernels.get("soc_cop", 0), kernels
    if builder is squeezenet:
        coprocessor = (out / "soc_cop" / "vdevice0" / "host" / "model.c").read_text()
        assert "Concat" not in coprocessor and coprocessor.count("Conv") >= 6
    check_against_onnxruntime(out, proto)
