"""Cascades built and simulated (issue 21, item 4): a 3x3 convolution, a depthwise 3x3 and a 1x1
convolution on a 32 x 32 map, pinned to the npu with 24 KiB of SRAM (its 32 KiB activations do not fit), so that the price chooses to
run them stripe by stripe as one cascade. `place` claims it, lowering emits its command list
(hetgen/spec/cascade_program.py) as one invocation, the simulator runs it (its SRAM-to-SRAM MOVEs
included) and the result is onnxruntime's: float within tolerance, int8 QDQ bit for bit. The
simulator's DMA byte counter, which counts what each command asks, is the cascade's predicted DMA;
with `options: {cascade: false}` the same layers run layer by layer, three invocations that move
more bytes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hetgen
from hetgen.frontend import import_model
from hetgen.models.quantized import quantized
from hetgen.partition import explain_text, place
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session
from hetgen.spec.invocation import group_plans
from partition_fixtures import cascade_chain_model

ROOT = Path(__file__).resolve().parent.parent
SOC = (ROOT / "platforms" / "soc.yaml").read_text()
NPU = "soc/vdevice0/npu0"

pytestmark = pytest.mark.cc


def _platform(cascade: bool):
    text = SOC.replace("sram_kib: 512", "sram_kib: 24")
    return load_platform_text(text + ("" if cascade else "options: {cascade: false}\n"), file="soc.yaml")


def _pins(graph):
    return {n.name: NPU for n in graph.nodes if "Conv" in n.op}


@pytest.fixture(scope="module", params=["float", "int8"])
def built(request, tmp_path_factory):
    model = cascade_chain_model() if request.param == "float" else quantized(cascade_chain_model(), per_channel=True)
    graph = import_model(model)
    pins = _pins(graph)
    outs = {}
    for cascade in (True, False):
        outs[cascade] = hetgen.compile(
            _platform(cascade), model, out=tmp_path_factory.mktemp(f"{request.param}{cascade}") / "g",
            pins=pins, native_only=True, opt=("-O1",),
        )  # fmt: skip
    placements = {cascade: place(graph, _platform(cascade), pins=pins) for cascade in (True, False)}
    return request.param, model, graph, outs, placements


def _run(out, model, exact: bool):
    loaded = hetgen.load(out)
    rng = np.random.default_rng(3)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in loaded.inputs}
    got = loaded.run(feeds)
    for info, want in zip(loaded.outputs, ort_session(model.SerializeToString()).run(None, feeds)):
        if exact:
            np.testing.assert_array_equal(got[info.name], want)
        else:
            np.testing.assert_allclose(got[info.name], want, rtol=1e-4, atol=1e-4)
    return loaded


def _npu_stats(out, loaded):
    manifest = json.loads((out / "hetgen.json").read_text())
    (npu,) = [t for t in manifest["targets"] if t["path"] == NPU]
    return npu, loaded.device_stats(npu["stats_device"])


def test_the_chain_is_claimed_as_one_cascade(built):
    _, _, graph, _, placements = built
    on, off = placements[True], placements[False]
    (cascade,) = on.cascades
    assert len(cascade.groups) == 3 and off.cascades == ()
    assert cascade.dma_bytes < cascade.layer_dma_bytes and cascade.cost_us < cascade.layer_us
    # priced as the program runs it: the cascade's price on its first group, the others' in it
    costs = {g.name: g.cost_us for g in on.groups}
    assert costs[cascade.groups[0]] == cascade.cost_us
    assert all(costs[name] == 0.0 for name in cascade.groups[1:])
    assert on.total_us < off.total_us
    text = explain_text(on, graph)
    assert f"{', '.join(cascade.groups)} on {NPU}: {cascade.stripes} stripe" in text
    assert "cascades (" not in explain_text(off, graph)


def test_the_cascade_computes_what_onnxruntime_does(built):
    kind, model, _, outs, _ = built
    for out in outs.values():
        _run(out, model, exact=kind == "int8")


def test_the_simulator_runs_one_invocation_and_counts_the_predicted_dma(built):
    kind, model, graph, outs, placements = built
    (cascade,) = placements[True].cascades
    npu, stats = _npu_stats(outs[True], _run(outs[True], model, exact=kind == "int8"))
    assert stats["invocations"] == 1
    assert stats["dma_bytes"] == cascade.dma_bytes
    assert any(counter["what"] == "move" for counter in npu["counters"])
    source = next(outs[True].rglob("npu0/model.c")).read_text()
    assert "HG_SIM_MOVE" in source
    # layer by layer: three invocations, each its tile plan's DMA, more bytes in all
    off = placements[False]
    npu_off, stats_off = _npu_stats(outs[False], _run(outs[False], model, exact=kind == "int8"))
    nodes = {n.name: n for n in graph.nodes}
    platform = _platform(False)
    target = next(t for t in platform.targets() if t.path_str == NPU)
    planned = sum(
        plan.dma_bytes
        for g in off.groups
        if g.target == NPU
        for plan in group_plans([nodes[n] for n in g.nodes], graph, target, off.kernels)
    )
    assert stats_off["invocations"] == 3
    assert stats_off["dma_bytes"] == planned == cascade.layer_dma_bytes > stats["dma_bytes"]
    assert not any(counter["what"] == "move" for counter in npu_off["counters"])


def test_estimate_and_simulation_agree(built):
    """The placement's total is `hetgen bench`'s estimate; the simulated cascade is within 25 % of it."""
    _, _, _, outs, placements = built
    manifest = json.loads((outs[True] / "hetgen.json").read_text())
    assert manifest["estimate_us"] == pytest.approx(placements[True].total_us, rel=1e-9)
    from hetgen.runtime.devices import simulation_report

    report = simulation_report(outs[True])
    assert report.makespan_us == pytest.approx(placements[True].total_us, rel=0.25)
