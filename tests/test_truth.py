"""One truth for each fact: the platform file's placement options meet the caller's in one place,
an activation means the same fused or not, and the Python encoders use the C runtime's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.frontend import import_model
from hetgen.partition.search import place
from hetgen.pipeline import CompileOptions, options_argv
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session
from test_platform_placement import conv_model  # on soc: cost keeps it on the host, greedy sends it to the npu

REPO = Path(__file__).resolve().parent.parent
NPU = "soc/vdevice0/npu0"


def soc_with(options: str) -> str:
    return (REPO / "platforms" / "soc.yaml").read_text() + options


def targets_by_source(placement, graph) -> dict[str, str]:
    return {node.source_name: placement.target_of(node.name) for node in graph.nodes}


# -- options.placement and --pin: the caller's argument, over the file's, over the default ------------


def test_platform_placement_option_is_honoured_and_an_explicit_mode_beats_it():
    graph = import_model(conv_model(16, 8))
    plain = load_platform_text(soc_with(""))
    greedy_file = load_platform_text(soc_with("options: {placement: greedy}\n"))
    assert targets_by_source(place(graph, plain), graph)["conv"] == "soc"  # default: cost
    by_file = place(graph, greedy_file)
    assert by_file.mode == "greedy" and targets_by_source(by_file, graph)["conv"] == NPU
    by_argument = place(graph, greedy_file, mode="cost")
    assert by_argument.mode == "cost" and targets_by_source(by_argument, graph)["conv"] == "soc"


def test_explain_says_which_search_ran_from_the_platform_file(tmp_path, cli):
    (tmp_path / "p.yaml").write_text(soc_with("options: {placement: greedy}\n"))
    onnx.save(conv_model(16, 8), tmp_path / "m.onnx")
    base = ["explain", tmp_path / "p.yaml", tmp_path / "m.onnx"]
    by_file = cli(*base)
    assert by_file.returncode == 0, by_file.stderr
    assert "(greedy mode" in by_file.stdout.splitlines()[0]
    assert f"{NPU}  [" in by_file.stdout
    by_flag = cli(*base, "--placement", "cost")
    assert by_flag.returncode == 0, by_flag.stderr
    assert "(cost mode" in by_flag.stdout.splitlines()[0] and NPU + "  [" not in by_flag.stdout


def test_regenerate_rule_leaves_the_mode_to_the_platform_file_unless_one_was_given():
    assert "--placement" not in options_argv(CompileOptions())
    argv = options_argv(CompileOptions(placement="greedy"))
    assert argv[argv.index("--placement") + 1] == "greedy"


def test_cli_pins_add_to_the_file_pins_and_override_the_same_node(tmp_path, cli):
    # The file pins the convolution to the npu; the command line pins the relu to the co-processor.
    (tmp_path / "p.yaml").write_text(soc_with("options:\n  pins: {conv: vdevice0/npu0}\n"))
    onnx.save(conv_model(16, 8), tmp_path / "m.onnx")
    base = ["explain", tmp_path / "p.yaml", tmp_path / "m.onnx"]

    def targets(*extra):
        result = cli(*base, *extra, "--format", "json")
        assert result.returncode == 0, result.stderr
        graph = import_model(conv_model(16, 8))
        source = {node.name: node.source_name for node in graph.nodes}
        return {source[op]: group["target"] for group in json.loads(result.stdout)["groups"] for op in group["ops"]}

    assert targets() == {"conv": NPU, "relu": NPU}
    assert targets("--pin", "relu=soc/vdevice0") == {"conv": NPU, "relu": "soc/vdevice0/host"}
    assert targets("--pin", "conv=soc") == {"conv": "soc", "relu": "soc"}  # the command line wins


def test_api_pins_add_to_the_file_pins():
    graph = import_model(conv_model(16, 8))
    platform = load_platform_text(soc_with("options:\n  pins: {conv: vdevice0/npu0}\n"))
    merged = targets_by_source(place(graph, platform, pins={"relu": "soc"}), graph)
    assert merged == {"conv": NPU, "relu": "soc"}


# -- a fused activation means what the standalone one means ---------------------------------------

ACTIVATIONS = [
    ("Relu", {}),
    ("LeakyRelu", {"alpha": 0.07}),
    ("Sigmoid", {}),
    ("Tanh", {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}),
    ("Clip", {"bounds": (-0.6, 0.5)}),
    ("Clip", {"bounds": (0.5, -0.5)}),  # lo > hi: the result is hi everywhere, as numpy and onnxruntime
]


def activation_model(with_pre_activation_outputs: bool) -> onnx.ModelProto:
    """x -> Conv -> act and x -> Gemm -> act, once per activation. With the producers' outputs also
    graph outputs, nothing can fuse; without, every activation fuses into its producer's epilogue."""
    rng = np.random.default_rng(1)
    initializers = [
        numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 2).astype(np.float32), "cw"),
        numpy_helper.from_array((rng.standard_normal((48, 24)) * 0.5).astype(np.float32), "gw"),
    ]
    nodes = [helper.make_node("Flatten", ["x"], ["flat"], axis=1, name="flatten")]
    outputs = []
    for index, (op, attrs) in enumerate(ACTIVATIONS):
        for producer in ("conv", "gemm"):
            pre, post = f"{producer}{index}", f"{producer}{index}_{op.lower()}"
            if producer == "conv":
                nodes.append(helper.make_node("Conv", ["x", "cw"], [pre], pads=[1, 1, 1, 1], name=pre))
            else:
                nodes.append(helper.make_node("Gemm", ["flat", "gw"], [pre], name=pre))
            inputs = [pre]
            if op == "Clip":
                lo, hi = attrs["bounds"]
                for name, value in ((f"{post}_lo", lo), (f"{post}_hi", hi)):
                    initializers.append(numpy_helper.from_array(np.array(value, np.float32), name))
                    inputs.append(name)
            node_attrs = {k: v for k, v in attrs.items() if k != "bounds"}
            nodes.append(helper.make_node(op, inputs, [post], name=post, **node_attrs))
            outputs.append(post)
            if with_pre_activation_outputs:
                outputs.append(pre)
    shapes = {name: [1, 4, 4, 4] if name.startswith("conv") else [1, 24] for name in outputs}
    graph = helper.make_graph(
        nodes,
        "activations",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shapes[name]) for name in outputs],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.cc
def test_fused_and_standalone_activations_are_bit_identical_and_match_onnxruntime(tmp_path):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((1, 3, 4, 4)) * 8).astype(np.float32)  # wide: both tails of each curve
    results, kernels = {}, {}
    for form, unfused in (("fused", False), ("standalone", True)):
        model = activation_model(unfused)
        out = hetgen.compile("host", model, out=tmp_path / form, opt=("-O1",), native_only=True)
        kernels[form] = json.loads((out / "hetgen.json").read_text())["targets"][0]["kernels"]
        results[form] = hetgen.load(out).run({"x": x})
        expected = dict(
            zip((o.name for o in model.graph.output), ort_session(model.SerializeToString()).run(None, {"x": x}))
        )
        for name, value in results[form].items():
            np.testing.assert_allclose(value, expected[name], rtol=2e-6, atol=2e-6, err_msg=f"{form} {name}")
    assert kernels["fused"] == kernels["standalone"] - 2 * len(ACTIVATIONS)  # every activation fused
    for name, fused in results["fused"].items():
        standalone = results["standalone"][name]
        assert fused.tobytes() == standalone.tobytes(), f"{name}: fused and standalone differ"


# -- explain: the text and the JSON say the same things -------------------------------------------


def explained_cases():
    from test_partition import explained  # a transformer on soc: alternatives, transfers, unclaimed ops
    from test_platform_placement import npu_platform

    yield explained()
    # An npu too small for the convolution: a memory-fit refusal with its numbers.
    small = load_platform_text(npu_platform(32, 1, sram_kib=4))  # not even one tile fits
    graph = import_model(conv_model(32, 16))
    yield graph, place(graph, small)


def json_strings(value) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(json_strings(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(json_strings(v) for v in value)) if value else set()
    return set()


def test_every_reason_in_the_text_is_in_the_json():
    from hetgen.partition.explain import explain_json, explain_text

    checked = 0
    for graph, placement in explained_cases():
        text, document = explain_text(placement, graph), explain_json(placement, graph)
        groups = {group["name"]: group for group in document["groups"]}
        group = None
        for line in text.splitlines():
            if head := re.match(r"(g\d+)  (\S+)  \[", line):
                group = groups[head.group(1)]
                assert group["target"] == head.group(2)
            elif lost := re.match(r"    (?:runner-up|lost): (\S+) \[(.*?)\] ([\d.]+) us, (.*)$", line):
                target, label, cost, why = lost.groups()
                assert any(
                    (a["target"], a["label"], a["why"]) == (target, label, why)
                    and abs(a["cost_us"] - float(cost)) <= 0.051
                    for a in group["alternatives"]
                ), line
            elif refused := re.match(r"    refused: (\S+) on (\S+): (.*)$", line):
                assert any((r["node"], r["target"], r["text"]) == refused.groups() for r in group["refused"]), line
            elif why := re.match(r"    why: (.*)$", line):
                assert group["reason"] == why.group(1)
            elif copy := re.match(r"    copies (\S+): (\S+) -> (\S+), .*, ([\d.]+) us$", line):
                assert any(
                    (t["tensor"], t["src"], t["dst"], f"{t['cost_us']:.1f}") == copy.groups() and t["route"] in line
                    for t in group["transfers"]
                ), line
            elif launch := re.match(r"    launch: ([\d.]+) us", line):
                assert f"{group['launch_us']:.1f}" == launch.group(1)
            elif weights := re.match(r"    weights: .* by DMA, ([\d.]+) us of", line):
                assert f"{group['weight_loads']['us']:.1f}" == weights.group(1) and group["weight_loads"]["bytes"] > 0
            elif unclaimed := re.match(r"  (\S+) \((\w+)\): (.*)$", line):
                entry = next(u for u in document["unclaimed"] if u["node"] == unclaimed.group(1))
                assert entry["reason"] == unclaimed.group(3) and entry["op"] == unclaimed.group(2)
                for refusal in entry["refusals"]:
                    assert f"{refusal['target']}: {refusal['text']}" in unclaimed.group(3)
            else:
                continue
            checked += 1
        assert all(
            reason in json_strings(document) for reason in re.findall(r"(does not fit memory: .*?)(?:;|$)", text)
        )
    assert checked > 60  # the patterns above really read the text


def test_json_gives_refusals_with_numbers_launches_and_the_transfers_each_group_caused():
    from hetgen.partition.explain import explain_json

    (transformer_graph, transformer), (conv_graph, conv) = explained_cases()
    document = explain_json(conv, conv_graph)
    conv_group = next(g for g in document["groups"] if "Conv" in g["op_types"])
    memory = next(r for r in conv_group["refused"] if r["label"] == "conv2d")
    assert memory["target"] == "p/npu0" and "no tiling of Conv fits 4096 bytes" in memory["reason"]
    assert "the smallest tiling needs" in memory["reason"] and "of p/npu0" in memory["reason"]
    unclaimed = {u["node"]: u for u in document["unclaimed"]}
    assert {r["target"] for r in unclaimed[conv_group["ops"][0]]["refusals"]} == {"p/npu0"}

    document = explain_json(transformer, transformer_graph)
    charged = [t for g in document["groups"] for t in g["transfers"]]
    assert sorted(json.dumps(t, sort_keys=True) for t in charged) == sorted(
        json.dumps(t, sort_keys=True) for t in document["transfers"]
    )  # each transfer charged to exactly one group
    assert document["transfer_us"] == pytest.approx(sum(g["transfer_us"] for g in document["groups"]))
    for transfer in document["transfers"]:  # each copy: over the co-processor's link, or by the npu's DMA
        assert [link["below"] for link in transfer["links"]] + [dma["target"] for dma in transfer["dma"]] in (
            ["soc/vdevice0"],
            ["soc/vdevice0/npu0"],
        )
        hops = sum(
            link["latency_us"] + transfer["bytes"] / (link["bandwidth_gbps"] * 1e3) for link in transfer["links"]
        ) + sum(transfer["bytes"] / (dma["bandwidth_gbps"] * 1e3) for dma in transfer["dma"])
        assert transfer["cost_us"] == pytest.approx(hops, abs=5e-4)  # JSON times: to 1 ns
    launches = {g["target"]: g["launch_us"] for g in document["groups"]}
    # the platform's launch_us figures (the co-processor runs work only where it overlaps the npu's)
    assert launches.items() <= {"soc": 1.0, "soc/vdevice0/host": 2.0, "soc/vdevice0/npu0": 5.0}.items()
    assert {"soc", "soc/vdevice0/npu0"} <= set(launches)
    assert document["launch_us"] == pytest.approx(sum(g["launch_us"] for g in document["groups"]))
    assert all(g["launch_us"] <= g["cost_us"] for g in document["groups"])
    softmax = next(u for u in document["unclaimed"] if u["op"] == "Softmax")
    assert softmax["refusals"] == [
        {
            "node": softmax["node"],
            "target": "soc/vdevice0/npu0",
            "label": "",
            "reason": "no pattern matches Softmax here",
            "text": "no pattern matches Softmax here",
        }
    ]
