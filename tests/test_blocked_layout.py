"""Runs of convolutions in a blocked channel layout (NCHW[V]c, hetgen.partition.blocked_layout.py).

Each model is compiled for real and compared with onnxruntime (graph optimisations off); which
layers ran blocked, and where the reorders are, is read from the generated kernels: each kernel
file's first line names the operators it computes, and a blocked Conv's file is conv_nchwc's.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.errors import HetgenError
from hetgen.models import resnet
from hetgen.partition.blocked_layout import block_width, host_block_width
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session, random_inputs
from hetgen.runtime.verify import verify
from kernel_text import unit_kernels

FAST = {"opt": ("-O1",), "native_tuning": True, "native_only": True, "werror": True}
AARCH64 = ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump", "qemu-aarch64")


def host(layout: str | None, threads: int = 1) -> str:
    options = f"\noptions: {{layout: {layout}, threads: {threads}}}" if layout else ""
    return f"name: host\ntarget: {{kind: native, runtime: aot}}{options}\n"


def compile_and_compare(
    tmp_path, proto: onnx.ModelProto, layout: str | None, threads: int = 1, **options
) -> dict[str, str]:
    """Build `proto` for the host with `layout` and `threads` (-Werror), check it against onnxruntime
    (1e-4 relative), and return the kernels: label -> the generated C of each."""
    platform = load_platform_text(host(layout, threads))
    out = hetgen.compile(platform, proto, out=tmp_path / "out", **{**FAST, **options})
    model = hetgen.load(out)
    feeds = random_inputs(model.inputs, seed=3)
    got = model.run(feeds)
    for info, wanted in zip(model.outputs, ort_session(proto.SerializeToString()).run(None, feeds)):
        np.testing.assert_allclose(got[info.name], wanted, rtol=1e-4, atol=1e-4, err_msg=info.name)
    return kernels(out)


def kernels(out) -> dict[str, str]:
    """The host's kernel functions: label -> C text."""
    return unit_kernels(out)


def blocked_convs(found: dict[str, str]) -> list[str]:
    return [label for label, text in found.items() if label.startswith("Conv") and "NCHW" in text and "blocked" in text]


def blocked_pools(found: dict[str, str]) -> list[str]:
    return [label for label, text in found.items() if "Pool" in label and "blocked channels" in text]


def reorders(found: dict[str, str], direction: str) -> list[str]:
    return [label for label in found if label.startswith(f"{direction} ")]


def plain_cnn() -> onnx.ModelProto:
    """3 -> 20 (3x3) -> 20 -> 36 (1x1) -> 36 -> 36 (3x3, stride 2, Clip) -> MaxPool -> 36 -> 24 (5x5):
    channels no block width divides, a first layer too narrow to block, two runs split by a pool."""
    rng = np.random.default_rng(7)
    nodes, inits = [], []

    def conv(x, cin, cout, k, stride=1, act=None, name=""):
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")])
        out = f"{name}_c"
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}_w", f"{name}_b"],
                [out],
                kernel_shape=[k, k],
                pads=[k // 2] * 4,
                strides=[stride] * 2,
            )
        )
        if act == "relu":
            nodes.append(helper.make_node("Relu", [out], [f"{name}_r"]))
            return f"{name}_r"
        if act == "clip":
            inits.extend([numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")])
            nodes.append(helper.make_node("Clip", [out, "lo", "hi"], [f"{name}_r"]))
            return f"{name}_r"
        return out

    h = conv("x", 3, 20, 3, act="relu", name="a")
    h = conv(h, 20, 36, 1, name="b")
    h = conv(h, 36, 36, 3, stride=2, act="clip", name="c")
    nodes.append(helper.make_node("MaxPool", [h], ["p"], kernel_shape=[2, 2], strides=[2, 2]))
    conv("p", 36, 24, 5, name="d")
    graph = helper.make_graph(
        nodes,
        "plain_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 19, 19])],
        [helper.make_tensor_value_info("d_c", TensorProto.FLOAT, [2, 24, 5, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.cc
@pytest.mark.parametrize("layout", ["nchw4c", "nchw8c", "nchw16c"])
def test_plain_cnn_runs_blocked_with_reorders_only_at_the_run_edges(tmp_path, layout):
    found = compile_and_compare(tmp_path, plain_cnn(), layout)
    v = int(layout[4:-1])
    blocked = blocked_convs(found)
    # the 3-channel first layer stays NCHW (fewer input channels than V); the other three go blocked
    assert len(blocked) == 3 and len(blocked_nchw(found)) == 1, list(found)
    # one run: b, c, the MaxPool (blocked: its input is), d (in after a, out to the output)
    assert len(reorders(found, "ReorderNCHWc")) == 1 and len(reorders(found, "ReorderNCHW")) == 1, list(found)
    assert len(blocked_pools(found)) == 1, list(found)
    assert all(f"NCHW{v}c" in found[label] for label in blocked)


@pytest.mark.cc
def test_blocks_wider_than_the_isa_build_through_vector_extensions(tmp_path):
    """Without -march=native (SSE2 only), 16-float blocks are GCC vector extensions: -Wpsabi clean."""
    found = compile_and_compare(tmp_path, plain_cnn(), "nchw16c", native_tuning=False)
    assert len(blocked_convs(found)) == 3


def blocked_nchw(found: dict[str, str]) -> list[str]:
    return [label for label, text in found.items() if label.startswith("Conv") and "blocked" not in text]


@pytest.mark.cc
@pytest.mark.parametrize("layout", ["nchw8c", "nchwc"])
def test_resnet_keeps_one_run_from_the_stem_pool_to_the_classifier(tmp_path, layout):
    """Residual Adds fused into the Convs read their other operand blocked; strided 1x1 shortcuts."""
    proto = resnet(widths=(16, 24, 40), blocks=1, size=20, seed=2)
    found = compile_and_compare(tmp_path, proto, layout)
    convs = [label for label in found if label.startswith("Conv")]
    assert len(blocked_convs(found)) == len(convs) - 1  # all but the 3-channel stem
    assert any("Add" in label for label in blocked_convs(found))
    # one reorder in (after the stem's MaxPool, whose input is NCHW), none out: GlobalAveragePool
    # reads the blocked tensor and writes NCHW for the classifier
    v = 8 if layout == "nchw8c" else host_block_width()
    assert reorders(found, "ReorderNCHWc") == [f"ReorderNCHWc (maxpool_to_nchw{v}c)"]
    assert reorders(found, "ReorderNCHW") == [] and len(blocked_pools(found)) == 1, list(found)


@pytest.mark.cc
def test_default_layout_is_nchw_and_the_option_takes_effect(tmp_path):
    proto = resnet(widths=(16, 24), blocks=1, size=12, seed=3)
    plain = compile_and_compare(tmp_path / "plain", proto, None)
    assert not blocked_convs(plain) and not reorders(plain, "ReorderNCHWc")
    assert blocked_convs(compile_and_compare(tmp_path / "nchw", proto, "nchw")) == []
    assert blocked_convs(compile_and_compare(tmp_path / "nchwc", proto, "nchw16c"))


def test_an_unknown_layout_is_refused_with_the_accepted_ones(tmp_path):
    with pytest.raises(HetgenError, match=r"layout.*nchw.*nchwc"):
        hetgen.compile(load_platform_text(host("nhwc")), resnet(), out=tmp_path / "out", build=False)


def test_block_width_follows_the_target():
    platform = load_platform_text(
        "name: p\ntarget:\n  kind: aarch64\n  runtime: vm\n  devices:\n"
        "    mcu: {kind: cortex-m4, runtime: graph, link: {bandwidth_gbps: 1, latency_us: 1}}\n"
    )
    root = platform.root
    mcu = next(t for t in platform.targets() if t.path_str != root.path_str)
    assert block_width(root, "nchwc") == 4 and block_width(root, "nchw") is None
    assert block_width(mcu, "nchwc") is None  # bare metal keeps NCHW
    assert block_width(root, "nchw16c") == 16


@pytest.mark.external
@pytest.mark.skipif(any(shutil.which(t) is None for t in AARCH64), reason="needs gcc-aarch64-linux-gnu and qemu-user")
def test_aarch64_build_uses_neon_and_matches_onnxruntime_under_qemu(tmp_path):
    text = "name: a64\ntarget: {kind: aarch64, runtime: graph}\noptions: {layout: nchwc}\n"
    out = hetgen.compile(
        load_platform_text(text),
        resnet(widths=(8, 12), blocks=1, size=12, seed=4),
        out=tmp_path / "out",
        opt=("-O2",),
        native_tuning=False,
        werror=True,
    )
    results = verify(out, seed=5, emulate=True)
    assert results and all(r.ok for r in results), results
    objects = [p for p in (out / "board").rglob("*.o") if p.parent.name == "kernels"]  # the Convs among them
    listing = "".join(
        subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(p)], capture_output=True, text=True).stdout
        for p in objects
    )
    assert "fmla\tv" in listing and ".4s" in listing


def two_outputs_model() -> onnx.ModelProto:
    """a: 16 -> 24 (3x3, dilation 2) is a graph output and feeds b: 24 -> 24 (3x3, pads 0 1 2 1,
    no bias): a blocked tensor read both blocked and as NCHW."""
    rng = np.random.default_rng(11)
    wa = (rng.standard_normal((24, 16, 3, 3)) * 0.2).astype(np.float32)
    ba = (rng.standard_normal(24) * 0.1).astype(np.float32)
    wb = (rng.standard_normal((24, 24, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "wa", "ba"], ["a"], kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2]),
        helper.make_node("Conv", ["a", "wb"], ["b"], kernel_shape=[3, 3], pads=[0, 1, 2, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 11, 9])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 24, 11, 9]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 24, 11, 9]),
        ],
        [numpy_helper.from_array(wa, "wa"), numpy_helper.from_array(ba, "ba"), numpy_helper.from_array(wb, "wb")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.cc
def test_a_blocked_tensor_that_is_also_a_graph_output_is_reordered_once(tmp_path):
    found = compile_and_compare(tmp_path, two_outputs_model(), "nchw4c")
    assert len(blocked_convs(found)) == 2
    assert len(reorders(found, "ReorderNCHWc")) == 1  # x, once
    assert len(reorders(found, "ReorderNCHW")) == 2  # a (an output, also read blocked by b) and b


@pytest.mark.cc
def test_depthwise_convs_end_a_run(tmp_path):
    """5x5 Convs (16 -> 32 -> 32) around a depthwise one: each is a run of its own, the depthwise
    Conv between them stays NCHW, with one reorder at each edge."""
    rng = np.random.default_rng(8)
    shapes = {"w1": (32, 16, 5, 5), "wd": (32, 1, 3, 3), "w2": (32, 32, 5, 5)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), n) for n, s in shapes.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[5, 5], pads=[2] * 4),
        helper.make_node("Conv", ["a", "wd"], ["b"], kernel_shape=[3, 3], pads=[1] * 4, group=32),
        helper.make_node("Conv", ["b", "w2"], ["c"], kernel_shape=[5, 5], pads=[2] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "depthwise_between",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 32, 12, 12])],
        inits,
    )
    found = compile_and_compare(
        tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "nchw8c"
    )
    assert len(blocked_convs(found)) == 2 and len(blocked_nchw(found)) == 1, list(found)
    assert len(reorders(found, "ReorderNCHWc")) == 2 and len(reorders(found, "ReorderNCHW")) == 2, list(found)


@pytest.mark.cc
def test_runs_whose_reorders_cost_more_than_they_save_stay_nchw(tmp_path):
    """MobileNetV2: its 1x1 Convs between depthwise ones do too few multiply-adds per byte the
    reorders around them would move (MACS_PER_REORDER_BYTE), so nothing is blocked."""
    from hetgen.models import mobilenet_v2

    found = compile_and_compare(tmp_path, mobilenet_v2(size=16, seed=1), "nchw8c")
    assert blocked_convs(found) == [] and reorders(found, "ReorderNCHWc") == [], list(found)


@pytest.mark.cc
def test_two_threads_split_the_blocked_layers_and_match_one_thread_bit_for_bit(tmp_path):
    """The blocked Convs and reorders split their rows over the worker pool in tasks fixed at
    generate time, so a build for 2 threads agrees with onnxruntime and with the 1-thread build
    exactly (no summation order depends on the thread count)."""
    proto = resnet(widths=(32, 64), blocks=1, size=64, seed=6)
    outputs, found = {}, {}
    for threads in (1, 2):
        text = f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{layout: nchw8c, threads: {threads}}}\n"
        out = hetgen.compile(load_platform_text(text), proto, out=tmp_path / f"t{threads}", **FAST)
        model = hetgen.load(out)
        feeds = random_inputs(model.inputs, seed=3)
        outputs[threads] = model.run(feeds)
        found[threads] = kernels(out)
        for info, wanted in zip(model.outputs, ort_session(proto.SerializeToString()).run(None, feeds)):
            np.testing.assert_allclose(outputs[threads][info.name], wanted, rtol=1e-4, atol=1e-4)
    split = [label for label, text in found[2].items() if "hg_parallel_for" in text]
    assert any(label in blocked_convs(found[2]) for label in split), split
    assert any(label.startswith("ReorderNCHW") for label in split), split
    for name, got in outputs[2].items():
        assert np.array_equal(got, outputs[1][name]), name


def pools_and_add_model() -> onnx.ModelProto:
    """a: 12 -> 12 (3x3, Relu) feeds b (1x1) and Add(a, b); b also feeds c (an output), so the Add
    stays a unit of its own; then AveragePool (3x3, stride 2, pads, ceil_mode, padding not counted),
    d: 12 -> 20 (3x3), read by a dilated MaxPool -> GlobalMaxPool and by GlobalAveragePool.
    12 and 20 channels: blocks of 8 carry padding."""
    rng = np.random.default_rng(5)
    inits = []

    def weights(name, cout, cin, k):
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name))
        return name

    nodes = [
        helper.make_node("Conv", ["x", weights("wa", 12, 12, 3)], ["a0"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["a0"], ["a"]),
        helper.make_node("Conv", ["a", weights("wb", 12, 12, 1)], ["b"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["b", weights("wc", 12, 12, 3)], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Add", ["a", "b"], ["s0"]),
        helper.make_node("Relu", ["s0"], ["s"]),
        helper.make_node(
            "AveragePool", ["s"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0], ceil_mode=1
        ),
        helper.make_node("Conv", ["p", weights("wd", 20, 12, 3)], ["d"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("MaxPool", ["d"], ["m"], kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalMaxPool", ["m"], ["gmax"]),
        helper.make_node("GlobalAveragePool", ["d"], ["gavg"]),
    ]
    graph = helper.make_graph(
        nodes,
        "pools_and_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 64, 61])],
        [
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 12, 64, 61]),
            helper.make_tensor_value_info("gmax", TensorProto.FLOAT, [1, 20, 1, 1]),
            helper.make_tensor_value_info("gavg", TensorProto.FLOAT, [1, 20, 1, 1]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.cc
def test_pools_and_an_unfused_add_keep_the_run_blocked(tmp_path):
    """A run goes on through the Add, AveragePool and MaxPool and ends in the global pools, which
    write NCHW themselves: one reorder in (x), one out (c, an output); at 2 threads the split
    kernels agree with onnxruntime and, bit for bit, with the 1-thread build."""
    proto = pools_and_add_model()
    outputs = {}
    for threads in (1, 2):
        # greedy's grouping (Add + Relu one unit), the one this run is drawn for: the cost mode now
        # finds a grouping that runs unblocked and is 1.8 % faster in its reported total
        # (hetgen/partition/reported.py), which would leave no blocked run to check
        found = compile_and_compare(tmp_path / f"t{threads}", proto, "nchw8c", threads=threads, placement="greedy")
        model = hetgen.load(tmp_path / f"t{threads}" / "out")
        outputs[threads] = model.run(random_inputs(model.inputs, seed=3))
    assert len(blocked_convs(found)) == 4, list(found)
    assert sorted(label.split()[0] for label in blocked_pools(found)) == [
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "MaxPool",
    ], list(found)
    assert any(label.startswith("Add") and "blocked" in text for label, text in found.items()), list(found)
    assert len(reorders(found, "ReorderNCHWc")) == 1 and len(reorders(found, "ReorderNCHW")) == 1, list(found)
    assert any("hg_parallel_for" in found[label] for label in blocked_pools(found))
    for name, got in outputs[2].items():
        assert np.array_equal(got, outputs[1][name]), name
