"""Splits and Slices as views (hetgen/spec/split_view.py, hetgen/partition/split_views.py,
hetgen/lower/views.py): an output that is a contiguous range of the input is read where the input
is, the Split runs nothing (or, where some outputs must stay copies, copies only those), the cost
model prices it as lowering runs it, the input's buffer lives while any range of it is read, and
every case that must copy does; built, a ShuffleNetV2-like program matches onnxruntime under ASan
and UBSan."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen.partition.choices as choices_module
from hetgen.models import cnn
from hetgen.partition.energy import Counts, counts_nj, placement_energy
from hetgen.platform import load_platform
from test_concat_view import DUAL, host, lowered_of, sanitized_build, source_names
from verify_support import verify_matches

C, HW = 16, 8  # every map: 1 x C x 8 x 8 float32 (256 bytes a channel: ranges on the arena's 64)


def cases_model(C: int = C, HW: int = HW) -> onnx.ModelProto:  # noqa: N803 (the module's names)
    """A ShuffleNetV2 unit (Split -> branch -> Concat -> channel shuffle), a Split whose first
    output is read again after everything else, a Slice of a Split's output (a range of a range),
    a shuffle read by two convolutions (folded into their weights) and one read by a Relu (kept),
    a Slice of a Concat view's output, and Slices that must copy: of a model input, into a model
    output, along the width (not contiguous), with step 2, of maps whose ranges are not aligned."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    half = C // 2

    def conv(name: str, x: str, cin: int, cout: int, kernel: int = 3) -> str:
        w = (rng.standard_normal((cout, cin, kernel, kernel)) / np.sqrt(cin * kernel * kernel)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{name}_w"))
        nodes.append(helper.make_node("Conv", [x, f"{name}_w"], [f"{name}_c"], pads=[kernel // 2] * 4, name=name))
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [name], name=f"{name}_r"))
        return name

    def ints(name: str, values: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def split(name: str, x: str, sizes: list[int]) -> list[str]:
        outs = [f"{name}_{k}" for k in range(len(sizes))]
        nodes.append(helper.make_node("Split", [x, ints(f"{name}_sizes", sizes)], outs, axis=1, name=name))
        return outs

    def slice_(name: str, x: str, start: int, end: int, axis: int = 1, step: int = 1) -> str:
        inputs = [x, ints(f"{name}_s", [start]), ints(f"{name}_e", [end]), ints(f"{name}_a", [axis])]
        nodes.append(helper.make_node("Slice", [*inputs, ints(f"{name}_p", [step])], [name], name=name))
        return name

    stem = conv("stem", "x", 3, C)
    keep, work = split("unit", stem, [half, half])  # the ShuffleNetV2 unit: keep feeds a Concat view
    nodes.append(
        helper.make_node("Concat", [keep, conv("branch", work, half, half)], ["joined"], axis=1, name="joined")
    )
    ints("shape5", [1, 2, half, HW, HW]), ints("shape4", [1, C, HW, HW])

    def shuffle(name: str, x: str) -> str:  # ShuffleNet's channel shuffle, two groups
        nodes.append(helper.make_node("Reshape", [x, "shape5"], [f"{name}_grouped"], name=f"{name}_grouped"))
        perm = [0, 2, 1, 3, 4]
        nodes.append(helper.make_node("Transpose", [f"{name}_grouped"], [f"{name}_t"], perm=perm, name=name))
        nodes.append(helper.make_node("Reshape", [f"{name}_t", "shape4"], [f"{name}_out"], name=f"{name}_out"))
        return f"{name}_out"

    shuffled = shuffle("shuffle", "joined")  # read by a Split: it stays a copy
    first, second = split("halves", shuffled, [half, half])  # both read in place
    early = conv("early", first, half, half)
    quarter = slice_("quarter", second, 0, half // 2)  # a range of a range
    nodes.append(helper.make_node("Add", [slice_("mixed", second, half // 2, half)] * 2, ["twice"], name="twice"))
    deep = conv("deep", conv("mid", quarter, half // 2, half), half, half)
    late = conv("late", first, half, half, kernel=1)  # first read again, after deep: its bytes kept
    u, v = conv("u", stem, C, half), conv("v", stem, C, half)
    nodes.append(helper.make_node("Concat", [u, v], ["uv"], axis=1, name="uv"))
    of_view = conv("of_view_o", slice_("of_view", "uv", half, C), half, 4, kernel=1)  # a range of a Concat view
    copies = [
        conv("of_input_o", slice_("of_input", "x", 1, 2), 1, 4, kernel=1),  # the caller's buffer
        slice_("into_output", stem, 0, 4),  # a model output: the caller's buffer
        conv("along_width_o", slice_("along_width", stem, 0, HW // 2, axis=3), C, 4, kernel=1),
        conv("stepped_o", slice_("stepped", stem, 0, C, step=2), half, 4, kernel=1),
    ]
    pooled = "pooled"
    nodes.append(
        helper.make_node("MaxPool", [stem], [pooled], kernel_shape=[HW // 2] * 2, strides=[HW // 2] * 2, name=pooled)
    )
    copies.append(conv("unaligned_o", slice_("unaligned", pooled, 1, 5), 4, 4, kernel=1))  # 2 x 2: 16 bytes a channel
    nodes.append(helper.make_node("Add", [deep, late], ["tail"], name="tail"))
    mixed_uv = shuffle("mix", "uv")  # read by two convolutions only: folded into their weights
    mixers = [conv("mixer", mixed_uv, C, 4, kernel=1), conv("mixer3", mixed_uv, C, 4)]
    kept = helper.make_node("Relu", [shuffle("kept", stem)], ["kept_r"], name="kept_r")  # a Relu: copies
    nodes.append(kept)
    outputs = ["tail", early, of_view, conv("twice_o", "twice", half // 2, 4, kernel=1), *mixers, "kept_r", *copies]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "splits", [helper.make_tensor_value_info("x", f32, (1, 3, HW, HW))],
        [helper.make_tensor_value_info(name, f32, None) for name in outputs], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


VIEWS = {"halves", "quarter", "mixed", "of_view"}  # with the Concat views joined and uv
PARTLY = {"unit"}  # its keep copied into joined's buffer (a Concat view's input), work read in place
COPIES = {"of_input", "into_output", "along_width", "stepped", "unaligned"}


@pytest.fixture(scope="module")
def lowered_cases(tmp_path_factory):
    platform = load_platform(host(tmp_path_factory.mktemp("platform")))
    return lowered_of(cases_model(), platform)


def test_views_are_decided_once_priced_zero_and_run_nothing(lowered_cases):
    graph, placement, lowered = lowered_cases
    views = [view for view in placement.choices.views if view.kind != "concat view" and view.kernel is None]
    assert source_names(graph, (view.node for view in views)) == VIEWS
    (partly,) = [view for view in placement.choices.views if view.kernel is not None]
    assert source_names(graph, [partly.node]) == PARTLY and partly.parts == (("unit_1", C // 2 * HW * HW * 4),)
    (group,) = [g for g in placement.groups if partly.node in g.nodes]
    assert group.variants == ("copy", "split view") and 0 < group.cost_us < group.searched_us
    assert partly.kernel.bytes_accessed == placement.kernels.unit((partly.node,)).kernel.bytes_accessed / 2
    concats = [view for view in placement.choices.views if view.kind == "concat view"]
    assert source_names(graph, (view.node for view in concats)) == {"joined", "uv"}  # unit's keep: the Split's write
    viewed = {view.node for view in views}
    groups = [g for g in placement.groups if set(g.nodes) & viewed]
    assert groups and all(g.cost_us == 0 and g.launch_us == 0 for g in groups)
    assert {g.variants for g in groups} == {("split view",), ("slice view",)}
    copying = {n.name for n in graph.nodes if n.source_name in COPIES}
    assert all(g.cost_us > 0 for g in placement.groups if set(g.nodes) & copying)
    (root,) = lowered.programs
    kernels = {name for unit in root.units for name in unit.nodes}
    assert not viewed & kernels and copying <= kernels  # a view has no kernel: nothing copies its outputs
    assert next(u.kernel for u in root.units if partly.node in u.nodes) == partly.kernel  # keep's copy only
    assert sum(e.estimate_us for e in lowered.estimates if e.label != "transfer") == pytest.approx(
        sum(g.cost_us for g in placement.groups)
    )


def test_outputs_are_ranges_of_the_input_live_until_their_last_reader(lowered_cases):
    graph, placement, lowered = lowered_cases
    plan = lowered.root.memory
    channel = HW * HW * 4
    source = next(v.holder for v in placement.choices.views if source_names(graph, [v.node]) == {"halves"})
    assert graph.types[source].shape == (1, C // 2, 2, HW, HW)  # the Transpose's output, read through the Reshape
    for tensor, at in (("halves_0", 0), ("halves_1", C // 2), ("quarter", C // 2)):
        assert plan.holder(tensor) == source
        assert plan.offset(tensor) == plan.offset(source) + at * channel
    assert plan.holder("of_view") == "uv" and plan.offset("of_view") == plan.offset("uv") + C // 2 * channel
    # halves_0 is read by `late` after `deep`: the Transpose's buffer is live there, nothing else shares it
    steps = [source_names(graph, unit.nodes) for unit in lowered.root.units]
    assert steps.index({"deep", "deep_r"}) < steps.index({"late", "late_r"})
    start, size = plan.offset(source), graph.types[source].nbytes
    assert plan.holder("deep") == "deep"
    assert plan.offset("deep") >= start + size or plan.offset("deep") + graph.types["deep"].nbytes <= start


def test_with_lean_memory_views_never_lift_the_arena(tmp_path, monkeypatch):
    """memory: lean takes a view only where the target's activation peak does not grow (a Split's
    input lives until its outputs' last reader): the arena is at most the copies' arena, as
    hetgen.json reports it."""
    platform = load_platform(host(tmp_path, "lean"))
    model = cnn.shufflenet(size=32)
    graph, placement, lowered = lowered_of(model, platform)
    monkeypatch.setattr(choices_module, "split_views", lambda *args: ())
    _, copied, copies = lowered_of(model, platform)
    taken = source_names(graph, (v.node for v in placement.choices.views if v.kind != "concat view"))
    assert taken == {"slice_1", "split_1"}  # split_1 copies its first output into the Concat's buffer only
    assert lowered.root.memory.arena_size <= copies.root.memory.arena_size
    assert placement.total_us < copied.total_us


def test_a_reader_on_another_target_keeps_the_copy():
    """On dual, mixed's reader (an Add) pinned to the vector unit: mixed copies (its output leaves
    the host over the link); quarter, a range of the same buffer read on the host, is a view. The
    energy report counts what runs: the partial Split's bytes are its kept copy's, half the Split's."""
    platform = load_platform(DUAL)
    graph, placement, _ = lowered_of(cases_model(), platform, pins={"twice": "dual/vec0"})
    views = {v.node for v in placement.choices.views if v.kind != "concat view"}
    assert source_names(graph, views) == VIEWS - {"mixed"} | PARTLY
    (partly,) = [v for v in placement.choices.views if v.kernel is not None]
    (group,) = [g for g in placement.groups if g.nodes == (partly.node,)]
    host_target = next(t for t in platform.root.walk() if t.path_str == group.target)
    copied = partly.kernel.bytes_accessed
    assert copied == placement.kernels.unit((partly.node,)).kernel.bytes_accessed / 2
    energy = dict(placement_energy(placement, graph, platform).groups_nj)
    assert energy[group.name] == pytest.approx(counts_nj(host_target, Counts(0.0, 0.0, copied)))


# memory, layout, channels, size: NCHW8c runs (Winograd declined), 40 channels a map, so halves
# splits 20 + 20 and quarter takes 10 of them: ranges that start and end inside blocks of 8 (a
# Split reads NCHW: a blocked producer's reorder back writes its input, and a blocked reader's
# reorder reads its range)
BLOCKED = ("lean", "nchw8c", 40, 16)


def test_blocked_readers_read_ranges_off_the_blocks_through_their_reorders(tmp_path):
    """(Under lean memory halves and of_view decline: their inputs would live longer at the peak.)"""
    platform = load_platform(host(tmp_path, *BLOCKED[:2]))
    graph, placement, lowered = lowered_of(cases_model(*BLOCKED[2:]), platform)
    views = [v for v in placement.choices.views if v.kind != "concat view"]
    assert source_names(graph, (v.node for v in views)) == {"quarter", "mixed"} | PARTLY
    blocked_in = {r.tensor for c in placement.choices.units for r in c.reorders if r.to_blocked}
    assert {"quarter", "unit_1"} <= blocked_in  # mid and branch run NCHW8c: their reorders read the ranges
    plan = lowered.root.memory
    assert plan.holder("quarter") == "halves_1" and plan.offset("quarter") == plan.offset("halves_1")
    assert plan.offset("mixed") == plan.offset("halves_1") + 10 * 16 * 16 * 4


@pytest.mark.cc
@pytest.mark.parametrize("how", [("fast", "nchw", C, HW), BLOCKED], ids=["nchw", "nchw8c"])
def test_views_match_onnxruntime_under_sanitizers(tmp_path, how):
    """Built with ASan and UBSan: every output matches onnxruntime (nchw8c: ranges off the blocks,
    read through the reorders into blocked runs)."""
    memory, layout, channels, size = how
    verify_matches(sanitized_build(tmp_path, cases_model(channels, size), memory, layout))


def test_a_shuffle_read_by_convolutions_only_folds_into_their_weights(lowered_cases):
    """hetgen/frontend/fold_shuffle.py: mix (read by a 1x1 and a 3x3 convolution) is gone, each
    convolution reading uv with its weights' input channels permuted; the shuffles read by a Split
    and by a Relu stay (the sanitized builds check the values)."""
    graph, _, _ = lowered_cases
    chains = {name for name in ("shuffle", "mix", "kept") if any(n.source_name == name for n in graph.nodes)}
    assert chains == {"shuffle", "kept"} and {"mix", "mix_grouped", "mix_out"} <= graph.removed_sources
    readers = {n.source_name: n for n in graph.nodes if n.source_name in ("mixer", "mixer3")}
    assert all(node.inputs[0] == "uv" and node.inputs[1].endswith("__permuted_weight") for node in readers.values())
