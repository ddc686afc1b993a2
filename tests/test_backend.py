"""The ONNX backend node tests through the hetgen Backend: the whole pipeline (frontend, placement,
lowering with the memory planner, codegen, ninja, cffi). test_conformance.py runs every case of
every operator hetgen claims op by op, kernels alone, in batches; here each set of operators gets up
to two of its cases (the first and last by name), which keeps CI in its time budget
(all 1,786 cases take about 10 minutes on 2 cores). HG_BACKEND_ALL=1 runs every case.

A case hetgen refuses as unsupported skips only when tests/backend_skips.txt pins it with that
refusal (as tests/conformance_skips.txt pins conformance's): a case that newly skips, skips for
another reason or passes while pinned fails, naming the fix. The file pins every case (what
HG_BACKEND_ALL=1 runs), so it holds for CI's sample too. Rewrite it after a deliberate change:
`PYTHONPATH=. python tests/test_backend.py --pin` (generation only: hetgen refuses before it builds)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

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


BACKEND_SKIPS_FILE = Path(__file__).resolve().parent / "backend_skips.txt"
PIN_COMMAND = "PYTHONPATH=. python tests/test_backend.py --pin"
_PIN_HEADER = f"""\
# ONNX node cases that hetgen refuses through HetgenBackend as unsupported, one per line: `case: refusal`
# (the HetgenError's message on one line, at most 300 characters). tests/test_backend.py fails when a
# case skips that is not here, skips for another reason, or passes while listed here. Every case is
# listed (HG_BACKEND_ALL=1 runs them all; CI runs two per operator set).
# Regenerate after a deliberate change: {PIN_COMMAND}
"""
PINNED = conformance.read_pinned_skips(BACKEND_SKIPS_FILE) if BACKEND_SKIPS_FILE.exists() else {}


def unsupported(error: HetgenError) -> bool:
    return any(reason in str(error) for reason in UNSUPPORTED)


def check_pin(name: str, status: str, detail: str = "") -> None:
    mismatch = conformance.pin_mismatch(name, status, detail, PINNED, BACKEND_SKIPS_FILE, PIN_COMMAND)
    if mismatch:
        pytest.fail(mismatch, pytrace=False)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_case(case):
    rep = HetgenBackend.prepare(case.model)
    for inputs, expected in case.data_sets:
        try:
            got = rep.run([as_array(value) for value in inputs])
        except HetgenError as error:
            if unsupported(error):
                check_pin(case.name, "skip", str(error))
                pytest.skip(f"unsupported instance (pinned): {conformance.skip_reason(str(error))}")
            pytest.fail(f"{case.name}: {error}")
        for actual, wanted in zip(got, expected):
            wanted = as_array(wanted)
            assert actual.shape == wanted.shape
            if np.issubdtype(wanted.dtype, np.floating):
                np.testing.assert_allclose(actual, wanted, rtol=case.rtol, atol=case.atol)
            else:
                np.testing.assert_array_equal(actual, wanted)
    check_pin(case.name, "pass")


def test_pinned_skips_are_backend_cases():
    stale = sorted(set(PINNED) - {case.name for case in ALL_CASES})
    assert not stale, f"pinned in {BACKEND_SKIPS_FILE.name} but not a backend case: {stale}; {PIN_COMMAND}"


def refusal(case) -> str | None:
    """The unsupported-refusal `test_backend_case` would skip `case` with, found by generating each of
    its data sets as HetgenRep.run compiles it, without building (hetgen refuses before it builds);
    None when every data set generates."""
    import hetgen
    from hetgen.backend import NATIVE_PLATFORM, constant_inputs, freeze
    from hetgen.platform.loader import load_platform_text

    names = [vi.name for vi in case.model.graph.input]
    constant = constant_inputs(case.model)
    with tempfile.TemporaryDirectory(prefix="hetgen-backend-pin-") as tmp:
        for index, (inputs, _) in enumerate(case.data_sets):
            feeds = dict(zip(names, [as_array(value) for value in inputs]))
            frozen = {name: feeds[name] for name in sorted(constant) if name in feeds}
            try:
                hetgen.compile(
                    load_platform_text(NATIVE_PLATFORM),
                    freeze(case.model, frozen),
                    out=Path(tmp) / str(index),
                    build=False,
                    native_only=True,
                )
            except HetgenError as error:
                return str(error) if unsupported(error) else None
    return None


def _pin_one(index: int) -> tuple[str, str | None]:
    return ALL_CASES[index].name, refusal(ALL_CASES[index])


if __name__ == "__main__":
    if sys.argv[1:] != ["--pin"]:
        sys.exit(f"usage: {PIN_COMMAND}   (rewrites tests/{BACKEND_SKIPS_FILE.name})")
    from concurrent.futures import ProcessPoolExecutor

    from hetgen.codegen import project

    project.forget_templates = lambda: None  # hetgen's own templates only: compiled once per worker
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        refused = dict(pool.map(_pin_one, range(len(ALL_CASES)), chunksize=8))
    outcomes = {name: ("skip", detail) for name, detail in refused.items() if detail is not None}
    count = conformance.write_pinned_skips(outcomes, BACKEND_SKIPS_FILE, _PIN_HEADER)
    print(f"pinned {count} of {len(ALL_CASES)} backend cases in {BACKEND_SKIPS_FILE}")
