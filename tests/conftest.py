import dataclasses
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import caches  # noqa: E402  (tests/ is on sys.path from the line above)
import compiler_cache  # noqa: E402
import fast_tier  # noqa: E402
import stages  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CONFORMANCE = "tests/test_conformance.py::"
BACKEND = "tests/test_backend.py::"


def pytest_configure(config):
    caches.install_bytecode_cache()  # before the test modules are imported (and the workers start)
    for stage, (covers, _) in stages.STAGES.items():
        config.addinivalue_line("markers", f"{stage}: the {stage} stage's tests ({covers}; tests/stages.py)")
    which = fast_tier.tier(fast_tier.tier_of_markexpr(config.option.markexpr))
    if which in (None, fast_tier.INTEGRATION):  # a run that may build: before the wrappers, which stay first on PATH
        compiler_cache.install()
    if which:
        fast_tier.install(which)


def pytest_unconfigure(config):
    fast_tier.remove()
    compiler_cache.remove()


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    """`external` implies `cc` (so `-m "not cc"` stays the fast tier), and each test gets its
    module's stage marker (tests/stages.py)."""
    for item in items:
        if item.get_closest_marker("external") is not None and item.get_closest_marker("cc") is None:
            item.add_marker(pytest.mark.cc)
        stage = stages.stage_of(item.path)
        if stage is not None:
            item.add_marker(stage)


def pytest_runtest_setup(item):
    if stages.unmapped(item.path):
        pytest.fail(f"{item.path.name} has no stage: add it to STAGES in tests/stages.py", pytrace=False)


# A module marked as a whole (`pytestmark = pytest.mark.cc` or a list holding it at its top level)
# is not even imported by a run that cannot select it: the fast tier leaves out the cc and external
# modules, the integration tier the external ones, `-m partition` every other stage's; importing some
# costs more than the fast tier's tests (test_conformance.py and test_backend.py load every ONNX node case).
_PYTESTMARK = re.compile(r"^pytestmark = ", re.MULTILINE)


def _module_marks(text: str) -> set[str]:
    """The markers in a module's top-level `pytestmark = ...` statement."""
    found = _PYTESTMARK.search(text)
    if found is None:
        return set()
    depth, end = 0, found.end()
    while end < len(text) and (depth or text[end] != "\n"):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(text[end], 0)
        end += 1
    statement = re.sub(r"#[^\n]*", "", text[found.end() : end])
    return set(re.findall(r"\bpytest\.mark\.(\w+)", statement))


def pytest_ignore_collect(collection_path, config):
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    marks = _module_marks(collection_path.read_text())
    fixed = {"cc": True} if marks & {"cc", "external"} else {}
    if "external" in marks:
        fixed["external"] = True
    refusing = fast_tier.refusing()
    if (refusing == fast_tier.FAST and "cc" in fixed) or (refusing == fast_tier.INTEGRATION and "external" in fixed):
        return True  # also when HETGEN_FAST_TIER chose the tier: every test of the module would fail
    markexpr = config.option.markexpr
    if markexpr:
        fixed.update({stage: False for stage in stages.STAGES})
        stage = stages.stage_of(collection_path)
        if stage is not None:
            fixed[stage] = True
        return not fast_tier.selectable(markexpr, fixed) or None
    return None


_log_offset = 0


def pytest_runtest_logstart(nodeid, location):
    global _log_offset
    _log_offset = fast_tier.log_size()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """In the fast and integration tiers, a test phase during which a refused tool was asked to run
    fails, whatever the test asserted (a test that expects a build to fail would pass on the
    wrapper's refusal). When recording, each phase is written with the tools it ran."""
    global _log_offset
    report = yield
    if fast_tier.active():
        ran = fast_tier.ran_since(_log_offset)
        _log_offset = fast_tier.log_size()
        if fast_tier.recording():
            external = [line for line in ran if fast_tier.is_external(line)]
            with open(fast_tier.os.environ[fast_tier.RECORD_ENV], "a") as record:
                first = ran[0][:200] if ran else ""
                first_external = external[0][:200] if external else ""
                record.write(
                    f"{item.nodeid}\t{call.when}\t{report.duration:.2f}\t{len(ran)}\t{len(external)}"
                    f"\t{first}\t{first_external}\n"
                )
        elif ran:
            shown = "\n".join(f"  {line[:300]}" for line in ran[:5])
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid}: {fast_tier.message()}; it ran {len(ran)} tool command(s):\n{shown}"
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


@dataclasses.dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capfd, monkeypatch):
    """hetgen's main() in this process, from the repository's root: `cli("explain", ...)` gives its exit
    code and what it printed. A second Python per call costs 1.7 s of CPU, most of it imports; a
    test of what only a separate process shows (a pipe, the interpreter's exit, a traceback printed
    past main) runs `python -m hetgen` itself (tests/test_cli.py's run_cli)."""
    from hetgen.cli import main

    monkeypatch.chdir(REPO)

    def run(*args) -> CliResult:
        code = main([str(a) for a in args])
        captured = capfd.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def templates_compiled_once(monkeypatch):
    """hetgen compiles its Jinja templates afresh for every generation (hetgen/codegen/project.py calls
    `forget_templates`: a kind's template folder may have changed since the last generation in the
    same process), which is most of the time a small model takes to generate. A test that generates
    many projects on the shipped platforms, whose template folders no test changes, keeps them
    compiled across its generations and the next such test's: the same text, 5 to 10 times faster
    (tests/test_optional_inputs.py)."""
    from hetgen.codegen import project

    monkeypatch.setattr(project, "forget_templates", lambda: None)
