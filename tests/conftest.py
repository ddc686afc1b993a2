import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_terminal_summary(terminalreporter):
    """Counts of the ONNX conformance run (tests/test_conformance.py), when it ran."""
    conformance = sys.modules.get("conformance")
    text = conformance.summary() if conformance is not None else None
    if text:
        terminalreporter.section("ONNX conformance")
        for line in text.splitlines():
            terminalreporter.write_line(line)
