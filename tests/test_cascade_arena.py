"""A cascade's inner tensors get no slot in its device's arena (hetgen/spec/schedule.py
`Scheduler.cascade_inner`): its command list (hetgen/spec/cascade_program.py) keeps them as rolling
stripes in the device's SRAM and never writes them to its memory, so the schedule's calls do not
name them and the memory planner never sees them. The arena holds only the tensors the device's
invocations read from or write to its memory, planned by liveness."""

from __future__ import annotations

from pathlib import Path

from hetgen.frontend import import_model
from hetgen.lower import lower
from hetgen.partition import place
from hetgen.partition.cascades import cascade_units
from hetgen.platform.loader import load_platform_text
from hetgen.spec.cascade_program import Kind, cascade_program
from partition_fixtures import cascade_chain_model

ROOT = Path(__file__).resolve().parent.parent
NPU = "soc/vdevice0/npu0"


def _lowered(sram_kib: int, options: str = ""):
    text = (ROOT / "platforms" / "soc.yaml").read_text().replace("sram_kib: 512", f"sram_kib: {sram_kib}") + options
    platform = load_platform_text(text, file="soc.yaml")
    graph = import_model(cascade_chain_model())
    pins = {n.name: NPU for n in graph.nodes if "Conv" in n.op}
    placement = place(graph, platform, pins=pins)
    lowered = lower(graph, platform, placement)
    (device,) = [p for p in lowered.programs if p.target.path_str == NPU]
    return graph, platform, placement, device


def test_a_cascades_inner_tensors_have_no_arena_slot():
    graph, platform, placement, device = _lowered(16)
    assert placement.cascades, "16 KiB of SRAM: the chain's price chooses a cascade"
    planned = {name for name, _, _ in device.memory.buffers}
    nbytes = {name: graph.types[name].nbytes for name in graph.types}
    inner = set()
    for cascade in placement.cascades:
        ops, layers, names = cascade_units(cascade, placement, graph, platform)
        program = cascade_program(ops, layers, cascade.stripe)
        between = {positions["out0"] for positions in names[:-1]}
        assert between and not between & planned  # no slot for what passes between its layers
        # its command list never reads or writes them in device memory: only its first layer's
        # input, its last layer's output and the weights move by DMA
        dma = {(c.layer, c.tensor) for c in program.commands if c.kind in (Kind.LOAD, Kind.STORE) and not c.weights}
        assert {names[layer][position] for layer, position in dma} <= {names[0]["in0"], names[-1]["out0"]}
        assert names[0]["in0"] in planned and names[-1]["out0"] in planned
        inner |= between
    # the arena: the SRAM, the emulating kernels' workspace, then the outer tensors planned by
    # liveness. Every invocation of the chain holds its input and its output, so the activations'
    # arena is the larger of those pairs, with nothing of the cascade's inner maps
    activations = device.memory.arena_size - device.sram_size - device.emulation_scratch
    assert activations == device.memory.lower_bound - device.sram_size - device.emulation_scratch
    outer = sorted(planned)
    assert set(outer) == {"input", "relu", "conv_2"} and inner == {"relu_1"}
    assert activations == max(nbytes["input"] + nbytes["relu"], nbytes["relu"] + nbytes["conv_2"]) == 48 * 1024
    assert device.memory.total_bytes - device.sram_size - device.emulation_scratch == sum(nbytes[n] for n in outer)


def test_without_a_cascade_every_tensor_has_its_slot():
    """The same chain layer by layer (`options: {cascade: false}`): each map between the layers
    lives in the arena: the depthwise layer's input and output (32 + 32 KiB) are its peak, more than
    the cascade's 48 KiB."""
    graph, _, placement, device = _lowered(16, "options: {cascade: false}\n")
    assert not placement.cascades
    planned = {name for name, _, _ in device.memory.buffers}
    assert {"relu", "relu_1"} <= planned
    activations = device.memory.arena_size - device.sram_size - device.emulation_scratch
    assert activations == graph.types["relu"].nbytes + graph.types["relu_1"].nbytes == 64 * 1024


def test_a_cascades_weights_load_at_the_weights_rate():
    """Its constants' LOADs are marked as weights and priced at the weights' DMA rate where the
    device has one (Vela's Shared_Sram): slower weights make the cascade slower, by no more than
    their extra DMA time; its other DMAs keep the arena's rate."""
    from dataclasses import replace

    from hetgen.spec.cascade_program import program_us

    graph, platform, placement, _ = _lowered(16)
    (cascade,) = placement.cascades
    ops, layers, _ = cascade_units(cascade, placement, graph, platform)
    program = cascade_program(ops, layers, cascade.stripe)
    weight_loads = [c for c in program.commands if c.weights]
    assert weight_loads and all(c.kind is Kind.LOAD for c in weight_loads)
    assert {c.tensor for c in weight_loads} >= {"in1"}  # the weights' position
    rates = layers[0].rates
    slow = replace(rates, us_per_weight_byte=8 * rates.us_per_byte, weight_setup_us=0.1)
    slowed = [replace(layer, rates=slow) for layer in layers]
    extra = sum(c.nbytes for c in weight_loads) * 7 * rates.us_per_byte + len(weight_loads) * 0.1
    assert 0 < program_us(program, slowed) - program_us(program, layers) <= extra + 1e-9


def test_the_stripe_height_spends_sram_only_where_it_pays():
    """Of the stripe heights that fit, the chosen one has the least SRAM among those within
    SRAM_TOLERANCE (1 %) of the fastest estimate: no height at most that slow takes less."""
    from hetgen.spec.cascade import SRAM_TOLERANCE, _estimate_us, _sram, cascade_plan, move_bytes, stripe_steps

    graph, platform, placement, _ = _lowered(512)  # room for every stripe height
    (cascade,) = placement.cascades
    _, layers, _ = cascade_units(cascade, placement, graph, platform)
    capacity = 512 * 1024
    first, last = layers[0], layers[-1]
    io = last.out_shape[1] * last.out_row_bytes
    heights = {}
    for stripe in range(1, last.out_shape[1] + 1):
        program = stripe_steps(layers, stripe)
        sram = _sram(layers, program)[0]
        loaded = sum(s.new_rows for steps in program for s in steps if not s.layer) * first.in_row_bytes
        weights = sum(layer.weight_bytes for layer in layers)
        heights[stripe] = (sram, _estimate_us(layers, program, (weights, loaded + io), move_bytes(layers, program)))
    plan = cascade_plan(layers, capacity)
    fastest = min(us for _, us in heights.values())
    good = {s: sram for s, (sram, us) in heights.items() if us <= fastest * (1 + SRAM_TOLERANCE)}
    assert plan.stripe in good and plan.sram_bytes == min(good.values())
