"""The ONNX backend node tests through the hetgen Backend (the whole pipeline: frontend, lowering,
codegen, ninja, cffi), one representative case per operator hetgen claims. The bulk of the cases
runs op by op in test_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest

import conformance
from hetgen.errors import HetgenError
from hetgen.runtime.backend import HetgenBackend


def representative_cases():
    seen, chosen = set(), []
    for case in conformance.cases():
        op = case.model.graph.node[0].op_type
        if op in seen or case.name in conformance.EXPECTED_FAILURES or len(case.model.graph.node) != 1:
            continue
        seen.add(op)
        chosen.append(case)
    return chosen


CASES = representative_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_case(case):
    rep = HetgenBackend.prepare(case.model)
    for inputs, expected in case.data_sets:
        try:
            got = rep.run(list(inputs))
        except HetgenError as error:
            if "not supported" in str(error) or "hetgen accepts" in str(error) or "accepted:" in str(error):
                pytest.skip(f"unsupported instance: {str(error).splitlines()[0]}")
            pytest.fail(f"{case.name}: {error}")
        for actual, wanted in zip(got, expected):
            wanted = np.asarray(wanted)
            assert actual.shape == wanted.shape
            if np.issubdtype(wanted.dtype, np.floating):
                np.testing.assert_allclose(actual, wanted, rtol=case.rtol, atol=case.atol)
            else:
                np.testing.assert_array_equal(actual, wanted)
