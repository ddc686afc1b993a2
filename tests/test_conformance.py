"""The ONNX backend node tests of every registered operator, through `tests/conformance.py`.

One test per case (the id is the case's name). Outcomes are computed once per session for the
selected cases, compiled together (`conformance.run_cases`); a summary of pass/skip/fail counts is
printed at the end of the run (see `conftest.py`). Every skip is pinned with its reason in
`tests/conformance_skips.txt`; a case whose outcome disagrees with that list fails.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os

import pytest

import conformance

# The cases compile together (the session fixture below); listing them loads every ONNX node case,
# several seconds even here, so the fast tier does not import this module (tests/conftest.py).
pytestmark = pytest.mark.cc

CASES = conformance.cases()
PARTS = 8  # what the xdist workers share out (the fixture below)


@pytest.fixture(scope="session")
def outcomes(request, tmp_path_factory) -> dict[str, tuple[str, str]]:
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.module.__name__ == __name__ and hasattr(item, "callspec") and "case" in item.callspec.params
    ]
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return conformance.run_cases(selected)
    # Every xdist worker collects every test, so each would compile all the selected cases (`-n 2`
    # built all 1,800 twice). The cases are cut into PARTS parts instead; each worker computes the
    # parts no other worker has taken (an exclusive lock on the part's lock file while it does) and
    # then reads the others' outcomes, waiting on their locks: both workers lower, compile and run
    # cases at once. The folder above a worker's basetemp is this run's, shared by its workers.
    digest = hashlib.sha256("\n".join(case.name for case in selected).encode()).hexdigest()[:16]
    folder = tmp_path_factory.getbasetemp().parent
    parts = [selected[i * len(selected) // PARTS : (i + 1) * len(selected) // PARTS] for i in range(PARTS)]
    paths = [folder / f"conformance-{digest}-{i}.json" for i in range(PARTS)]
    for part, path in zip(parts, paths):  # the parts nobody has taken
        with open(f"{path}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another worker is computing it
            if not path.is_file():
                _write(path, conformance.run_cases(part))
    outcomes = {}
    for part, path in zip(parts, paths):  # every part, once its worker is done with it
        with open(f"{path}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.is_file():  # its worker died before writing it
                _write(path, conformance.run_cases(part))
            outcomes.update({name: tuple(outcome) for name, outcome in json.loads(path.read_text()).items()})
    return outcomes


def _write(path, outcomes) -> None:
    path.with_suffix(".tmp").write_text(json.dumps(outcomes))
    path.with_suffix(".tmp").replace(path)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_node_case(case, outcomes):
    status, detail = outcomes[case.name]
    expected_failure = conformance.EXPECTED_FAILURES.get(case.name)
    if expected_failure and status == "fail":
        conformance.record(case.name, "xfail", detail)
        pytest.xfail(expected_failure)
    conformance.record(case.name, status, detail)
    mismatch = conformance.pin_mismatch(case.name, status, detail)
    if mismatch:
        pytest.fail(mismatch, pytrace=False)
    if expected_failure and status == "pass":
        pytest.fail(f"{case.name} passes now: take it off conformance.EXPECTED_FAILURES", pytrace=False)
    if status == "skip":
        pytest.skip(detail)
    if status == "fail":
        pytest.fail(detail, pytrace=False)


def test_pinned_skips_are_cases_of_claimed_operators():
    """A pinned case that is no longer selected (its operator unclaimed, the case gone) is stale."""
    stale = sorted(set(conformance.PINNED_SKIPS) - {c.name for c in CASES})
    assert not stale, f"pinned in {conformance.PINNED_SKIPS_FILE.name} but not a case of a claimed operator: {stale}"
