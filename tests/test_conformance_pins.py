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
