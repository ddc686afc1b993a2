"""int8 on the npu tiles like float (issue 20, item 5): a QLinearConv or QLinearMatMul whose int8
tensors do not fit the npu's SRAM whole is cut into row and output-channel tiles (halos, double
buffering, its per-channel scales, zero points and bias sliced with the channels, its one-value
scales and zero points loaded once), priced by its plan and run as those tiles by the simulator,
instead of falling back to a CPU; the quantized Add, pools and lookups that onnxruntime's
quantize_static writes lower on the npu (their scales are constant initializers, carried into each
tile's kernel); and a pattern refused because its kernel cannot be lowered says so, not that it
"does not fit memory".
"""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.frontend import import_model
from hetgen.partition import explain_json, explain_text, place
from hetgen.partition.patterns import match_patterns
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session
from hetgen.spec import build_kernel_specs
from hetgen.spec.invocation import group_plans
from hetgen.spec.tiling import Action, TilePlan, Unfit

PLATFORM = """
name: q8t
target:
  kind: native
  runtime: vm
  devices:
    npu0:
      kind: npu
      sram_kib: {sram_kib}
      macs_per_cycle: 256
      int8_macs_per_cycle: 1024
      mac_rows: 16
      clock_mhz: 1000
      command_cycles: 64
      link: {{bandwidth_gbps: 8, latency_us: 5}}
"""
NPU = "q8t/npu0"
CONV_X = (1, 16, 48, 48)  # int8: 36 kB in, 72 kB out (32 channels): neither fits 32 KiB whole
MM_A, MM_K, MM_N = (2, 128, 128), 128, 96  # int8 A: 32 kB, Y: 24 kB


def _quantized(values: np.ndarray, axis_scale: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(values / axis_scale), -127, 127).astype(np.int8)


def int8_layers() -> onnx.ModelProto:
    """A QDQ convolution with per-channel weights, an int32 bias and a Relu (QLinearConv after the
    rewrite), beside a QDQ matrix product with per-column weights (QLinearMatMul)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1
    w_scale = (np.abs(w).reshape(32, -1).max(axis=1) / 127).astype(np.float32)
    x_scale = np.float32(0.03)
    bias_q = rng.integers(-2000, 2000, 32).astype(np.int32)
    b = rng.standard_normal((MM_K, MM_N)).astype(np.float32) * 0.1
    b_scale = (np.abs(b).max(axis=0) / 127).astype(np.float32)
    inits = [
        numpy_helper.from_array(x_scale, "xs"),
        numpy_helper.from_array(np.int8(0), "xz"),
        numpy_helper.from_array(_quantized(w, w_scale[:, None, None, None]), "wq"),
        numpy_helper.from_array(w_scale, "ws"),
        numpy_helper.from_array(np.zeros(32, np.int8), "wz"),
        numpy_helper.from_array(bias_q, "bq"),
        numpy_helper.from_array((x_scale * w_scale).astype(np.float32), "bs"),
        numpy_helper.from_array(np.zeros(32, np.int32), "bz"),
        numpy_helper.from_array(np.float32(0.02), "ys"),
        numpy_helper.from_array(np.int8(-128), "yz"),
        numpy_helper.from_array(np.float32(0.05), "as"),
        numpy_helper.from_array(np.int8(3), "az"),
        numpy_helper.from_array(_quantized(b, b_scale[None, :]), "bmq"),
        numpy_helper.from_array(b_scale, "bms"),
        numpy_helper.from_array(np.zeros(MM_N, np.int8), "bmz"),
        numpy_helper.from_array(np.float32(0.08), "ms"),
        numpy_helper.from_array(np.int8(-5), "mz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="quantize"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0, name="dq_w"),
        helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0, name="dq_b"),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1], name="qconv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"], name="quantize_y"),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dq_y"),
        helper.make_node("QuantizeLinear", ["a", "as", "az"], ["aq"], name="quantize_a"),
        helper.make_node("DequantizeLinear", ["aq", "as", "az"], ["ad"], name="dq_a"),
        helper.make_node("DequantizeLinear", ["bmq", "bms", "bmz"], ["bmd"], axis=1, name="dq_bm"),
        helper.make_node("MatMul", ["ad", "bmd"], ["m"], name="qmatmul"),
        helper.make_node("QuantizeLinear", ["m", "ms", "mz"], ["mq"], name="quantize_m"),
        helper.make_node("DequantizeLinear", ["mq", "ms", "mz"], ["mm"], name="dq_m"),
    ]
    graph = helper.make_graph(
        nodes,
        "int8_layers",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, list(CONV_X)),
            helper.make_tensor_value_info("a", TensorProto.FLOAT, list(MM_A)),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 48, 48]),
            helper.make_tensor_value_info("mm", TensorProto.FLOAT, [*MM_A[:-1], MM_N]),
        ],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _npu(platform):
    return next(t for t in platform.targets() if t.path_str == NPU)


def _plan(graph, platform, op: str) -> TilePlan | Unfit:
    """The tiling of the first `op` of `graph` alone on the npu."""
    node = next(n for n in graph.nodes if n.op == op)
    (plan,) = group_plans([node], graph, _npu(platform), build_kernel_specs(graph, platform))
    return plan


def test_a_qlinearconv_too_big_for_sram_is_tiled_by_rows_and_channels_with_its_side_inputs_sliced():
    graph = import_model(int8_layers())
    platform = load_platform_text(PLATFORM.format(sram_kib=32))
    conv = next(n for n in graph.nodes if n.op == "QLinearConv")
    plan = _plan(graph, platform, "QLinearConv")
    assert isinstance(plan, TilePlan) and plan.count > 1, plan
    assert plan.split in ("rows", "channels", "rows x channels") and plan.sram_bytes <= 32 * 1024
    # int8 blocks: every output element stored once, one byte each
    assert plan.moved(Action.STORE) == 32 * 48 * 48
    # the input is int8 too: more than its 36,864 bytes once only by halo rows (and re-reads)
    loaded = {
        i: [plan.block_of(c) for c in plan.commands if c.action is Action.LOAD and c.operand == i] for i in range(9)
    }
    assert sum(b.nbytes for b in loaded[0]) >= 16 * 48 * 48
    # x_scale, x_zero_point, y_scale, y_zero_point: one value each, loaded once per invocation
    for i in (1, 2, 6, 7):
        assert [b.nbytes for b in loaded[i]] == [graph.types[conv.inputs[i]].nbytes]
    # the weights' per-channel scale (float32), zero point (int8) and the int32 bias follow the channels
    channels = plan.tile_shape[1]
    for i, itemsize in ((4, 4), (5, 1), (8, 4)):
        assert max(b.nbytes for b in loaded[i]) == channels * itemsize
    assert max(b.nbytes for b in loaded[3]) == channels * 16 * 9  # the weights' slice, int8
    for tile_kernel in plan.kernels:  # each tile's kernel: the QLinearConv on the tile's shapes
        types = tile_kernel.instance.input_types
        assert (
            types[4].shape == types[8].shape == (types[3].shape[0],) == (tile_kernel.instance.output_types[0].shape[1],)
        )


def test_a_qlinearmatmul_too_big_for_sram_is_tiled_and_its_columns_take_their_scales():
    graph = import_model(int8_layers())
    platform = load_platform_text(PLATFORM.format(sram_kib=32))
    plan = _plan(graph, platform, "QLinearMatMul")
    assert isinstance(plan, TilePlan) and plan.count > 1, plan
    assert plan.moved(Action.STORE) == 2 * 128 * MM_N
    cols = plan.tile_shape[1]
    scales = [plan.block_of(c).nbytes for c in plan.commands if c.action is Action.LOAD and c.operand == 4]
    assert max(scales) == (cols * 4 if cols < MM_N else MM_N * 4)


def test_int8_tiles_are_priced_at_the_int8_rate_and_cost_less_than_the_same_float_layer():
    """A QLinearConv's plan next to the float Conv of the same shapes on the same SRAM: a quarter of
    the bytes, the int8 MAC array (4 products a multiplier here), so its estimate is well under."""
    from hetgen.spec.invocation import tile_rates
    from hetgen.spec.tiling import plan_us

    model = int8_layers()
    graph = import_model(model)
    platform = load_platform_text(PLATFORM.format(sram_kib=32))
    npu = _npu(platform)
    conv = next(n for n in graph.nodes if n.op == "QLinearConv")
    int8_plan = _plan(graph, platform, "QLinearConv")
    rng = np.random.default_rng(0)
    float_model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="fconv")],
            "f",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(CONV_X))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 48, 48])],
            [
                numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w"),
                numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b"),
            ],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    float_graph = import_model(float_model)
    float_plan = _plan(float_graph, platform, "Conv")
    assert isinstance(float_plan, TilePlan) and float_plan.moved(Action.STORE) == 4 * int8_plan.moved(Action.STORE)
    int8_us = plan_us(int8_plan, tile_rates(npu, 1.0, [conv]))
    float_us = plan_us(float_plan, tile_rates(npu, 1.0, list(float_graph.nodes)))
    assert int8_us < float_us / 2


QUANTIZED_PLATFORM = """
name: qs
target:
  kind: native
  runtime: vm
  devices:
    npu0: {kind: npu, link: {bandwidth_gbps: 8, latency_us: 5}}
"""


def _elementwise_model() -> onnx.ModelProto:
    """Float layers that quantize_static turns into QLinearAdd, QLinearAveragePool,
    QLinearGlobalAveragePool, QLinearSigmoid and QLinearLeakyRelu (QOperator) or QDQ islands of them."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Add", ["c", "x8"], ["s"], name="add"),
        helper.make_node("Sigmoid", ["s"], ["g"], name="sigmoid"),
        helper.make_node("LeakyRelu", ["g"], ["l"], alpha=0.1, name="leaky"),
        helper.make_node("AveragePool", ["l"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="avgpool"),
        helper.make_node("GlobalAveragePool", ["p"], ["y"], name="gap"),
    ]
    graph = helper.make_graph(
        nodes,
        "elementwise",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16]),
            helper.make_tensor_value_info("x8", TensorProto.FLOAT, [1, 8, 16, 16]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
        [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_qadd_qpool_and_qlookup_take_quantize_static_models(fmt):
    """Their scales and zero points are constant initializers: each unit carries their values into
    its tiles' kernels, so the npu's qadd, qpool and qlookup patterns accept them."""
    pytest.importorskip("onnxruntime")
    from hetgen.models.quantized import quantized

    logging.disable(logging.WARNING)  # quantize_static's advice to pre-process (done)
    try:
        model = quantized(_elementwise_model(), fmt, per_channel=True)
    finally:
        logging.disable(logging.NOTSET)
    graph = import_model(model)
    platform = load_platform_text(QUANTIZED_PLATFORM)
    ops = {node.name: node.op for node in graph.nodes}
    wanted = {"QLinearAdd": "qadd", "QLinearAveragePool": "qpool", "QLinearGlobalAveragePool": "qpool"}
    wanted.update({"QLinearSigmoid": "qlookup", "QLinearLeakyRelu": "qlookup"})
    assert set(wanted) <= set(ops.values()), sorted(set(ops.values()))
    found = match_patterns(graph, platform, build_kernel_specs(graph, platform))
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    for name, op in ops.items():
        if op not in wanted:
            continue
        labels = {m.label for m in found.matches if m.target.endswith("npu0") and m.nodes[0] == index[name]}
        refused = [r.reason for r in found.rejections if r.nodes[0] == index[name] and r.label == wanted[op]]
        assert wanted[op] in labels, (op, refused)
    # the placement weighs them (here, tiny layers, the CPU wins), and explain refuses none of them
    text = explain_text(place(graph, platform), graph)
    assert not [line for line in text.splitlines() if "compile-time constant" in line], text
    assert "[qadd]" in text and "[qlookup]" in text


SLICER_PLATFORM = """
name: sl
kinds:
  slicer:
    role: accelerator
    doc: An accelerator that says it slices (its tile kernels read every input but one-value constants from SRAM).
    attributes:
      sram_kib: {type: int, default: 64, minimum: 1, doc: "Local memory in KiB."}
    figures: {peak_gflops: 64, bandwidth_gbps: 8, launch_us: 2}
    memory: {local_bytes: "sram_kib * 1024"}
    patterns:
      - {label: slice, chain: [Slice], where: {dtype: [float32, int64], fits_memory: true}, efficiency: 1.0}
      - {label: add, chain: [Add], where: {dtype: float32, fits_memory: true}, efficiency: 1.0}
target:
  kind: native
  runtime: vm
  devices:
    acc0: {kind: slicer, sram_kib: {sram_kib}, link: {bandwidth_gbps: 8, latency_us: 5}}
"""


def _slice_and_add() -> onnx.ModelProto:
    """A Slice over two axes (its starts and ends: constants of two values, which a tile kernel does
    not get) and an Add of 64 kB and a per-channel vector (broadcast: one tile, which 1 KiB cannot hold)."""
    inits = [
        numpy_helper.from_array(np.array([1, 1], np.int64), "starts"),
        numpy_helper.from_array(np.array([7, 7], np.int64), "ends"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"], name="slice"),
        helper.make_node("Add", ["x", "c"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "slice_and_add",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 8, 8]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 256, 1, 1]),
        ],
        [
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 256, 6, 6]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 8, 8]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_refusal_names_what_failed_not_memory():
    """A pattern whose kernel cannot be lowered on the device is refused for that, in its lowering's
    words, not as "does not fit memory" (no SRAM would help); a unit too big for every tiling still
    is, with the numbers."""
    graph = import_model(_slice_and_add())
    platform = load_platform_text(SLICER_PLATFORM.replace("{sram_kib}", "1"))
    found = match_patterns(graph, platform, build_kernel_specs(graph, platform))
    reasons = {r.label: r.reason for r in found.rejections}
    assert "does not fit memory" not in reasons["slice"]
    assert reasons["slice"].startswith("sl/acc0 has no kernel for it: Slice cannot be lowered as a tile kernel"), (
        reasons["slice"]
    )
    assert "compile-time constant" in reasons["slice"]
    assert reasons["add"].startswith("does not fit memory: no tiling of Add fits 1024 bytes"), reasons["add"]
    text = explain_text(place(graph, platform), graph)
    assert f"[slice] {reasons['slice']}" in text and f"[add] {reasons['add']}" in text


@pytest.fixture(scope="module")
def tiled_int8(tmp_path_factory):
    model = int8_layers()
    platform = load_platform_text(PLATFORM.format(sram_kib=32))
    root = tmp_path_factory.mktemp("q8t")
    out = hetgen.compile(platform, model, out=root / "npu", native_only=True, opt=("-O1",))
    host = hetgen.compile("host", model, out=root / "host", native_only=True, opt=("-O1",))
    return model, platform, out, host


@pytest.mark.cc
def test_an_int8_conv_and_matmul_too_big_for_sram_run_tiled_on_the_npu_bit_exactly(tiled_int8):
    model, platform, out, host = tiled_int8
    graph = import_model(model)
    document = explain_json(place(graph, platform), graph)
    tilings = {t["unit"]: (g, t) for g in document["groups"] for t in g["tiling"]}
    heads = {n.op: n.name for n in graph.nodes if n.op in ("QLinearConv", "QLinearMatMul")}
    for op, label in (("QLinearConv", "qconv2d"), ("QLinearMatMul", "qmatmul")):
        group, tiling = tilings[heads[op]]  # placed on the npu by cost, as tiles
        assert group["target"] == NPU and group["label"] == label and tiling["count"] > 1, (op, group, tiling)

    manifest = json.loads((out / "hetgen.json").read_text())
    (npu,) = [t for t in manifest["targets"] if t["path"] == NPU]
    loaded = hetgen.load(out)
    rng = np.random.default_rng(1)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in loaded.inputs}
    got = loaded.run(feeds)
    want = dict(zip(("y", "mm"), ort_session(model.SerializeToString()).run(["y", "mm"], feeds)))
    on_host = hetgen.load(host).run(feeds)
    for name in ("y", "mm"):
        np.testing.assert_array_equal(got[name], on_host[name])  # the tiles round as the whole CPU kernel
        np.testing.assert_array_equal(got[name], want[name])  # and as onnxruntime (ORT_DISABLE_ALL)

    # The simulator ran the tiles it was given: one kernel command per tile, each counted from its
    # own shape (int8: 1024 MACs = 16 rows x 16 columns x 4 products a multiplier along the depth),
    # never from the estimate.
    counters = npu["counters"]
    cycles = loaded.device_counters(npu["counters_offset"], len(counters))
    conv_kernels = [i for i, c in enumerate(counters) if c["what"] == "kernel" and heads["QLinearConv"] in c["nodes"]]
    assert len(conv_kernels) == tilings[heads["QLinearConv"]][1]["count"]
    # Its counters add up to the invocation's elapsed cycles, which the MAC array's int8 steps of
    # every tile (ceil(pixels / 16 rows) x ceil(channels / 16 columns) x ceil(depth / 4)) and each
    # kernel command's 64 cycles to start bound from below.
    plan = _plan(graph, platform, "QLinearConv")
    steps = 0
    for tile in plan.tiles:
        instance = plan.kernels[tile.kernel].instance
        _, channels, rows, width = instance.output_types[0].shape
        depth = instance.input_types[0].shape[1] * 9
        steps += 64 + -(-rows * width // 16) * -(-channels // 16) * -(-depth // 4)
    assert sum(cycles[i] for i, c in enumerate(counters) if heads["QLinearConv"] in c["nodes"]) >= steps
    stats = loaded.device_stats(npu["stats_device"])
    assert stats["load_cycles"] > 0 and stats["invocations"] >= 2


@pytest.mark.cc
def test_the_tiled_int8_estimate_and_simulation_agree(tiled_int8):
    from bench_support import bench_json

    _, _, out, _ = tiled_int8
    document = bench_json(out)
    groups = [g for g in document["groups"] if g["label"] in ("qconv2d", "qmatmul")]
    assert len(groups) == 2
    for group in groups:
        assert group["simulated_us"] == pytest.approx(group["estimate_us"], rel=0.15), group


def test_an_int8_mobilenet_at_224_puts_every_convolution_on_the_npu_tiled_where_it_must():
    """MobileNetV2 at 224 x 224, quantized as users do it: on soc's 512 KiB npu every QLinearConv
    runs (its 64-channel 112 x 112 layers tiled)."""
    pytest.importorskip("onnxruntime")
    from hetgen.models import cnn
    from hetgen.models.quantized import quantized
    from hetgen.platform import load_platform

    logging.disable(logging.WARNING)
    try:
        model = quantized(cnn.mobilenet_v2(size=224), "QDQ", per_channel=True)
    finally:
        logging.disable(logging.NOTSET)
    graph = import_model(model)
    placement = place(graph, load_platform("soc"))
    spatial = [n for n in graph.nodes if n.op == "QLinearConv" and graph.types[n.outputs[0]].size > 1000]
    convs = [node.name for node in spatial]  # all but the classifier (a 1 x 1 QLinearConv of 640 MACs)
    assert len(convs) >= 14 and all(placement.target_of(conv) == "soc/vdevice0/npu0" for conv in convs)
    tilings = [t for g in placement.groups for t in g.tilings if t.unit in convs]
    assert len(tilings) == len(convs) and sum(t.count > 1 for t in tilings) >= 5


def test_conv_integer_and_matmul_integer_from_quantize_dynamic_tile_too():
    """quantize_dynamic's ConvInteger and MatMulInteger (the npu has no pattern for them; a kind
    that names them gets these plans): tiled like Conv and MatMul, their zero points (the input's
    computed at run time by DynamicQuantizeLinear, one value) loaded once, the int32 output 4 bytes
    an element."""
    pytest.importorskip("onnxruntime")
    import tempfile
    from pathlib import Path

    from onnxruntime.quantization import QuantType, quantize_dynamic

    from hetgen.spec.invocation import tile_rates
    from hetgen.spec.tiling import unit_plan

    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "wm"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes,
        "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(CONV_X))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1536, 96])],
        [
            numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array([1, 1536, 48], np.int64), "shape"),
            numpy_helper.from_array(rng.standard_normal((48, 96)).astype(np.float32), "wm"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    logging.disable(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            onnx.save(model, Path(tmp, "f.onnx"))
            quantize_dynamic(str(Path(tmp, "f.onnx")), str(Path(tmp, "q.onnx")), weight_type=QuantType.QInt8)
            model = onnx.load(str(Path(tmp, "q.onnx")))
    finally:
        logging.disable(logging.NOTSET)
    graph = import_model(model)
    npu = _npu(load_platform_text(PLATFORM.format(sram_kib=32)))
    for op in ("ConvInteger", "MatMulInteger"):
        node = next(n for n in graph.nodes if n.op == op)
        plan = unit_plan([node], graph, (), npu.memory_bytes, tile_rates(npu, 1.0, [node]))
        assert isinstance(plan, TilePlan) and plan.count > 1 and plan.sram_bytes <= 32 * 1024, (op, plan)
        assert plan.moved(Action.STORE) == graph.types[node.outputs[0]].nbytes  # int32, each once
        x_zero_point = [c for c in plan.commands if c.action is Action.LOAD and c.operand == 2]
        assert len(x_zero_point) == 1 and plan.block_of(x_zero_point[0]).nbytes == 1


@pytest.mark.cc
def test_quantize_static_elementwise_layers_run_tiled_on_the_npu_bit_exactly(tmp_path):
    """The quantized Add, lookups and pools of a quantize_static model, pinned to an npu of 2 KiB:
    each runs as tiles whose kernels bake in the model's scales, and the outputs are onnxruntime's."""
    pytest.importorskip("onnxruntime")
    from hetgen.models.quantized import quantized

    logging.disable(logging.WARNING)
    try:
        model = quantized(_elementwise_model(), "QDQ", per_channel=True)
    finally:
        logging.disable(logging.NOTSET)
    platform = load_platform_text(PLATFORM.format(sram_kib=2))
    graph = import_model(model)
    pins = {n.source_name: NPU for n in graph.nodes if n.op.startswith("QLinear") and n.op != "QLinearConv"}
    assert len(pins) == 5
    # the convolution on the controller: on the npu its Add would ride in it (qconv_residual)
    pins |= {n.source_name: "q8t" for n in graph.nodes if n.op == "QLinearConv"}
    document = explain_json(place(graph, platform, pins=pins), graph)
    tiled = {t["unit"]: t["count"] for g in document["groups"] if g["target"] == NPU for t in g["tiling"]}
    ops = {n.name: n.op for n in graph.nodes}
    counts = {ops[unit]: count for unit, count in tiled.items()}
    for op in ("QLinearAdd", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool"):
        assert counts[op] > 1, counts
    out = hetgen.compile(platform, model, out=tmp_path / "g", pins=pins, native_only=True, opt=("-O1",))
    loaded = hetgen.load(out)
    rng = np.random.default_rng(2)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in loaded.inputs}
    got = loaded.run(feeds)
    np.testing.assert_array_equal(got["y"], ort_session(model.SerializeToString()).run(["y"], feeds)[0])


def _residual_block() -> onnx.ModelProto:
    """A 1x1 Conv (the block's input h, computed where the block runs), then h -> 3x3 Conv -> Relu ->
    1x1 Conv -> + h: a basic block that quantize_static turns into QLinearConvs and the QLinearAdd
    of the last one's output and h."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["h"], name="conv0"),
        helper.make_node("Conv", ["h", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2"),
        helper.make_node("Add", ["c2", "h"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "residual_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 24, 24])],
        [
            numpy_helper.from_array(rng.standard_normal((16, 16, 1, 1)).astype(np.float32) * 0.3, "w0"),
            numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.15, "w1"),
            numpy_helper.from_array(rng.standard_normal((16, 16, 1, 1)).astype(np.float32) * 0.3, "w2"),
            numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 0.1, "b2"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.cc
def test_an_int8_residual_block_runs_its_add_in_the_conv_and_its_quantize_in_a_cascade(tmp_path):
    """The last QLinearConv and its QLinearAdd are one group (`qconv_residual`): its tiles load the
    residual's block and the vector unit adds it before the store, so the Add is no launch of its
    own; the input's QuantizeLinear on the npu runs stripe by stripe in a cascade with the first
    Conv; the output is onnxruntime's (ORT_DISABLE_ALL) within one step and the separate CPU
    kernels' bit for bit; the simulator counts the fused engine and agrees with the estimate; in
    too little SRAM the refusal names the unit and the bytes."""
    pytest.importorskip("onnxruntime")
    from bench_support import bench_json
    from hetgen.models.quantized import quantized

    logging.disable(logging.WARNING)
    try:
        model = quantized(_residual_block(), "QDQ", per_channel=True)
    finally:
        logging.disable(logging.NOTSET)
    graph = import_model(model)
    platform = load_platform_text(PLATFORM.format(sram_kib=8))
    # the input's QuantizeLinear on the npu (as on a slow controller) cascades into the first Conv
    (quantize,) = [n for n in graph.nodes if n.op == "QuantizeLinear"]
    pins = {quantize.source_name: NPU}
    document = explain_json(place(graph, platform, pins=pins), graph)
    (fused,) = [g for g in document["groups"] if g["label"] == "qconv_residual"]
    assert fused["target"] == NPU and fused["op_types"] == ["QLinearConv", "QLinearAdd"], fused
    assert fused["tiling"][0]["count"] > 1, fused["tiling"]  # 9 KiB of output alone: rows x channels
    assert not [g for g in document["groups"] if "QLinearAdd" in g["op_types"] and g is not fused]
    assert [c["units"][0] for c in document["cascades"]] == [quantize.name], document["cascades"]

    out = hetgen.compile(platform, model, out=tmp_path / "npu", pins=pins, native_only=True, opt=("-O1",), werror=True)
    host = hetgen.compile("host", model, out=tmp_path / "host", native_only=True, opt=("-O1",))
    assert "HG_SIM_MAC_ARRAY_INT8_RESIDUAL" in "".join(p.read_text() for p in out.rglob("*.c"))
    loaded = hetgen.load(out)
    rng = np.random.default_rng(4)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in loaded.inputs}
    got = loaded.run(feeds)["y"]
    np.testing.assert_array_equal(got, hetgen.load(host).run(feeds)["y"])
    want = ort_session(model.SerializeToString()).run(["y"], feeds)[0]
    step = float(numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "y_scale")))
    assert np.abs(got - want).max() <= step * 1.001, np.abs(got - want).max() / step

    # the simulator counted what it ran (its own cycles, not the estimate), within 15 % of it
    for group in bench_json(out)["groups"]:
        if group["label"] in ("qconv_residual", "cascade: quantize + qconv2d"):
            assert group["simulated_us"] == pytest.approx(group["estimate_us"], rel=0.15), group

    small = load_platform_text(PLATFORM.format(sram_kib=1))
    found = match_patterns(graph, small, build_kernel_specs(graph, small))
    (reason,) = {r.reason for r in found.rejections if r.label == "qconv_residual"}
    assert reason.startswith("does not fit memory: no tiling of QLinearConv with its residual Add fits 1024 bytes"), (
        reason
    )
