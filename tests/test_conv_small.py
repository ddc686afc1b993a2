"""The direct convolution of small planes (`hetgen/ops/_conv_small.py`,
`templates/kernels/conv_small.c.j2`): its layout rule (phase planes, tap offsets, lanes computed)
replayed in numpy against the convolution by definition; which layers and targets take it (small,
ungrouped, not pointwise, application cores) and that the program is priced as it runs; one native
build of LeNet-5's shapes and a strided, padded, residual layer against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.ir import DType, Node, TensorType
from hetgen.ops import _parallel
from hetgen.ops.base import OpInstance
from hetgen.ops.registers import AVX512, FILES, NEON, SCALAR
from hetgen.ops.registry import op_def
from hetgen.partition.search import place
from hetgen.pipeline import import_graph
from hetgen.platform.loader import load_platform_text
from tests.conv_reference import direct
from tests.test_priced_choices import HOST, check

MCU = (Path(__file__).resolve().parents[1] / "platforms" / "mcu.yaml").read_text()


def conv_kernel(
    channels, out_channels, size, kernel, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), group=1, registers=AVX512
):
    """The Conv's kernel (weights constant), the parameters of the small-plane offer blocked for
    `registers` (None where it is not offered) and the weights."""
    rng = np.random.default_rng(channels + size[0] + kernel[0])
    out = tuple(
        (size[i] + pads[i] + pads[i + 2] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)
    )
    w = rng.standard_normal((out_channels, channels // group, *kernel)).astype(np.float32)
    attrs = {"group": group, "kernel_shape": kernel, "strides": stride, "pads": pads, "dilations": dilation}
    node = Node("c", "Conv", ("x", "w"), ("y",), tuple(sorted(attrs.items())))
    types = (TensorType(DType.FLOAT32, (1, channels, *size)), TensorType(DType.FLOAT32, w.shape))
    instance = OpInstance(node, types, (TensorType(DType.FLOAT32, (1, out_channels, *out)),), (None, w))
    lowered = op_def("Conv").lower(instance)
    offers = [o for o in lowered.prepacked if o.params.get("variant") == "small"]
    # one per register file, after the bare-metal in-place offer, before the panels
    assert [lowered.prepacked.index(o) for o in offers] == list(range(1, 1 + len(offers)))
    assert len({o.registers for o in offers}) == len(offers)
    offer = next((o for o in offers if o.registers == registers), None)
    if offer is None:
        return None, w
    assert offer.hosted_only and offer.scratch_bytes == offer.params["sp_workspace_bytes"]
    return {**lowered.params, **offer.params}, w


def fits(p: dict, registers) -> bool:
    """Whether the block's accumulators, its loaded inputs and a weight fit `registers`, one to spare,
    each accumulator a whole register (AVX-512's blocking on NEON kept 96 q registers of them)."""
    accumulators = p["sp_rows"] * p["sp_blocks"]
    return p["sp_lanes"] == registers.lanes and accumulators + p["sp_blocks"] + 1 < registers.count


def replay(p: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """What conv_small.c.j2 computes, with numpy: the phase planes (the buffer starts as NaN, so a
    lane an output reads that no copy wrote shows), every tap at its offset, the rows kept."""
    wq, plane, computed = p["sp_wq"], p["sp_plane"], p["sp_computed"]
    phases = p["sp_phases"]
    buf = np.full(p["sp_buffer_floats"], np.nan, np.float64)
    for c in range(p["in_channels"]):
        for index, ph in enumerate(phases):
            base = (c * len(phases) + index) * plane
            buf[base : base + plane] = 0.0
            for r in range(ph["row_lo"], ph["row_hi"]):
                ih = r * p["stride_h"] + ph["row_off"]
                assert 0 <= ih < p["in_h"] and ph["src_row"] + r * p["stride_h"] * p["in_w"] == ih * p["in_w"]
                for q in range(ph["col_lo"], ph["col_hi"]):
                    iw = q * p["stride_w"] + ph["col_off"]
                    assert 0 <= iw < p["in_w"]
                    buf[base + r * wq + q] = x[c, ih, iw]
    buf[p["sp_planes_floats"] :] = 0.0
    taps = p["sp_taps"]
    assert len(taps) == p["in_channels"] * p["k_h"] * p["k_w"]
    assert max(taps) + computed <= p["sp_buffer_floats"]  # the last block reads inside the buffer
    assert computed % p["sp_block_floats"] == 0
    out = np.empty((p["out_channels"], p["out_h"], p["out_w"]))
    for m in range(p["out_channels"]):
        acc = sum(
            np.float64(w.reshape(p["out_channels"], -1)[m, t]) * buf[off : off + computed] for t, off in enumerate(taps)
        )
        for oh in range(p["out_h"]):
            out[m, oh] = acc[oh * wq : oh * wq + p["out_w"]]
    return out


@pytest.mark.parametrize(
    "case",
    [
        {"channels": 1, "out_channels": 6, "size": (32, 32), "kernel": (5, 5)},  # LeNet-5's first
        {"channels": 6, "out_channels": 16, "size": (14, 14), "kernel": (5, 5)},  # ... and second
        # DS-CNN's first: 10x4 taps, stride 2, padded (four phase planes)
        {
            "channels": 1,
            "out_channels": 64,
            "size": (49, 10),
            "kernel": (10, 4),
            "stride": (2, 2),
            "pads": (4, 1, 5, 1),
        },
        {"channels": 3, "out_channels": 5, "size": (9, 11), "kernel": (3, 3), "stride": (2, 1), "pads": (1, 0, 1, 2)},
        {"channels": 2, "out_channels": 7, "size": (10, 9), "kernel": (3, 3), "pads": (2, 1, 2, 1), "dilation": (2, 2)},
        {"channels": 2, "out_channels": 3, "size": (12, 30), "kernel": (5, 5), "stride": (2, 2), "pads": (2, 2, 2, 2)},
    ],
)
@pytest.mark.parametrize("registers", FILES, ids=lambda r: r.name)
def test_the_layout_rule_computes_the_convolution(case, registers):
    p, w = conv_kernel(**case, registers=registers)
    assert p is not None, case
    assert fits(p, registers), (p["sp_rows"], p["sp_blocks"])
    x = np.random.default_rng(1).standard_normal((case["channels"], *case["size"])).astype(np.float32)
    np.testing.assert_allclose(replay(p, x, w), direct(x, w, p), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    "case",
    [
        {"channels": 64, "out_channels": 64, "size": (14, 14), "kernel": (3, 3), "pads": (1, 1, 1, 1)},  # much work
        {"channels": 8, "out_channels": 8, "size": (7, 7), "kernel": (1, 1)},  # pointwise: already the GEMM's B
        {"channels": 8, "out_channels": 8, "size": (7, 7), "kernel": (3, 3), "group": 2},  # grouped
        {"channels": 1, "out_channels": 4, "size": (3, 64), "kernel": (3, 1)},  # 3 rows of 64, few lanes wasted...
        {"channels": 1, "out_channels": 4, "size": (40, 9), "kernel": (1, 8)},  # ... 40 rows of 2 of 9: most
    ],
)
def test_layers_it_does_not_suit_keep_the_gemm(case):
    p, _ = conv_kernel(**case)
    assert (p is not None) is (case["size"] == (3, 64)), p and p["sp_computed"]


def lenet_like(batch=1) -> onnx.ModelProto:
    """LeNet-5's convolutions (the second without bias), then a strided, padded 3x3 one with a
    residual Add and a Relu after it, 13 output channels: 12 a block, then a tail of one."""
    rng = np.random.default_rng(4)

    def weights(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [weights("w1", 6, 1, 5, 5), weights("b1", 6), weights("w2", 16, 6, 5, 5)]
    inits += [weights("w3", 13, 16, 3, 3), weights("b3", 13), weights("r", batch, 13, 5, 5)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[5, 5]),
        helper.make_node("Relu", ["c1"], ["a1"]),
        helper.make_node("MaxPool", ["a1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], kernel_shape=[5, 5]),
        helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c3", "r"], ["s3"]),
        helper.make_node("Relu", ["s3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "lenet_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 13, 5, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_application_cores_take_it_and_price_it_bare_metal_does_not():
    graph = import_graph(lenet_like(), {})
    priced = check(graph, load_platform_text(HOST), "small")  # the program's kernels are what is priced
    assert len(priced) == 3
    host = place(graph, load_platform_text(HOST))
    # priced as it runs: blocks of output channels as the pool's tasks where the layer is large enough
    small = [c.kernel for c in host.choices.units if c.variant == "small"]
    assert [k.parallel for k in small] == [_parallel.tasks_of(k.params["sp_split"]) for k in small]
    assert [k.parallel.tasks for k in small] == [
        1,
        2,
        1,
    ]  # 6 and 13 channels: one whole block (13: and a tail); 16: two of 8
    mcu = place(graph, load_platform_text(MCU))
    assert "small" not in {c.variant for c in mcu.choices.units}
    # on a NEON core its blocking is NEON's: the accumulators fit the 32 q registers (AVX-512's kept 96)
    for kind, registers in (("aarch64", NEON), ("riscv64", SCALAR)):
        board = place(graph, load_platform_text(f"name: {kind}\ntarget: {kind}\n"))
        small = [c.kernel.params for c in board.choices.units if c.variant == "small"]
        assert len(small) == 3 and all(fits(p, registers) for p in small), kind


@pytest.mark.cc
def test_a_native_build_matches_onnxruntime(tmp_path):
    import hetgen
    from hetgen.runtime.reference import ort_session

    proto = lenet_like(batch=2)
    out = hetgen.compile(load_platform_text(HOST), proto, out=tmp_path / "out", native_only=True, opt=("-O3",))
    kernels = "".join(path.read_text() for path in (out / "host" / "kernels").glob("*.c"))
    assert kernels.count("Direct convolution of small planes") == 3
    assert "_rows(planes, w, bias, 12u, 1u, staging);" in kernels  # the tail's one channel
    x = np.random.default_rng(3).standard_normal((2, 1, 32, 32)).astype(np.float32)
    got = hetgen.load(out).run({"x": x})["y"]
    (wanted,) = ort_session(proto.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(got, wanted, rtol=1e-4, atol=1e-5)  # hetgen verify's float32 tolerance
