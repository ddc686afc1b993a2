"""The depthwise convolution over flattened rows (`hetgen/ops/conv.py` `depthwise_plane`,
`templates/kernels/conv_depthwise.c.j2`): its layout rule (phase planes, tap offsets, row groups)
replayed in numpy against a direct convolution, which targets take it (application cores, not bare
metal) and that the program is priced as it runs; one small native build against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.ir import DType, Node, TensorType
from hetgen.ops import conv
from hetgen.ops.base import OpInstance
from hetgen.ops.registry import op_def
from hetgen.partition.search import place
from hetgen.pipeline import import_graph
from hetgen.platform.loader import load_platform_text
from tests.conv_reference import direct
from tests.test_priced_choices import HOST, check

MCU = (Path(__file__).resolve().parents[1] / "platforms" / "mcu.yaml").read_text()


def depthwise_kernel(channels, size, kernel, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), multiplier=1):
    """The Conv's kernel (weights constant) and the plane offer's parameters, with the weights."""
    rng = np.random.default_rng(channels + size[0] + kernel[0])
    out_channels = channels * multiplier
    out = tuple(
        (size[i] + pads[i] + pads[i + 2] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)
    )
    w = rng.standard_normal((out_channels, 1, *kernel)).astype(np.float32)
    attrs = {"group": channels, "kernel_shape": kernel, "strides": stride, "pads": pads, "dilations": dilation}
    node = Node("dw", "Conv", ("x", "w"), ("y",), tuple(sorted(attrs.items())))
    types = (
        TensorType(DType.FLOAT32, (1, channels, *size)),
        TensorType(DType.FLOAT32, w.shape),
    )
    instance = OpInstance(node, types, (TensorType(DType.FLOAT32, (1, out_channels, *out)),), (None, w))
    kernel_ = op_def("Conv").lower(instance)
    (offer,) = [o for o in kernel_.prepacked if o.params.get("variant") == "depthwise"]
    assert offer.hosted_only and offer.scratch_bytes == offer.params["buffer_bytes"]
    return {**kernel_.params, **offer.params}, w


def split_row(buf: np.ndarray, row: int, src: np.ndarray, split: dict) -> None:
    """hg_split_columns: input row `src`'s even columns, then its odd ones, to their column phases'
    plane rows at `row` (a phase's first column from the input and its count, column_splits)."""
    for name, first in (("even", 0), ("odd", 1)):
        if split[name]:
            at, count = row + split[name]["at"], split[name]["count"]
            assert first + 2 * (count - 1) < len(src)  # no float read past the row
            buf[at : at + count] = src[first::2][:count]


def replay(p: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """What conv_depthwise.c.j2 computes, step by step, with numpy: every buffer element a valid
    output reads must have been written (the buffer starts as NaN). With a stride of 2 across, each
    input row's columns go to their phases by the split, as the kernel copies them."""
    out = np.full((p["out_channels"], p["out_h"], p["out_w"]), np.nan, np.float32)
    wq, halo, acc_base = p["wq"], p["halo"], p["acc_base"]
    taps = p["taps_even"] + p["taps_odd"]
    assert sorted(taps) == sorted(p["taps"])
    for m in range(p["out_channels"]):
        xc, wm = x[m // p["cout_group"]], w[m].reshape(-1)
        for block in range(p["blocks"]):
            row_first = block * p["block_rows"]
            row_end = min(p["out_h"], row_first + p["block_rows"])
            for g0 in range(row_first, row_end, p["group_rows"]):
                rows = min(p["group_rows"], row_end - g0)
                buf = np.full(p["buffer_floats"], np.nan, np.float32)
                if p["whole_plane"] and p["splits"]:  # stride 2 across: each input row split once
                    buf[:acc_base] = 0.0
                    for sp in p["splits"]:
                        for r in range(sp["phases"][0]["rows_lo"], sp["phases"][0]["rows_hi"]):
                            split_row(buf, r * wq, xc[r * p["stride_h"] + sp["row_off"]], sp)
                elif p["whole_plane"]:  # the padding zeroed once, then only the input's rows and columns copied
                    buf[:acc_base] = 0.0
                    for ph in p["phases"]:
                        for r in range(ph["rows_lo"], ph["rows_hi"]):
                            src = xc.reshape(-1)[r * p["stride_h"] * p["in_w"] + ph["src_first"] :]
                            dst = ph["base"] + r * wq + ph["col_lo"]
                            buf[dst : dst + ph["cols"]] = src[:: p["stride_w"]][: ph["cols"]]
                for sp in p["splits"] or () if not p["whole_plane"] else ():
                    for r in range(rows + halo):
                        for ph in sp["phases"]:
                            buf[ph["base"] + r * wq : ph["base"] + (r + 1) * wq] = 0.0
                        ih = (g0 + r) * p["stride_h"] + sp["row_off"]
                        if 0 <= ih < p["in_h"]:
                            split_row(buf, r * wq, xc[ih], sp)
                for ph in p["phases"] if not p["whole_plane"] and not p["splits"] else ():
                    for r in range(rows + halo):
                        dst = ph["base"] + r * wq
                        ih = (g0 + r) * p["stride_h"] + ph["row_off"]
                        buf[dst : dst + wq] = 0.0
                        lo, hi, step = ph["col_lo"], ph["col_hi"], p["stride_w"]
                        if 0 <= ih < p["in_h"] and hi > lo:
                            buf[dst + lo : dst + hi] = xc[ih, lo * step + ph["src_off"] :: step][: hi - lo]
                count = (rows - 1) * wq + p["out_w"]
                assert max(off for _, off in taps) + count <= acc_base  # reads stay in the phase planes
                acc = sum(np.float64(wm[t]) * buf[off : off + count] for t, off in taps)
                for r in range(rows):
                    out[m, g0 + r] = acc[r * wq : r * wq + p["out_w"]]
    return out


@pytest.mark.parametrize(
    "case",
    [
        {"channels": 3, "size": (7, 7), "kernel": (3, 3), "pads": (1, 1, 1, 1)},
        {"channels": 2, "size": (14, 14), "kernel": (5, 5), "stride": (2, 2), "pads": (2, 2, 2, 2)},
        {"channels": 2, "size": (9, 11), "kernel": (3, 3), "stride": (2, 2), "pads": (0, 0, 1, 1)},
        {"channels": 2, "size": (10, 9), "kernel": (3, 3), "pads": (2, 1, 2, 1), "dilation": (2, 2)},
        {"channels": 2, "size": (6, 13), "kernel": (1, 5), "stride": (1, 2), "pads": (0, 2, 0, 1), "multiplier": 2},
        {"channels": 64, "size": (30, 20), "kernel": (3, 3), "pads": (1, 1, 1, 1), "budget": 400},  # row groups
        # ... of stride 2, odd sides padded on both: rows and columns at every edge split
        {"channels": 64, "size": (31, 21), "kernel": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1), "budget": 240},
        {"channels": 2, "size": (3, 3), "kernel": (5, 5), "stride": (2, 2), "pads": (2, 2, 2, 2)},
    ],
)
def test_the_layout_rule_computes_the_convolution(case, monkeypatch):
    budget = case.pop("budget", None)
    if budget:  # a smaller buffer: each unit's rows in several groups, the last one short
        monkeypatch.setattr(conv, "PLANE_BUFFER_FLOATS", budget)
    p, w = depthwise_kernel(**case)
    x = np.random.default_rng(1).standard_normal((case["channels"], *case["size"])).astype(np.float32)
    if budget:
        assert p["group_rows"] < p["block_rows"] and p["block_rows"] % p["group_rows"]
    assert p["whole_plane"] is (p["group_rows"] == p["out_h"]), p["group_rows"]  # every case but the row groups
    np.testing.assert_allclose(replay(p, x, w), direct(x, w, p), rtol=1e-5, atol=1e-5)


def depthwise_model(specs, channels=8, size=15, pool=False) -> onnx.ModelProto:
    """A chain of depthwise Convs, each (kernel, stride, pads, activation), with bias; with `pool`,
    a second output: the AveragePool of the last one over its whole plane (as DS-CNN's)."""
    rng = np.random.default_rng(5)
    nodes, inits, name, h = [], [], "x", size
    for k, (kernel, stride, pads, activation) in enumerate(specs):
        w = rng.standard_normal((channels, 1, kernel, kernel)).astype(np.float32) * 0.3
        inits += [
            numpy_helper.from_array(w, f"w{k}"),
            numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), f"b{k}"),
        ]
        conv = f"c{k}" if activation else f"y{k}"
        nodes.append(
            helper.make_node(
                "Conv",
                [name, f"w{k}", f"b{k}"],
                [conv],
                kernel_shape=[kernel] * 2,
                strides=[stride] * 2,
                pads=list(pads),
                group=channels,
            )
        )
        if activation:
            nodes.append(helper.make_node(activation, [conv], [f"y{k}"]))
        name = f"y{k}"
        h = (h + pads[0] + pads[2] - kernel) // stride + 1
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, channels, h, h])]
    if pool:
        nodes.append(helper.make_node("AveragePool", [name], ["pooled"], kernel_shape=[h, h]))
        outputs.append(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, channels, 1, 1]))
    graph = helper.make_graph(
        nodes,
        "depthwise_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        outputs,
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


CHAIN = [  # 28x28 -> 14x14 -> 14x14 -> 14x14 -> 7x7
    (3, 2, (1, 1, 1, 1), None),
    (3, 1, (1, 1, 1, 1), "HardSwish"),
    (5, 1, (2, 2, 2, 2), "Relu"),
    (3, 2, (0, 0, 1, 1), "HardSigmoid"),
]


def test_application_cores_take_it_and_price_it_bare_metal_does_not():
    graph = import_graph(depthwise_model(CHAIN), {})
    priced = check(graph, load_platform_text(HOST), "depthwise")  # the program's kernels are what is priced
    assert len(priced) == len(CHAIN)
    mcu = place(graph, load_platform_text(MCU))
    assert {c.variant for c in mcu.choices.units} == {"direct"}  # no workspace on bare metal: the row loop


@pytest.mark.cc
def test_a_native_build_matches_onnxruntime(tmp_path):
    """Built at -O3, as programs are (GCC 12 at -O3 once miscompiled a fill loop of this kernel that
    -O1 and the sanitizers compiled right), against onnxruntime."""
    import hetgen
    from hetgen.runtime.reference import ort_session

    proto = depthwise_model(CHAIN, size=28, pool=True)
    out = hetgen.compile(load_platform_text(HOST), proto, out=tmp_path / "out", native_only=True, opt=("-O3",))
    kernels = "".join(path.read_text() for path in (out / "host" / "kernels").glob("*.c"))
    assert kernels.count("Depthwise convolution over flattened rows") == len(CHAIN)
    assert "AveragePool of planes" in kernels  # the whole-plane AveragePool as a global one
    x = np.random.default_rng(3).standard_normal((1, 8, 28, 28)).astype(np.float32)
    got = hetgen.load(out).run({"x": x})
    wanted = ort_session(proto.SerializeToString()).run(None, {"x": x})
    for info, value in zip(proto.graph.output, wanted, strict=True):
        np.testing.assert_allclose(got[info.name], value, rtol=1e-5, atol=1e-5, err_msg=info.name)


def test_small_planes_of_many_channels_take_16_channels_a_vector():
    """conv.depthwise_channel_vector: offered first where it applies, with the plane kernel's
    parameters beside it (its fallback on other ISAs) and a workspace for either; priced as the
    layer's multiply-adds, as the plane kernel is."""
    from hetgen.spec.variants import with_offers

    def offers(channels, size, kernel=(3, 3)):
        p, w = depthwise_kernel(channels, size, kernel, pads=(1, 1, 1, 1))
        node = Node(
            "dw", "Conv", ("x", "w"), ("y",), (("group", channels), ("kernel_shape", kernel), ("pads", (1,) * 4))
        )
        types = (TensorType(DType.FLOAT32, (1, channels, *size)), TensorType(DType.FLOAT32, w.shape))
        out = TensorType(DType.FLOAT32, (1, channels, size[0] + 3 - kernel[0], size[1] + 3 - kernel[1]))
        return op_def("Conv").lower(OpInstance(node, types, (out,), (None, w)))

    kernel = offers(64, (25, 5))  # DS-CNN's
    cv, plane = kernel.prepacked
    assert cv.params["variant"] == "depthwise_cv" and cv.template == "kernels/conv_depthwise_cv.c.j2"
    assert cv.params["wq"] == plane.params["wq"] and cv.hosted_only
    assert cv.scratch_bytes == max(plane.params["buffer_bytes"], cv.params["cv_buffer_bytes"])
    assert (cv.params["cv_hp"], cv.params["cv_wp"], cv.params["cv_units"]) == (27, 7, 4)
    assert len(cv.params["cv_at"]) == 125 and cv.params["cv_at"][:2] == (8, 9)  # row 1, columns 1 and 2
    taken = with_offers(kernel, (cv,))
    assert taken.flops == with_offers(kernel, (plane,)).flops == 2 * 64 * 125 * 9
    assert taken.template == "kernels/conv_depthwise_cv.c.j2" and taken.scratch_bytes == cv.scratch_bytes
    assert [o.params["variant"] for o in offers(8, (25, 5)).prepacked] == ["depthwise"]  # half a vector
    assert [o.params["variant"] for o in offers(64, (14, 14)).prepacked] == ["depthwise"]  # rows of a vector
    assert [o.params["variant"] for o in offers(64, (12, 12)).prepacked] == ["depthwise_cv", "depthwise"]
    assert [o.params["variant"] for o in offers(64, (100, 5)).prepacked] == ["depthwise"]  # buffer past L1
    assert [o.params["variant"] for o in offers(64, (7, 7), (7, 7)).prepacked] == ["depthwise"]  # 49 taps


@pytest.mark.cc
def test_16_channels_a_vector_matches_onnxruntime(tmp_path):
    """The channel-vector kernel (on AVX-512; the plane kernel elsewhere), at -O1 as CI builds what
    it does not time: a full and a partial block of channels, strides, asymmetric pads, 5x5 taps,
    fused activations."""
    import hetgen
    from hetgen.runtime.reference import ort_session

    proto = depthwise_model(CHAIN, channels=20, size=15)
    out = hetgen.compile(load_platform_text(HOST), proto, out=tmp_path / "out", native_only=True, opt=("-O1",))
    kernels = "".join(path.read_text() for path in (out / "host" / "kernels").glob("*.c"))
    assert kernels.count("Depthwise convolution, 16 channels a vector") == len(CHAIN)
    x = np.random.default_rng(3).standard_normal((1, 20, 15, 15)).astype(np.float32)
    got = hetgen.load(out).run({"x": x})
    (wanted,) = ort_session(proto.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(got[proto.graph.output[0].name], wanted, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("op", "attrs", "whole"),
    [
        ("AveragePool", {"kernel_shape": (25, 5)}, True),
        ("MaxPool", {"kernel_shape": (25, 5)}, True),
        ("AveragePool", {"kernel_shape": (25, 5), "pads": (1, 0, 1, 0), "count_include_pad": 1}, False),
        ("AveragePool", {"kernel_shape": (24, 5)}, False),
    ],
)
def test_a_pool_over_the_whole_plane_is_a_global_one(op, attrs, whole):
    node = Node("p", op, ("x",), ("y",), tuple(sorted(attrs.items())))
    kh = attrs["kernel_shape"][0]
    out_h = 25 + sum(attrs.get("pads", (0, 0, 0, 0))[::2]) - kh + 1
    instance = OpInstance(
        node, (TensorType(DType.FLOAT32, (1, 64, 25, 5)),), (TensorType(DType.FLOAT32, (1, 64, out_h, 1)),), (None,)
    )
    kernel = op_def(op).lower(instance)
    assert (kernel.template == "kernels/pool_global.c.j2") is whole
    if whole:
        assert kernel.params["plane_size"] == 125 and kernel.params["is_max"] is (op == "MaxPool")
