import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFORMANCE = "tests/test_conformance.py::"
BACKEND = "tests/test_backend.py::"


def _counts(terminalreporter, prefix: str) -> dict[str, int]:
    """Outcomes of the tests under `prefix`, from the reports (so it works with pytest-xdist too)."""
    counts = {}
    for outcome in ("passed", "failed", "skipped", "xfailed", "xpassed", "error"):
        reports = terminalreporter.stats.get(outcome, [])
        counts[outcome] = sum(
            1 for r in reports if getattr(r, "nodeid", "").startswith(prefix) and r.when in ("call", "setup")
        )
    return counts


def pytest_terminal_summary(terminalreporter):
    """The ONNX backend node-test counts, printed in every run that included them (CI prints them)."""
    lines = []
    for prefix, what in (
        (CONFORMANCE, "ONNX node cases, op by op"),
        (BACKEND, "ONNX node cases through HetgenBackend (up to 3 per operator set; HG_BACKEND_ALL=1: all)"),
    ):
        c = _counts(terminalreporter, prefix)
        total = sum(c.values())
        if total:
            lines.append(
                f"{what}: {c['passed']} passed, {c['skipped']} skipped (unsupported), "
                f"{c['xfailed']} expected failures, {c['failed'] + c['error']} failed, of {total}"
            )
    conformance = sys.modules.get("conformance")
    details = conformance.summary() if conformance is not None else None
    if lines and conformance is not None:
        lines.append(conformance.coverage())
    if details:  # skip reasons, when the cases ran in this process (no xdist)
        lines += details.splitlines()[1:]
    if lines:
        terminalreporter.section("ONNX conformance")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture
def counted(monkeypatch):
    """Every registered operator lowering with the kernel table's own GEMM blocks, counted:
    `counted["Conv"]` is how often Conv's ran (tests/test_kernel_spec*.py)."""
    from hetgen.ops import _gemm_plan, registry  # here: conftest loads before the tests' imports

    calls: dict[str, int] = {}

    def counting(definition):
        def lower_counted(instance):
            # Lean memory lowers a GEMM-backed unit again with smaller cache blocks where its
            # workspace would lift the activation peak (hetgen/lower/prepack.py): the same kernel
            # with another workspace, which no cost reads. Only a lowering with the table's own
            # blocks would be a second decision.
            if instance.gemm_blocks == _gemm_plan.DEFAULT_BLOCKS:
                calls[definition.op] = calls.get(definition.op, 0) + 1
            return definition.lower(instance)

        return dataclasses.replace(definition, lower=lower_counted)

    for op, definition in list(registry.OPS.items()):
        monkeypatch.setitem(registry.OPS, op, counting(definition))
    return calls
