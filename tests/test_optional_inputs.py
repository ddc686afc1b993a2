"""Omitted optional inputs, operator by operator (tests/optional_inputs.py), on every shipped platform.

Every case is generated for every platform in platforms/ (unpinned, and pinned to each accelerator
whose patterns start with the operator, so the tiling and fused-epilogue paths see the omission):
unpinned it must generate; pinned it may also be refused, as one PlacementError that names the node.
A representative subset is built and run and compared with onnxruntime (graph optimisations off).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import optional_inputs
from fuzz_cases import pinnable_targets
from fuzz_graphs import REPO

PLATFORMS = tuple(sorted(p.stem for p in (REPO / "platforms").glob("*.yaml")))
CASES = {case.id: case for case in optional_inputs.cases()}


@functools.cache
def platform(name: str):
    from hetgen.platform.loader import load_platform

    return load_platform(REPO / "platforms" / f"{name}.yaml")


def generate(case: optional_inputs.Case, graph, platform_name: str, pins: dict[str, str], tmp_path):
    """Every generated file of `case` (imported as `graph`) on the platform, in memory (no toolchain,
    no build)."""
    from hetgen.pipeline import CompileOptions, generate_files

    options = CompileOptions(out=tmp_path, pins=pins)
    return generate_files(platform(platform_name), graph, options, case.model, tmp_path)


def test_every_supported_operator_with_optional_inputs_has_a_case():
    """The cases cover each registered operator whose ONNX schema has an optional input (newest
    opset), but those whose only optional inputs need something the table says it leaves out."""
    import onnx

    from hetgen.ops.registry import supported_ops

    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    wanted = set()
    for op in supported_ops():
        try:
            schema = onnx.defs.get_schema(op)
        except onnx.defs.SchemaError:  # a contrib (com.microsoft) operator: listed by hand below
            continue
        if any(formal.option == optional for formal in schema.inputs):
            wanted.add(op)
    covered = {spec.op for spec in optional_inputs.SPECS}
    left_out = {"Loop", "LinearAttention", "CausalConvWithState"}  # see optional_inputs.LEFT_OUT
    assert wanted - covered == left_out, sorted(wanted - covered)
    assert set(optional_inputs.LEFT_OUT) == left_out


@pytest.mark.usefixtures("templates_compiled_once")  # generates many projects (conftest.py)
@pytest.mark.parametrize("case_id", sorted(CASES))
def test_an_omitted_optional_input_generates_on_every_platform(case_id, tmp_path):
    from hetgen.errors import PlacementError
    from hetgen.pipeline import import_graph

    case = CASES[case_id]
    graph = import_graph(case.model, {})  # a frozen value: imported once, placed on every platform
    for name in PLATFORMS:
        generate(case, graph, name, {}, tmp_path / name)
        for path, heads in pinnable_targets(platform(name)):
            if heads is None or case.spec.op not in heads:
                continue
            try:
                generate(case, graph, name, {"node": path}, tmp_path / f"{name}-pinned")
            except PlacementError as exc:  # the accelerator's predicates refuse it: clearly, naming the node
                assert "'node'" in str(exc) and "internal error" not in str(exc), str(exc)


# Built, run and compared with onnxruntime: on the host, and where an accelerator claims the
# operator, on it (soc's NPU behind a co-processor, dual's NPU and vector unit).
RUN = (
    ("Clip-omit1", "host", None),
    ("Clip-omit1", "soc", None),  # the NPU's elementwise tiling once read the omitted min's size
    ("Clip-omit1+2", "dual", None),
    ("Clip#2-omit2-trailing", "host", None),
    ("Conv-omit2", "soc", "soc/vdevice0/npu0"),
    ("Conv-omit2-trailing", "dual", "dual/npu0"),
    ("Conv#2-omit2", "dual", "dual/npu0"),  # tiled by rows: the kernels once read the output at the bias's slot
    ("Gemm-omit2", "soc", "soc/vdevice0/npu0"),
    ("Gemm-omit2-trailing", "host", None),
    ("LayerNormalization-omit2", "host", None),
    ("LSTM-omit3+4+5+6+7", "host", None),
    ("GRU-omit4", "host", None),
    ("Resize-omit1+2", "host", None),
    ("Slice-omit3+4-trailing", "host", None),
    ("Split-omit1-trailing", "host", None),
    ("Pad-omit2", "host", None),
    ("DequantizeLinear-omit2-trailing", "host", None),
    ("NonMaxSuppression-omit2+3+4-trailing", "host", None),
    ("Attention-omit3+4+5", "host", None),
    ("ReduceSum#2-omit1-trailing", "host", None),
)


@pytest.mark.cc
@pytest.mark.parametrize(
    ("case_id", "platform_name", "pin"),
    [pytest.param(*run, marks=pytest.mark.external) if run[1] == "soc" else run for run in RUN],  # soc: cross built
    ids=[f"{c}-{p}" for c, p, _ in RUN],
)
def test_an_omitted_optional_input_matches_onnxruntime(case_id, platform_name, pin, tmp_path):
    from fuzz_cases import FuzzCase, run_case

    case = CASES[case_id]
    file = REPO / "platforms" / f"{platform_name}.yaml"
    fuzz_case = FuzzCase(case.model, case.feeds, file.read_text(), str(file), {"node": pin} if pin else {})
    outcome = run_case(fuzz_case, tmp_path / "out")
    assert outcome.status == "pass", f"{outcome.status}: {outcome.reason}\n{outcome.detail}"


# Where onnxruntime refuses or crashes on the omission itself (a segfault for DFT without its axis,
# "Axes input is null" for Squeeze(x, ""), "input count mismatch" for MaxUnpool(x, i, ""), type
# inference errors or an assertion for the contrib operators' omitted zero points), hetgen's result
# is compared with onnxruntime's for the same node with the omitted input's default given.
DEFAULTED = (
    "DFT-omit1+2",
    "Squeeze-omit1",
    "MaxUnpool-omit2",
    "com.microsoft.QLinearAdd-omit2+5+7",
    "com.microsoft.QLinearMul-omit5+7-trailing",
    "com.microsoft.QLinearSigmoid-omit2+4-trailing",
    "com.microsoft.QLinearGlobalAveragePool-omit2+4",
    "com.microsoft.QLinearAveragePool-omit2",
)


@pytest.mark.cc
@pytest.mark.parametrize("case_id", DEFAULTED)
def test_an_omitted_input_means_its_default(case_id, tmp_path):
    import hetgen
    from hetgen.runtime.reference import ort_session

    case = CASES[case_id]
    expected = ort_session(optional_inputs.with_defaults(case).SerializeToString()).run(None, case.feeds)
    out = hetgen.compile(
        REPO / "platforms" / "host.yaml",
        case.model,
        out=tmp_path / "out",
        opt=("-O1",),
        native_tuning=False,
        native_only=True,
    )
    got = hetgen.load(out).run(case.feeds)
    for info, wanted in zip(case.model.graph.output, expected):
        np.testing.assert_allclose(got[info.name], wanted, rtol=1e-5, atol=1e-5)


def test_cases_omit_inputs_both_ways():
    """An omission is written as "" in the middle and, at the end, also left off."""
    clip = [c for c in CASES.values() if c.spec.op == "Clip" and c.omitted == {2}]
    forms = {tuple(node.input) for c in clip for node in c.model.graph.node}
    assert ("in0", "in1", "") in forms and ("in0", "in1") in forms
