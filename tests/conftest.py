import dataclasses
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fast_tier  # noqa: E402  (tests/ is on sys.path from the line above)

CONFORMANCE = "tests/test_conformance.py::"
BACKEND = "tests/test_backend.py::"


def _deselects_cc(markexpr: str) -> bool:
    """Whether `-m markexpr` leaves out a test marked only `cc` (`not cc`, `not cc and not x`, ...)."""
    if not markexpr:
        return False
    from _pytest.mark.expression import Expression

    return not Expression.compile(markexpr).evaluate(lambda name, **kwargs: name == "cc")


def pytest_configure(config):
    if fast_tier.wanted(_deselects_cc(config.option.markexpr)):
        fast_tier.install()


def pytest_unconfigure(config):
    fast_tier.remove()


# A module marked cc as a whole (this line at its top level) is not even imported by the fast tier:
# all its tests would be deselected, and importing some costs more than the fast tier's tests
# (test_conformance.py and test_backend.py load every ONNX node case at collection).
_WHOLE_MODULE_CC = re.compile(r"^pytestmark = \[?pytest\.mark\.cc\b", re.MULTILINE)


def pytest_ignore_collect(collection_path, config):
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_") and fast_tier.refusing():
        return bool(_WHOLE_MODULE_CC.search(collection_path.read_text())) or None
    return None


_log_offset = 0


def pytest_runtest_logstart(nodeid, location):
    global _log_offset
    _log_offset = fast_tier.log_size()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """In the fast tier, a test phase during which a wrapped tool was asked to run fails, whatever the
    test asserted (a test that expects a build to fail would pass on the wrapper's refusal)."""
    global _log_offset
    report = yield
    if fast_tier.active():
        ran = fast_tier.ran_since(_log_offset)
        _log_offset = fast_tier.log_size()
        if fast_tier.recording():
            with open(fast_tier.os.environ[fast_tier.RECORD_ENV], "a") as record:
                first = ran[0][:200] if ran else ""
                record.write(f"{item.nodeid}\t{call.when}\t{report.duration:.2f}\t{len(ran)}\t{first}\n")
        elif ran:
            shown = "\n".join(f"  {line[:300]}" for line in ran[:5])
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid}: {fast_tier.MESSAGE}; it ran {len(ran)} tool command(s):\n{shown}"
    return report


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
        (BACKEND, "ONNX node cases through HetgenBackend (up to 2 per operator set; HG_BACKEND_ALL=1: all)"),
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
            # workspace would lift the activation peak (hetgen/partition/prepack.py): the same kernel
            # with another workspace, which no cost reads. Only a lowering with the table's own
            # blocks would be a second decision.
            if instance.gemm_blocks == _gemm_plan.DEFAULT_BLOCKS:
                calls[definition.op] = calls.get(definition.op, 0) + 1
            return definition.lower(instance)

        return dataclasses.replace(definition, lower=lower_counted)

    for op, definition in list(registry.OPS.items()):
        monkeypatch.setitem(registry.OPS, op, counting(definition))
    return calls
