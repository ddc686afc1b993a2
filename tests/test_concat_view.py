"""Concats as views (hetgen/partition/concat_views.py, hetgen/lower/views.py): a Concat whose
inputs are contiguous ranges of its output runs nothing, its producers write their ranges, the
cost model prices it 0 exactly where lowering drops it, nested ones are one buffer, and every
case that must copy does; built, the program matches onnxruntime under ASan and UBSan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
import hetgen.partition.choices as choices_module
from hetgen.frontend import import_model
from hetgen.lower import lower
from hetgen.models import cnn
from hetgen.partition import place
from hetgen.platform import load_platform
from hetgen.spec import build_kernel_specs
from verify_support import verify_matches

REPO = Path(__file__).resolve().parent.parent
DUAL = REPO / "platforms" / "dual.yaml"
C, HW = 8, 8  # every map: 1 x C x 8 x 8 float32 (256 bytes a channel: ranges on the arena's 64)


def host(tmp_path: Path, memory: str = "fast", layout: str = "nchw") -> Path:
    path = tmp_path / f"host-{memory}-{layout}.yaml"
    path.write_text(
        f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{memory: {memory}, layout: {layout}}}\n"
    )
    return path


def cases_model(C: int = C, HW: int = HW) -> onnx.ModelProto:  # noqa: N803 (the module's names)
    """A dense block of three nested Concats (y0 read again after the last one), a tensor two
    Concats read, and Concats that must copy: of a model input, of a constant, of a model output,
    into a model output, along the width (not contiguous), of maps whose ranges are not aligned."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(name: str, x: str, cin: int, cout: int, kernel: int = 3, relu: bool = True) -> str:
        w = (rng.standard_normal((cout, cin, kernel, kernel)) / np.sqrt(cin * kernel * kernel)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{name}_w"))
        pad = kernel // 2
        nodes.append(helper.make_node("Conv", [x, f"{name}_w"], [f"{name}_c"], pads=[pad] * 4, name=name))
        if not relu:
            return f"{name}_c"
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [name], name=f"{name}_r"))
        return name

    def concat(name: str, inputs: list[str], axis: int = 1) -> str:
        nodes.append(helper.make_node("Concat", inputs, [name], axis=axis, name=name))
        return name

    stem = conv("stem", "x", 3, C)
    h, channels = stem, C
    for k in range(3):  # h_k = Concat(h_{k-1}, y_k): one buffer, each layer writing its range
        y = conv(f"y{k}", h, channels, C)
        h, channels = concat(f"h{k}", [h, y]), channels + C
    late = conv("late", "y0", C, 4, kernel=1, relu=False)  # y0 read after every Concat of the block
    out = helper.make_node("Add", [conv("head", h, channels, 4, relu=False), late], ["dense"], name="dense")
    nodes.append(out)
    u, v, w = (conv(name, stem, C, C) for name in ("u", "v", "w"))
    both = [conv(f"{c}_o", concat(c, parts), 2 * C, 4, relu=False) for c, parts in (("a", [u, v]), ("b", [w, u]))]
    fixed = rng.standard_normal((1, C, HW, HW)).astype(np.float32)
    inits.append(numpy_helper.from_array(fixed, "fixed"))
    p, q, r, s, t, z = (conv(name, stem, C, C) for name in ("p", "q", "r", "s", "t", "z"))
    copies = {  # each Concat -> the channels of its output
        concat("of_input", ["x", q]): 3 + C,
        concat("of_constant", ["fixed", r]): 2 * C,
        concat("of_output", [s, p]): 2 * C,  # p is a model output
        concat("along_width", [t, z], axis=3): C,  # 1 x 8 x 8 x 16: rows of each input alternate
    }
    heads = [conv(f"{name}_o", name, channels, 4, 1, False) for name, channels in copies.items()]
    small = [conv(f"m{k}", conv(f"g{k}", stem, C, 1, kernel=1), 1, 1, kernel=1) for k in range(2)]
    for name in small:
        nodes.append(helper.make_node("MaxPool", [name], [f"{name}p"], kernel_shape=[3, 3], strides=[3, 3]))
    unaligned = conv("unaligned_o", concat("unaligned", ["m0p", "m1p"]), 2, 2, 1, False)  # 1x1x2x2: 16 bytes each
    into_output = concat("into_output", [conv("i", stem, C, C), conv("j", stem, C, C)])
    outputs = ["dense", *both, *heads, "p", unaligned, into_output]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "concats", [helper.make_tensor_value_info("x", f32, (1, 3, HW, HW))],
        [helper.make_tensor_value_info(name, f32, None) for name in outputs], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


VIEWS = {"h0", "h1", "h2", "a"}  # b reads u, which a holds; every other Concat copies
COPIES = {"b", "of_input", "of_constant", "of_output", "along_width", "unaligned", "into_output"}


def lowered_of(model, platform, pins=None):
    graph = import_model(model)
    placement = place(graph, platform, pins=pins or {}, kernels=build_kernel_specs(graph, platform))
    return graph, placement, lower(graph, platform, placement)


def source_names(graph, names) -> set[str]:
    by_name = {node.name: node.source_name for node in graph.nodes}
    return {by_name[name] for name in names}


@pytest.fixture(scope="module")
def lowered_cases(tmp_path_factory):
    platform = load_platform(host(tmp_path_factory.mktemp("platform")))
    return lowered_of(cases_model(), platform)


def test_views_are_decided_once_priced_zero_and_run_nothing(lowered_cases):
    graph, placement, lowered = lowered_cases
    views = placement.choices.views
    assert source_names(graph, (view.node for view in views)) == VIEWS
    viewed = {view.node for view in views}
    groups = [g for g in placement.groups if set(g.nodes) & viewed]
    assert groups and all(g.cost_us == 0 and g.launch_us == 0 and g.variants == ("concat view",) for g in groups)
    assert all(
        g.cost_us > 0
        for g in placement.groups
        if set(g.nodes) & {n.name for n in graph.nodes if n.source_name in COPIES}
    )
    (root,) = lowered.programs
    concats = [unit for unit in root.units if "Concat" in unit.label]
    assert len(concats) == len(COPIES)  # a view has no kernel: nothing copies its inputs
    assert not viewed & {name for unit in root.units for name in unit.nodes}
    assert sum(e.estimate_us for e in lowered.estimates if e.label != "transfer") == pytest.approx(
        sum(g.cost_us for g in placement.groups)
    )


def test_a_dense_block_is_one_buffer_each_layer_writing_its_range(lowered_cases):
    graph, placement, lowered = lowered_cases
    plan = lowered.root.memory
    output = {name: name for name in graph.types}  # the model's tensor names
    channel = HW * HW * 4
    block = output["h2"]
    for tensor, at in (("stem", 0), ("y0", C), ("y1", 2 * C), ("y2", 3 * C), ("h0", 0), ("h1", 0)):
        assert plan.holder(output[tensor]) == block
        assert plan.offset(output[tensor]) == plan.offset(block) + at * channel
    # u is a range of a's output only; b copies it from there
    assert plan.holder(output["u"]) == output["a"] and plan.holder(output["w"]) == output["w"]
    holders = {name for name, _, _ in plan.buffers if plan.holder(name) == name}
    assert plan.lower_bound <= plan.arena_size and plan.total_bytes == sum(
        nbytes for name, _, nbytes in plan.buffers if name in holders
    )


def test_with_lean_memory_views_never_lift_the_arena(tmp_path, monkeypatch):
    """memory: lean (the default) takes a view only where the target's activation peak does not grow
    (a view's output is live from its first input on): the arena is at most the copies' arena."""
    platform = load_platform(host(tmp_path, "lean"))
    model = cnn.googlenet(size=32)
    graph, placement, lowered = lowered_of(model, platform)
    monkeypatch.setattr(choices_module, "concat_views", lambda *args: ())
    _, copied, copies = lowered_of(model, platform)
    assert 0 < len(placement.choices.views) < 3  # of its three Concats
    assert lowered.root.memory.arena_size <= copies.root.memory.arena_size
    assert placement.total_us < copied.total_us


def test_an_input_made_on_another_target_keeps_the_copy():
    """On dual, y1's Relu pinned to the vector unit: h1 copies (its input is made there); h0 and h2,
    whose inputs the host makes (h1's output by h1's copy), are views."""
    platform = load_platform(DUAL)
    graph, placement, lowered = lowered_of(cases_model(), platform, pins={"y1_r": "dual/vec0"})
    assert source_names(graph, (view.node for view in placement.choices.views)) == VIEWS - {"h1"}


def test_blocked_producers_write_their_ranges_through_the_reorder_back(tmp_path):
    """With NCHW8c runs, a Concat still reads NCHW: a blocked producer's reorder back to NCHW, which
    the choice stage inserts for the Concat as for any plain reader, writes the range."""
    platform = load_platform(host(tmp_path, *BLOCKED[:2]))
    graph, placement, lowered = lowered_of(cases_model(*BLOCKED[2:]), platform)
    parts = {part for view in placement.choices.views for part, _ in view.parts}
    reordered = {r.tensor for c in placement.choices.units for r in c.reorders if not r.to_blocked}
    assert parts & reordered
    plan = lowered.root.memory
    assert all(plan.holder(name) != name for name in parts & reordered)


# memory, layout, channels, size: NCHW8c runs (Winograd declined), 20 channels a map, so the ranges
# start and end inside blocks of 8 (each blocked producer's 24 padded channels reordered back to 20)
BLOCKED = ("lean", "nchw8c", 20, 16)


@pytest.mark.cc
@pytest.mark.parametrize("how", [("fast", "nchw", C, HW), BLOCKED], ids=["nchw", "nchw8c"])
def test_views_match_onnxruntime_under_sanitizers(tmp_path, how):
    """Built with ASan and UBSan (nchw8c: ranges written by the reorders back from blocked runs):
    every output matches onnxruntime."""
    memory, layout, channels, size = how
    verify_matches(sanitized_build(tmp_path, cases_model(channels, size), memory, layout))


def sanitized_build(tmp_path: Path, model: onnx.ModelProto, memory: str, layout: str) -> Path:
    """`model` built for the host (`memory`, `layout`) with ASan and UBSan, warnings as errors."""
    return hetgen.compile(
        host(tmp_path, memory, layout),
        model,
        out=tmp_path / "out",
        native_only=True,
        werror=True,
        sanitize=("address", "undefined"),
        opt=("-O1",),
    )
