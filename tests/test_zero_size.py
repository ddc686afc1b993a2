"""Tensors with a dimension of 0 (tests/zero_size.py): each case generates on every shipped platform
(unpinned, and pinned to each accelerator whose patterns start with the operator), and built and run
it matches onnxruntime with graph optimisations off; where onnxruntime refuses the model (pooling
over a tensor whose channels or window are empty: "Only N can be zero"), it matches onnx's
reference evaluator instead. hetgen computes every case: none is refused.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import zero_size
from fuzz_cases import FuzzCase, pinnable_targets, run_case
from fuzz_graphs import REPO

PLATFORMS = tuple(sorted(p.stem for p in (REPO / "platforms").glob("*.yaml")))
ONNXRUNTIME_REFUSES = {"maxpool_empty_channels", "global_avgpool_empty_channels", "global_avgpool_over_empty"}


@functools.cache
def platform(name: str):
    from hetgen.platform.loader import load_platform

    return load_platform(REPO / "platforms" / f"{name}.yaml")


def pinned_paths(name: str, op: str) -> list[str]:
    return [path for path, heads in pinnable_targets(platform(name)) if heads is not None and op in heads]


@pytest.mark.usefixtures("templates_compiled_once")  # generates many projects (conftest.py)
@pytest.mark.parametrize("case", sorted(zero_size.CASES))
def test_an_empty_tensor_generates_on_every_platform(case, tmp_path):
    from hetgen.errors import PlacementError
    from hetgen.pipeline import CompileOptions, generate_files, import_graph

    model, _ = zero_size.CASES[case]()
    op = model.graph.node[0].op_type
    graph = import_graph(model, {})  # a frozen value: imported once, placed on every platform
    for name in PLATFORMS:
        for path in (None, *pinned_paths(name, op)):
            options = CompileOptions(out=tmp_path, pins={"node": path} if path else {})
            try:
                generate_files(platform(name), graph, options, model, tmp_path)
            except PlacementError as exc:  # an accelerator's predicates may refuse it, naming the node
                assert path is not None and "'node'" in str(exc), str(exc)


RUN = [(case, "host", None) for case in sorted(zero_size.CASES)]
RUN += [
    ("conv_no_output_channels", "soc", "soc/vdevice0/npu0"),  # tiling divided by the 0 channels
    ("conv_empty_batch", "soc", "soc/vdevice0/npu0"),  # no tiles at all: a max() of nothing
    ("gemm_no_columns", "soc", "soc/vdevice0/npu0"),
    ("matmul_over_empty_k", "dual", "dual/npu0"),
    ("add_broadcast_empty", "dual", "dual/vec0"),
    ("avgpool_empty_batch", "soc", "soc/vdevice0/npu0"),
    ("conv_no_output_channels_bias", "mcu-npu", None),
]


CROSS_BUILT = {"soc", "mcu-npu"}  # their board builds run the cross compilers (run_case builds them)


@pytest.mark.cc
@pytest.mark.parametrize(
    ("case", "platform_name", "pin"),
    [pytest.param(*run, marks=pytest.mark.external) if run[1] in CROSS_BUILT else run for run in RUN],
    ids=[f"{c}-{p}" for c, p, _ in RUN],
)
def test_an_empty_tensor_matches_the_reference(case, platform_name, pin, tmp_path):
    import hetgen

    model, feeds = zero_size.CASES[case]()
    file = REPO / "platforms" / f"{platform_name}.yaml"
    if case not in ONNXRUNTIME_REFUSES:
        outcome = run_case(FuzzCase(model, feeds, file.read_text(), str(file), {"node": pin} if pin else {}), tmp_path)
        assert outcome.status == "pass", f"{outcome.status}: {outcome.reason}\n{outcome.detail}"
        return
    from onnx.reference import ReferenceEvaluator

    out = hetgen.compile(file, model, out=tmp_path / "out", opt=("-O1",), native_tuning=False, native_only=True)
    got = hetgen.load(out).run(feeds)["out0"]
    expected_shape = tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim)
    assert got.shape == expected_shape
    if got.size:  # an empty output has nothing to compare (the reference divides by its 0 channels)
        # the mean of no values is NaN, on both sides (numpy warns about it, as a RuntimeWarning)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
            expected = ReferenceEvaluator(model).run(None, feeds)[0]
        np.testing.assert_array_equal(got, expected)


def test_onnxruntime_still_refuses_the_pools_compared_with_the_reference():
    """If onnxruntime learns these, they should be compared with it like the others."""
    from hetgen.runtime.reference import ort_session

    for case in sorted(ONNXRUNTIME_REFUSES):
        model, feeds = zero_size.CASES[case]()
        with pytest.raises(Exception, match="Only N can be zero"):
            ort_session(model.SerializeToString()).run(None, feeds)
