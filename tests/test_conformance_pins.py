"""How tests/test_conformance.py words a case whose outcome disagrees with tests/conformance_skips.txt
(pure Python: it runs in the fast tier, where test_conformance.py itself does not)."""

from __future__ import annotations

import conformance


def test_pin_mismatch_names_the_case_and_the_fix():
    pinned_name, pinned_reason = next(iter(conformance.PINNED_SKIPS.items()))
    assert conformance.pin_mismatch(pinned_name, "skip", pinned_reason) is None
    assert "passes now" in conformance.pin_mismatch(pinned_name, "pass", "")
    assert "another reason" in conformance.pin_mismatch(pinned_name, "skip", "unsupported: something else")
    assert "newly skips" in conformance.pin_mismatch("test_not_pinned", "skip", "unsupported: x")
    assert conformance.pin_mismatch("test_not_pinned", "pass", "") is None


def test_backend_pins_name_their_own_file_and_command():
    """tests/test_backend.py pins its skips in backend_skips.txt, worded the same way."""
    path = conformance.PINNED_SKIPS_FILE.with_name("backend_skips.txt")
    pinned = conformance.read_pinned_skips(path)
    name, reason = next(iter(pinned.items()))
    assert all(reason and len(reason) <= 300 for reason in pinned.values())
    command = "PYTHONPATH=. python tests/test_backend.py --pin"
    assert conformance.pin_mismatch(name, "skip", reason, pinned, path, command) is None
    assert conformance.pin_mismatch(name, "pass", "", pinned, path, command) == (
        f"{name} passes now: take it off backend_skips.txt ({command})"
    )
    newly = conformance.pin_mismatch("test_not_pinned", "skip", "x\n  y", pinned, path, command)
    assert newly == f"test_not_pinned newly skips (x y); fix it, or pin it in backend_skips.txt ({command})"
