"""Cascades on a tiled accelerator (hetgen/spec/cascade.py, hetgen/partition/cascades.py): the
stripe heights and rolling buffers of a hand-checked chain, its SRAM and DMA bytes, the choice by
price (which flips with the SRAM size), the platform option that turns it off, and explain."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hetgen.abi import WAIT_RING
from hetgen.frontend import import_model
from hetgen.models import cnn
from hetgen.models.quantized import quantized
from hetgen.partition import explain_json, explain_text, place
from hetgen.partition.cascades import cascade_units, choose_cascades, claimed, sram_peak, with_cascades
from hetgen.platform.loader import load_platform_text
from hetgen.spec.cascade import SRAM_TOLERANCE, Layer, cascade_plan, cascade_sram, move_bytes, stripe_rows, stripe_steps
from hetgen.spec.cascade_program import Kind, cascade_program
from hetgen.spec.tiling import Rates
from partition_fixtures import cascade_chain_model

ROOT = Path(__file__).resolve().parent.parent

# a 3x3 convolution (8 -> 16 channels, 16x16, pad 1), a depthwise 3x3 of stride 2 (pad 1) to 8x8,
# a 1x1 convolution (16 -> 8 channels); float32
A = Layer("a", (8, 16, 16), (16, 16, 16), 4, 4, 3, 1, 1, 1, 1000, 2 * 16 * 16 * 16 * 8 * 9, 1)
B = Layer("b", (16, 16, 16), (16, 8, 8), 4, 4, 3, 2, 1, 1, 200, 2 * 16 * 8 * 8 * 9, 16)
C = Layer("c", (16, 8, 8), (8, 8, 8), 4, 4, 1, 1, 1, 0, 300, 2 * 8 * 8 * 8 * 16, 1)


def test_stripes_by_hand():
    # Two rows of c a stripe (4 stripes). Stripe 0: c's rows 0-1 read b's rows 0-1; b's rows 0-1
    # read a's rows -1..3 (0-3); a's rows 0-3 read input rows -1..4 (0-4). Stripe 1: c reads b's
    # 2-3; b's 2-3 read a's 3..7 (5 rows: row 3 kept, 4-7 new); a computes 4-7 from input rows
    # 3..8 (6 rows: 3-4 kept, 5-8 loaded). Stripes 2 and 3 alike, the last clipped at row 15.
    rows, windows = stripe_rows([A, B, C], 2)
    assert rows == (4, 2, 2)
    assert windows == (6, 5, 2)
    program = stripe_steps([A, B, C], 2)
    assert [[(s.layer, s.in_lo, s.in_hi, s.kept, s.out_first, s.out_end) for s in steps] for steps in program] == [
        [(0, 0, 4, 0, 0, 4), (1, 0, 3, 0, 0, 2), (2, 0, 1, 0, 0, 2)],
        [(0, 3, 8, 2, 4, 8), (1, 3, 7, 1, 2, 4), (2, 2, 3, 0, 2, 4)],
        [(0, 7, 12, 2, 8, 12), (1, 7, 11, 1, 4, 6), (2, 4, 5, 0, 4, 6)],
        [(0, 11, 15, 2, 12, 16), (1, 11, 15, 1, 6, 8), (2, 6, 7, 0, 6, 8)],
    ]
    # pads: the first stripe's windows start above row 0; the last's a ends below row 15 (b's
    # stride-2 windows end on it)
    assert [(s.pad_top, s.pad_bottom) for s in program[0]] == [(1, 0), (1, 0), (0, 0)]
    assert [(s.pad_top, s.pad_bottom) for s in program[-1]] == [(0, 1), (0, 0), (0, 0)]
    # b's new rows start at row 0 of a's output stripe; a's at its input row 5 (loaded by DMA)
    assert program[1][1].source_row == 0 and program[1][0].source_row == 5
    # SRAM: the windows (a: 6 rows x 8 channels x 16 x 4 B, b: 5 x 16 x 16 x 4 B, c: 2 x 16 x 8 x
    # 4 B), a's and b's output stripes (4 x 16 x 16 x 4 B, 2 x 16 x 8 x 4 B), c's output stripe
    # twice (stored while the next computes: 2 x 8 x 8 x 4 B) and the weights, each aligned to 64 B
    assert cascade_sram([A, B, C], 2) == (
        6 * 512 + 5 * 1024 + 2 * 512 + 4 * 1024 + 2 * 512 + 2 * (2 * 256) + 1024 + 256 + 320
    )
    # moves: a keeps 2 rows in 3 stripes (512 B each), b keeps 1 row in 3 and takes 4 new a stripe
    # (1024 B each), c takes 2 new a stripe (512 B each)
    assert move_bytes([A, B, C], program) == 6 * 512 + (3 + 16) * 1024 + 8 * 512
    # one stripe of everything: whole tensors, no halo left to keep, nothing kept
    assert stripe_rows([A, B, C], 8) == ((16, 8, 8), (16, 16, 8))
    assert all(step.kept == 0 for steps in stripe_steps([A, B, C], 8) for step in steps)


def test_one_row_stripes_keep_only_the_windows():
    rows, windows = stripe_rows([A, B, C], 1)
    assert rows == (2, 1, 1)
    assert windows == (4, 3, 1)  # a 3-row window of 2-row output, b's 3x3 window, c's 1x1


def test_dma_is_the_first_input_the_last_output_and_the_weights():
    plan = cascade_plan([A, B, C], 1 << 20)
    assert plan is not None and plan.layers == ("a", "b", "c")
    assert plan.input_bytes == 8 * 16 * 16 * 4
    assert plan.output_bytes == 8 * 8 * 8 * 4
    assert plan.dma_bytes == 8 * 16 * 16 * 4 + 8 * 8 * 8 * 4 + 1500


def test_the_stripe_height_is_the_cheapest_that_fits():
    rates = Rates(us_per_flop=1e-6, us_per_byte=1e-4, command_us=0.5)
    layers = [Layer(**{**layer.__dict__, "rates": rates}) for layer in (A, B, C)]
    plan = cascade_plan(layers, 1 << 20)
    assert plan.stripe == 8 and plan.stripes == 1  # per-command overhead: fewest stripes when it all fits
    smallest = cascade_sram(layers, 1)
    tight = cascade_plan(layers, cascade_sram(layers, 2))
    assert tight.stripe == 2 and tight.sram_bytes <= cascade_sram(layers, 2)
    assert cascade_plan(layers, smallest - 1) is None
    assert cascade_plan(layers[:1], 1 << 20) is None  # one layer is no cascade
    assert cascade_plan([layers[0], layers[2]], 1 << 20) is None  # c does not read a's output


SOC = (ROOT / "platforms" / "soc.yaml").read_text()


def _soc(sram_kib: int = 512, options: str = ""):
    text = SOC.replace("sram_kib: 512", f"sram_kib: {sram_kib}") + options
    return load_platform_text(text, file="soc.yaml")


@pytest.fixture(scope="module")
def mobilenet():
    return import_model(cnn.mobilenet_v2(size=32))


def _chosen(graph, platform):
    """The placement with the cascades its price chooses (`place` claims them)."""
    return place(graph, platform)


def test_a_placement_claims_its_cascades_priced_as_one_invocation(mobilenet):
    # One truth: lowering runs each cascade as one invocation of its command list, so `place`
    # claims them: each cascade's price on its first group, its other groups nothing of their own,
    # the total the makespan of that program; claiming again changes nothing
    platform = _soc()
    placement = place(mobilenet, platform)
    assert placement.cascades
    assert "cascades (" in explain_text(placement, mobilenet)
    assert with_cascades(placement, mobilenet, platform) is placement
    costs = {g.name: g.cost_us for g in placement.groups}
    for cascade in placement.cascades:
        assert costs[cascade.groups[0]] == cascade.cost_us
        assert all(costs[name] == 0.0 for name in cascade.groups[1:])
    off = place(mobilenet, _soc(options="options: {cascade: false}\n"))
    assert placement.total_us < off.total_us
    saved = sum(c.layer_us - c.cost_us for c in placement.cascades)
    assert off.total_us - placement.total_us == pytest.approx(saved, rel=1e-6)


def test_chains_stop_at_fan_out_and_are_chosen_by_price(mobilenet):
    placement = _chosen(mobilenet, _soc())
    assert placement.cascades
    readers = mobilenet.consumers()
    groups = {g.name: g for g in placement.groups}
    for cascade in placement.cascades:
        assert cascade.cost_us < cascade.layer_us
        assert cascade.dma_bytes < cascade.layer_dma_bytes
        assert cascade.sram_bytes <= 512 * 1024
        for name in cascade.groups[:-1]:  # every output inside a cascade has one reader
            last = mobilenet.node(groups[name].nodes[-1])
            assert len(readers[last.outputs[0]]) == 1
    # the stem's output feeds the first block's residual Add as well: no cascade starts before it
    assert all("g0" not in cascade.groups for cascade in placement.cascades)


def test_the_choice_flips_with_the_sram(mobilenet):
    def cascaded(kib):
        placement = _chosen(mobilenet, _soc(kib))
        assert all(c.sram_bytes <= kib * 1024 for c in placement.cascades)
        assert sum(g.target.endswith("npu0") for g in placement.groups) == 16  # the same groups on the npu
        return {name for c in placement.cascades for name in c.groups}

    # in 16 KiB only the first block's depthwise and projection fit a cascade; in 48 KiB the second
    # block's expansion, depthwise and projection join them; in 8 KiB nothing runs on the npu
    assert "g3" not in cascaded(16) and "g1" in cascaded(16)
    assert {"g1", "g2", "g3", "g4", "g5"} <= cascaded(48)
    assert _chosen(mobilenet, _soc(8)).cascades == ()


def test_cascades_spend_the_cache_only_where_it_pays():
    # ResNet-8 on the Ethos-U65 (Dedicated_Sram: the npu's SRAM is the 384 KiB arena cache, which
    # the price does not weigh): the cut of least price cascades conv_3 and conv_4 at 15-row stripes
    # in 63,104 bytes; of the cuts within SRAM_TOLERANCE of it, the one shipped takes the least SRAM
    # (that cascade at 8-row stripes, 42,112 bytes, and conv_1 + conv_2 as one in 48,512: its peak
    # 49,536 bytes is the add's tile plan, which no cut changes)
    from hetgen.models.mlperf_tiny import resnet8

    text = (ROOT / "platforms" / "ethos-u65.yaml").read_text()
    platform = load_platform_text(text, file="ethos-u65.yaml")
    graph = import_model(quantized(resnet8(softmax=False), per_channel=True))
    placement = place(graph, platform)
    off = place(graph, load_platform_text(text + "options: {cascade: false}\n", file="ethos-u65.yaml"))
    fastest = claimed(off, choose_cascades(off, graph, platform), graph, platform)
    limit = fastest.total_us * (1 + SRAM_TOLERANCE)
    assert placement.total_us <= limit
    peak = sram_peak(placement, graph, platform)
    assert peak < sram_peak(fastest, graph, platform)
    assert peak == max([c.sram_bytes for c in placement.cascades] + [sram_peak(off, graph, platform)])
    # the least: capping the cascades below it is slower than the tolerance or lowers nothing
    capped = choose_cascades(off, graph, platform, cap=peak - 1)
    trial = claimed(off, capped, graph, platform) if capped else off
    assert trial.total_us > limit or sram_peak(trial, graph, platform) >= peak


def test_the_option_turns_cascades_off(mobilenet):
    on = _chosen(mobilenet, _soc(options="options: {cascade: true}\n"))
    off = _chosen(mobilenet, _soc(options="options: {cascade: false}\n"))
    assert on.cascades and off.cascades == ()
    assert [g.target for g in on.groups] == [g.target for g in off.groups]


def test_explain_lists_the_cascades(mobilenet):
    placement = _chosen(mobilenet, _soc())
    text = explain_text(placement, mobilenet)
    first = placement.cascades[0]
    assert "cascades (" in text
    assert f"{', '.join(first.groups)} on soc/vdevice0/npu0: {first.stripes} stripe" in text
    document = json.loads(json.dumps(explain_json(placement, mobilenet)))
    assert [c["groups"] for c in document["cascades"]] == [list(c.groups) for c in placement.cascades]
    assert document["cascades"][0]["saved_bytes"] == first.layer_dma_bytes - first.dma_bytes


# ---------------------------------------------------------------------------------------------
# The stripes computed: a numpy run of a chain, stripe by stripe, where each layer's input rows
# live in a buffer of exactly the rows stripe_rows gives it (the oldest row dropped when a new one
# does not fit) must reach the same output as the layers run whole.


def _conv_rows(rows_of, x_shape, weight, stride, pad, groups, r0, r1):
    """Output rows r0..r1-1 of a convolution (square kernel, stride and pad) reading input rows
    through `rows_of(row)` (a (C, W) array; rows outside the input are zero padding)."""
    c_in, height, width = x_shape
    c_out, c_group, k, _ = weight.shape
    out_w = (width + 2 * pad - k) // stride + 1
    out = np.zeros((c_out, r1 - r0, out_w))
    for r in range(r0, r1):
        window = np.stack(
            [
                rows_of(i) if 0 <= i < height else np.zeros((c_in, width))
                for i in range(r * stride - pad, r * stride - pad + k)
            ],
            axis=1,
        )  # (C, k, W)
        window = np.pad(window, ((0, 0), (0, 0), (pad, pad)))
        taps = np.lib.stride_tricks.sliding_window_view(window, k, axis=2)[:, :, ::stride][
            :, :, :out_w
        ]  # (C, k, out_w, k)
        taps = taps.reshape(groups, c_group, k, out_w, k)
        per_group = weight.reshape(groups, c_out // groups, c_group, k, k)
        out[:, r - r0] = np.einsum("gcyxk,gocyk->gox", taps, per_group).reshape(c_out, out_w)
    return out


def _whole(x, layers):
    for weight, stride, pad, groups in layers:
        x = _conv_rows(
            lambda i, x=x: x[:, i],
            x.shape,
            weight,
            stride,
            pad,
            groups,
            0,
            (x.shape[1] + 2 * pad - weight.shape[2]) // stride + 1,
        )
    return x


def _striped(x, layers, shapes, stripe, buffers=None):
    """The chain's output, run stripe by stripe in buffers of `buffers` rows (stripe_rows' unless
    given). The first layer's input rows are loaded as each stripe needs them (its buffer's room for
    the next stripe's rows is not exercised); every other buffer holds exactly its rows."""
    rows, planned = stripe_rows(shapes, stripe)
    buffers = planned if buffers is None else buffers
    count = len(layers)
    kept = [dict() for _ in range(count)]  # per layer: its input rows in SRAM, row -> (C, W)
    done = [0] * count
    out_h = shapes[-1].out_shape[1]
    result = []

    def keep(index, row, value):
        kept[index][row] = value
        while len(kept[index]) > buffers[index]:
            del kept[index][min(kept[index])]

    def reach(index, end):  # input rows [lo, hi] the windows of output rows done..end-1 reach
        layer = shapes[index]
        lo = max(done[index] * layer.stride - layer.pad, 0)
        return lo, min((end - 1) * layer.stride - layer.pad + layer.window - 1, layer.in_shape[1] - 1)

    loaded = -1
    for start in range(0, out_h, stripe):
        ends = [0] * count  # output rows each layer must have computed by this stripe's end
        ends[-1] = min(start + stripe, out_h)
        for index in range(count - 1, 0, -1):
            ends[index - 1] = max(reach(index, ends[index])[1] + 1, done[index - 1])
        hi = reach(0, ends[0])[1]
        for row in range(loaded + 1, hi + 1):  # this stripe's new input rows
            keep(0, row, x[:, row])
        loaded = max(loaded, hi)
        for index, (weight, stride, pad, groups) in enumerate(layers):
            if ends[index] <= done[index]:
                continue
            assert ends[index] - done[index] <= rows[index]
            lo, hi = reach(index, ends[index])
            assert set(range(lo, hi + 1)) <= set(kept[index]), f"layer {index}: rows {lo}..{hi} not all in its buffer"
            out = _conv_rows(
                lambda i, index=index: kept[index][i],
                shapes[index].in_shape,
                weight,
                stride,
                pad,
                groups,
                done[index],
                ends[index],
            )
            for offset, row in enumerate(range(done[index], ends[index])):
                if index + 1 < count:
                    keep(index + 1, row, out[:, offset])
                else:
                    result.append(out[:, offset])
            done[index] = ends[index]
    return np.stack(result, axis=1)


@pytest.mark.parametrize("stripe", [1, 2, 3, 8])
def test_the_stripes_compute_the_chain_in_their_buffers(stripe):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 12, 12))
    layers = [
        (rng.standard_normal((4, 2, 3, 3)), 1, 1, 1),  # 3x3 conv
        (rng.standard_normal((4, 1, 3, 3)), 2, 1, 4),  # depthwise 3x3, stride 2
        (rng.standard_normal((3, 4, 1, 1)), 1, 0, 1),  # 1x1 conv
        (rng.standard_normal((3, 1, 5, 5)), 1, 2, 3),  # depthwise 5x5
    ]
    shapes, shape = [], x.shape
    for weight, stride, pad, groups in layers:
        out = (
            weight.shape[0],
            (shape[1] + 2 * pad - weight.shape[2]) // stride + 1,
            (shape[2] + 2 * pad - weight.shape[2]) // stride + 1,
        )
        shapes.append(Layer("l", shape, out, 4, 4, weight.shape[2], stride, 1, pad, 0, 0, groups))
        shape = out
    np.testing.assert_allclose(_striped(x, layers, shapes, stripe), _whole(x, layers), rtol=1e-12, atol=1e-12)
    # one row less in any buffer drops a row some window still needs
    rows, buffers = stripe_rows(shapes, stripe)
    for index in range(1, len(shapes)):
        if buffers[index] < shapes[index].in_shape[1]:
            short = [*buffers]
            short[index] -= 1
            with pytest.raises(AssertionError, match=f"layer {index}"):
                _striped(x, layers, shapes, stripe, tuple(short))


# ---------------------------------------------------------------------------------------------
# The stripe program run as the device would (stripe_steps): flat SRAM buffers of exactly the
# sizes the plan gives them, each window laid out (C, rows, W) for its kernel, kept rows moved to
# its top and new rows moved (or, for the first layer, loaded) below them by strided copies of one
# segment a channel, each kernel a row tile of the window with the step's pads.


def _strided_copy(dst, dst_at, dst_stride, src, src_at, src_stride, count, seg):
    """`count` segments of `seg` elements; within one buffer in the order that reads every segment
    before it is overwritten (backwards where the destination's stride is the larger)."""
    order = range(count - 1, -1, -1) if dst_stride > src_stride else range(count)
    for c in order:
        dst[dst_at + c * dst_stride : dst_at + c * dst_stride + seg] = src[
            src_at + c * src_stride : src_at + c * src_stride + seg
        ].copy()


def _conv_tile(window, weight, stride, pad_top, pad_bottom, pad, groups):
    c_out, c_group, k, _ = weight.shape
    padded = np.pad(window, ((0, 0), (pad_top, pad_bottom), (pad, pad)))
    out_h, out_w = (padded.shape[1] - k) // stride + 1, (padded.shape[2] - k) // stride + 1
    taps = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    taps = taps[:, :out_h, :out_w].reshape(groups, c_group, out_h, out_w, k, k)
    per_group = weight.reshape(groups, c_out // groups, c_group, k, k)
    return np.einsum("gchwyx,gocyx->gohw", taps, per_group).reshape(c_out, out_h, out_w)


def _run_program(x, layers, shapes, stripe):
    program = stripe_steps(shapes, stripe)
    produced, windows = stripe_rows(shapes, stripe)
    window_buffers = [np.full(rows * s.in_shape[0] * s.in_shape[2], np.nan) for rows, s in zip(windows, shapes)]
    out_buffers = [np.full(rows * s.out_shape[0] * s.out_shape[2], np.nan) for rows, s in zip(produced, shapes)]
    held = [0] * len(shapes)  # rows each window buffer holds (its layout's rows a channel)
    out_rows = [0] * len(shapes)
    result = np.full(shapes[-1].out_shape, np.nan)
    for steps in program:
        for step in steps:
            channels, height, width = shapes[step.layer].in_shape
            buffer, rows = window_buffers[step.layer], step.window_rows
            if step.kept:  # the previous window's last rows to the top of each channel
                previous = held[step.layer]
                _strided_copy(
                    buffer, 0, rows * width, buffer, (previous - step.kept) * width, previous * width, channels,
                    step.kept * width,
                )  # fmt: skip
            if step.new_rows:
                if step.layer == 0:  # the DMA load from the input tensor
                    source, stride = x.reshape(-1), height * width
                else:  # from the producer's output stripe
                    source, stride = out_buffers[step.layer - 1], out_rows[step.layer - 1] * width
                _strided_copy(
                    buffer, step.kept * width, rows * width, source, step.source_row * width, stride, channels,
                    step.new_rows * width,
                )  # fmt: skip
            held[step.layer] = rows
            window = buffer[: channels * rows * width].reshape(channels, rows, width)
            assert not np.isnan(window).any(), f"layer {step.layer}: a window row was never written"
            weight, stride, pad, groups = layers[step.layer]
            out = _conv_tile(window, weight, stride, step.pad_top, step.pad_bottom, pad, groups)
            assert out.shape[1] == step.out_rows
            out_buffers[step.layer][: out.size] = out.reshape(-1)
            out_rows[step.layer] = step.out_rows
            if step.layer == len(shapes) - 1:
                result[:, step.out_first : step.out_end] = out
    return result


CHAINS = {
    "conv-dw2-pw-dw5": [
        ((4, 2, 3, 3), 1, 1, 1),
        ((4, 1, 3, 3), 2, 1, 4),
        ((3, 4, 1, 1), 1, 0, 1),
        ((3, 1, 5, 5), 1, 2, 3),
    ],
    "pw2-conv": [((3, 2, 1, 1), 2, 0, 1), ((5, 3, 3, 3), 1, 1, 1)],  # a 1x1 of stride 2 skips rows
    "conv2-conv2": [((3, 2, 3, 3), 2, 1, 1), ((4, 3, 3, 3), 2, 0, 1)],
}


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("stripe", [1, 2, 3, 16])
def test_the_stripe_program_computes_the_chain(chain, stripe):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 13, 11))
    layers = [(rng.standard_normal(shape), stride, pad, groups) for shape, stride, pad, groups in CHAINS[chain]]
    shapes, shape = [], x.shape
    for weight, stride, pad, groups in layers:
        out = (
            weight.shape[0],
            (shape[1] + 2 * pad - weight.shape[2]) // stride + 1,
            (shape[2] + 2 * pad - weight.shape[2]) // stride + 1,
        )
        shapes.append(Layer("l", shape, out, 8, 8, weight.shape[2], stride, 1, pad, 0, 0, groups))
        shape = out
    np.testing.assert_allclose(_run_program(x, layers, shapes, stripe), _whole(x, layers), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The command list (hetgen/spec/cascade_program.py) of chosen cascades: its SRAM, DMA and moves
# are the price's, its kernels lower (float and int8), and run byte for byte as a device would
# (numpy for the float kernels) it computes the chain.


def _cascaded(graph, kib=16):
    platform = _soc(kib)
    pins = {n.name: "soc/vdevice0/npu0" for n in graph.nodes if "Conv" in n.op}
    placement = with_cascades(place(graph, platform, pins=pins), graph, platform)
    return placement, platform


@pytest.fixture(scope="module", params=["float", "int8"])
def chain(request):
    model = cascade_chain_model() if request.param == "float" else quantized(cascade_chain_model(), per_channel=True)
    graph = import_model(model)
    return request.param, graph, *_cascaded(graph)


def test_the_program_is_what_was_priced(chain):
    _, graph, placement, platform = chain
    assert placement.cascades
    for cascade in placement.cascades:
        ops, layers, _ = cascade_units(cascade, placement, graph, platform)
        program = cascade_program(ops, layers, cascade.stripe)
        assert program.sram_bytes == cascade.sram_bytes <= 16 * 1024
        assert program.dma_bytes == cascade.dma_bytes < cascade.layer_dma_bytes
        assert program.moved(Kind.MOVE) == cascade.move_bytes
        assert sum(c.kind is Kind.COMPUTE for c in program.commands) == sum(
            len(steps) for steps in stripe_steps(layers, cascade.stripe)
        )
        assert all(0 <= c.after < WAIT_RING for c in program.commands)


def _copy(dst, dst_at, dst_stride, src, src_at, src_stride, count, seg):
    order = range(count - 1, -1, -1) if dst_stride > src_stride else range(count)
    for s in order:
        dst[dst_at + s * dst_stride : dst_at + s * dst_stride + seg] = src[
            src_at + s * src_stride : src_at + s * src_stride + seg
        ].copy()


def _float_conv(node, epilogue, args):
    """A float Conv on NCHW arrays, with the node's pads (top, left, bottom, right), stride,
    group and fused Relus."""
    x, w, *rest = args
    bias = rest[0] if rest else 0.0
    top, left, bottom, right = node.attr("pads")
    stride = node.attr("strides", (1, 1))[0]
    groups = node.attr("group", 1)
    padded = np.pad(x[0], ((0, 0), (top, bottom), (left, right)))
    c_out, c_group, k, _ = w.shape
    out_h, out_w = (padded.shape[1] - k) // stride + 1, (padded.shape[2] - k) // stride + 1
    taps = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    taps = taps[:, :out_h, :out_w].reshape(groups, c_group, out_h, out_w, k, k)
    y = np.einsum("gchwyx,gocyx->gohw", taps, w.reshape(groups, c_out // groups, c_group, k, k))
    y = y.reshape(c_out, out_h, out_w) + np.reshape(bias, (-1, 1, 1))
    for activation in epilogue:
        assert activation.kind == "Relu"
        y = np.maximum(y, 0)
    return y[None].astype(np.float32)


def test_the_float_program_computes_the_chain():
    graph = import_model(cascade_chain_model())
    placement, platform = _cascaded(graph)
    values = {"input": np.random.default_rng(0).standard_normal((1, 4, 32, 32)).astype(np.float32)}
    values.update(graph.constants)
    for node in graph.nodes:  # the chain whole, node by node
        inputs = [values[name] for name in node.inputs if name]
        values[node.outputs[0]] = _float_conv(node, (), inputs) if node.op == "Conv" else np.maximum(inputs[0], 0)
    for cascade in placement.cascades:
        ops, layers, names = cascade_units(cascade, placement, graph, platform)
        program = cascade_program(ops, layers, cascade.stripe)
        memory = {  # device memory: each tensor of the units, by (layer, position name)
            (i, position): np.frombuffer(np.ascontiguousarray(values[name]).tobytes(), np.uint8).copy()
            for i, positions in enumerate(names)
            for position, name in positions.items()
        }
        last = (len(ops) - 1, "out0")
        expected, memory[last] = memory[last], np.zeros_like(memory[last])
        sram = np.full(program.sram_bytes, 0xFF, np.uint8)  # NaNs where nothing was written
        for c in program.commands:
            if c.kind is Kind.COMPUTE:
                instance = program.kernels[c.kernel].instance
                *inputs, out = c.args
                args = [
                    sram[at : at + t.nbytes].view(np.float32).reshape(t.shape)
                    for at, t in zip(inputs, instance.input_types)
                    if at is not None
                ]
                assert not any(np.isnan(a).any() for a in args), "a kernel read SRAM nothing wrote"
                y = _float_conv(instance.node, instance.epilogue, args)
                assert y.shape == instance.output_types[0].shape
                sram[out : out + y.nbytes] = y.reshape(-1).view(np.uint8)
                continue
            src = memory[(c.layer, c.tensor)] if c.kind is Kind.LOAD else sram
            dst = memory[(c.layer, c.tensor)] if c.kind is Kind.STORE else sram
            _copy(dst, c.dst, c.dst_stride, src, c.src, c.src_stride, c.count, c.seg_bytes)
        np.testing.assert_allclose(memory[last].view(np.float32), expected.view(np.float32), rtol=1e-5, atol=1e-5)
