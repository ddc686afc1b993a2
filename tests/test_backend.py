"""The ONNX backend node tests through the hetgen Backend: the whole pipeline (frontend, placement,
lowering with the memory planner, codegen, ninja, cffi) for every case of every operator hetgen
claims. test_conformance.py runs the same cases op by op, kernels alone, in batches."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import conformance
from hetgen.errors import HetgenError
from hetgen.runtime.backend import HetgenBackend

# Messages that mean "hetgen does not support this case" (an element type, dynamic shapes), not a bug.
UNSUPPORTED = ("not supported", "hetgen accepts", "accepted:", "must be a compile-time constant")


def as_array(value) -> np.ndarray:
    return onnx.numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


CASES = [case for case in conformance.cases() if case.name not in conformance.EXPECTED_FAILURES]


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
