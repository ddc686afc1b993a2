"""Where onnx's strict shape inference is wrong about a valid model: the pinned exceptions.

Each entry is an operator, a pattern its error message matches, and why the model is valid
nevertheless (with the case that showed it). A model whose only complaint matches an entry is let
through; hetgen's own node rules (`rules`) and its node-by-node typing still judge it. Found by
running the checks over every ONNX backend node case and hetgen's model tests; each entry names a
model `tests/test_onnx_checks.py` builds, and that test fails once onnx stops being wrong about it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class CheckerException:
    op: str
    pattern: str  # a regular expression searched in onnx's message for the node
    why: str
    case: str  # the function in tests/test_onnx_checks.py that builds a model showing it


PINNED: tuple[CheckerException, ...] = (
    CheckerException(
        "MeanVarianceNormalization",
        r"One and only one of the attributes 'value', 'value_\*' or 'sparse_value' must be specified",
        "its function body makes the axes with Constant(value_ints=@axes); when the node leaves `axes` at "
        "its default, strict inference of the body sees a Constant without a value (onnx 1.23, the backend case "
        "test_mvn; onnxruntime runs it and non-strict inference types it)",
        "mvn_with_default_axes",
    ),
    CheckerException(
        "If",
        r"Data for input\s+\d+ already exists",
        "data propagation inside a branch fails when a node reads the same outer-scope value twice (Mul(x, x); "
        "onnx 1.23). Strict inference without data propagation (the full checker's pass) accepts the model, "
        "and onnxruntime runs it",
        "if_reading_an_outer_value_twice",
    ),
    CheckerException(
        "STFT",
        r"Inferred shape and existing shape differ in dimension 2",
        "with constant frame_length and `onesided` left at its default (1), strict inference gives the "
        "two-sided bin count (frame_length, not frame_length // 2 + 1; onnx 1.23, the backend cases test_stft "
        "and test_stft_with_window, whose expected outputs have 9 bins for 16 samples; onnxruntime agrees)",
        "stft_one_sided_by_default",
    ),
)


def pinned_exception(op: str, message: str) -> CheckerException | None:
    return next((e for e in PINNED if e.op == op and re.search(e.pattern, message)), None)
