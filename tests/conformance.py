"""ONNX backend node tests as hetgen conformance cases.

`cases()` lists the backend test cases (`onnx.backend.test.case.node`) whose every node is an
operator hetgen registers; `run_case(case)` compiles and runs one and compares it with the case's
expected outputs. `run_case` is the seam: today it goes through `tests/harness.py` (one kernel per
node, no planner); the full pipeline can replace it without touching the cases or the test file.

Statuses: "pass"; "skip" when the case needs something hetgen does not support (a dtype it has no
C type for, a lowering that raises `Unsupported`, a value that must be a compile-time constant but
is computed); "fail" otherwise, with the detail.
"""

from __future__ import annotations

import collections
import functools
import warnings
from dataclasses import dataclass

import numpy as np
import onnx

import harness
from hetgen.frontend.onnx_import import import_onnx
from hetgen.ir import DType
from hetgen.ops.base import Unsupported
from hetgen.ops.registry import op_def, supported_ops

# Nodes the frontend folds away before any lowering sees them.
FOLDED_OPS = frozenset({"Constant"})

# Cases that fail for a reason we accept, with the reason. The test marks them xfail (strict: a
# case that starts passing must be taken off the list).
EXPECTED_FAILURES: dict[str, str] = {}


@dataclass(frozen=True)
class Outcome:
    status: str  # "pass" | "skip" | "fail"
    detail: str = ""


@functools.lru_cache(maxsize=1)
def _all_cases() -> tuple:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(collect_testcases(""))


def case_ops(case) -> frozenset[str]:
    return frozenset(node.op_type for node in case.model.graph.node)


def cases(ops: frozenset[str] | None = None) -> list:
    """The backend node test cases that only use registered (or folded) operators."""
    known = (supported_ops() if ops is None else ops) | FOLDED_OPS
    selected = [c for c in _all_cases() if case_ops(c) <= known and case_ops(c) - FOLDED_OPS]
    return sorted(selected, key=lambda c: c.name)


def _unsupported_value(value_info: onnx.ValueInfoProto) -> str | None:
    kind = value_info.type.WhichOneof("value")
    if kind != "tensor_type":
        return f"{value_info.name!r} is a {kind}, not a tensor"
    code = value_info.type.tensor_type.elem_type
    if DType.from_onnx(code) is None:
        return f"{value_info.name!r} has dtype {onnx.TensorProto.DataType.Name(code).lower()}"
    return None


def _frozen_inputs(model: onnx.ModelProto) -> tuple[str, ...]:
    """Graph inputs that feed a `const_inputs` slot: they become initializers."""
    graph_inputs = {vi.name for vi in model.graph.input}
    frozen = []
    for node in model.graph.node:
        definition = op_def(node.op_type)
        for index in definition.const_inputs if definition else ():
            if index < len(node.input) and node.input[index] in graph_inputs:
                frozen.append(node.input[index])
    return tuple(dict.fromkeys(frozen))


def _as_array(value) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):  # some cases store their data as protos
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def _compare(name: str, actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> str | None:
    expected = _as_array(expected)
    if actual.shape != expected.shape:
        return f"{name}: shape {actual.shape}, expected {expected.shape}"
    if actual.dtype != expected.dtype:
        return f"{name}: dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.kind in "fc":
        close = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = actual == expected
    if close.all():
        return None
    bad = np.argwhere(~close)
    where = tuple(int(i) for i in bad[0])
    return (
        f"{name}: {len(bad)} of {expected.size} elements differ; first at {where}: "
        f"got {actual[where]!r}, expected {expected[where]!r}"
    )


def _static_type_problem(model: onnx.ModelProto) -> str | None:
    graph = import_onnx(model)
    for node in graph.nodes:
        for name in node.outputs:
            if name and name not in graph.types:
                return f"no static type for {name!r} ({node.label})"
    return None


def run_case(case) -> tuple[str, str]:
    """Run one backend test case; returns (status, detail)."""
    model = case.model
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    for value_info in (*graph_inputs, *model.graph.output):
        problem = _unsupported_value(value_info)
        if problem:
            return "skip", f"unsupported: {problem}"
    frozen = _frozen_inputs(model)
    for inputs, outputs in case.data_sets:
        feeds = {vi.name: _as_array(value) for vi, value in zip(graph_inputs, inputs)}
        try:
            problem = _static_type_problem(harness.freeze_inputs(model, feeds, frozen))
            if problem:
                return "skip", f"unsupported: {problem}"
            results = harness.run_model(model, feeds, frozen=frozen)
        except Unsupported as exc:
            return "skip", f"unsupported: {exc}"
        except Exception as exc:  # a failing case reports, it does not stop the run
            return "fail", f"{exc.__class__.__name__}: {exc}"
        for vi, expected in zip(model.graph.output, outputs):
            mismatch = _compare(vi.name, results[vi.name], expected, case.rtol, case.atol)
            if mismatch:
                return "fail", mismatch
    return "pass", ""


# Outcomes recorded by tests/test_conformance.py, summarised by tests/conftest.py.
RESULTS: dict[str, Outcome] = {}


def record(name: str, status: str, detail: str) -> None:
    RESULTS[name] = Outcome(status, detail)


def summary() -> str | None:
    if not RESULTS:
        return None
    counts = collections.Counter(o.status for o in RESULTS.values())
    reasons = collections.Counter(o.detail.split(";")[0][:90] for o in RESULTS.values() if o.status == "skip")
    lines = [
        f"conformance: {counts['pass']} passed, {counts['skip']} skipped (unsupported), "
        f"{counts['xfail']} expected failures, {counts['fail']} failed, of {len(RESULTS)} ONNX node cases"
    ]
    lines += [f"  skip x{n}: {reason}" for reason, n in reasons.most_common(12)]
    return "\n".join(lines)
