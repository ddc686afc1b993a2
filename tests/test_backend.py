"""The ONNX backend node tests through the hetgen Backend: the whole pipeline (frontend, placement,
lowering with the memory planner, codegen, ninja, cffi). test_conformance.py runs every case of
every operator hetgen claims op by op, kernels alone, in batches; here each set of operators gets up
to two of its cases (the first and last by name), which keeps CI in its time budget
(all 1,786 cases take about 10 minutes on 2 cores). HG_BACKEND_ALL=1 runs every case."""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np
import onnx
import pytest

import conformance
from hetgen.backend import HetgenBackend
from hetgen.errors import HetgenError

# Messages that mean "hetgen does not support this case" (an element type, dynamic shapes), not a bug.
UNSUPPORTED = ("not supported", "hetgen accepts", "accepted:", "must be a compile-time constant")


def as_array(value) -> np.ndarray:
    return onnx.numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


pytestmark = pytest.mark.cc  # every case is built through ninja and loaded

ALL_CASES = [case for case in conformance.cases() if case.name not in conformance.EXPECTED_FAILURES]
PER_OPERATOR_SET = 2  # every operator set through the whole pipeline; test_conformance runs every case


def sample(cases: list) -> list:
    """Up to PER_OPERATOR_SET cases of each set of operators, spread over its cases by name."""
    by_ops: dict[frozenset[str], list] = defaultdict(list)
    for case in sorted(cases, key=lambda c: c.name):
        by_ops[conformance.case_ops(case)].append(case)
    kept = set()
    for group in by_ops.values():
        picks = {0, len(group) - 1} if len(group) > PER_OPERATOR_SET else range(len(group))
        kept.update(group[i].name for i in picks)
    return [case for case in cases if case.name in kept]


CASES = ALL_CASES if os.environ.get("HG_BACKEND_ALL") == "1" else sample(ALL_CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_case(case):
    rep = HetgenBackend.prepare(case.model)
    for inputs, expected in case.data_sets:
        try:
            got = rep.run([as_array(value) for value in inputs])
        except HetgenError as error:
            if any(reason in str(error) for reason in UNSUPPORTED):
                pytest.skip(f"unsupported instance: {str(error).splitlines()[0]}")
            pytest.fail(f"{case.name}: {error}")
        for actual, wanted in zip(got, expected):
            wanted = as_array(wanted)
            assert actual.shape == wanted.shape
            if np.issubdtype(wanted.dtype, np.floating):
                np.testing.assert_allclose(actual, wanted, rtol=case.rtol, atol=case.atol)
            else:
                np.testing.assert_array_equal(actual, wanted)
