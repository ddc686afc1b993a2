"""Errors hetgen reports.

Two families, kept apart on purpose: `HetgenError` is the user's problem (a bad platform file, an
unsupported operator, an impossible placement) and is printed as one clear message without a
traceback; `InternalError` means a broken invariant between stages, i.e. a hetgen bug.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnostic:
    """One problem in one input file, positioned for an editor (`file:line:col: message`)."""

    file: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line:
            where += f":{self.line}"
            if self.column:
                where += f":{self.column}"
        return f"{where}: {self.message}"


class HetgenError(Exception):
    """A problem with the user's input; the CLI prints it and exits non-zero."""

    def __init__(self, message: str, diagnostics: tuple[Diagnostic, ...] = ()):
        self.diagnostics = tuple(diagnostics)
        if diagnostics:
            body = "\n".join(f"  {d}" for d in diagnostics) if len(diagnostics) > 1 else str(diagnostics[0])
            message = (
                f"{message}\n{body}" if len(diagnostics) > 1 else (f"{body}" if not message else f"{message}: {body}")
            )
        super().__init__(message)


class PlatformError(HetgenError):
    """A platform description is malformed or inconsistent."""


class ModelError(HetgenError):
    """An ONNX model is broken or uses something hetgen does not support."""


class PlacementError(HetgenError):
    """No placement satisfies the platform's capacities and the user's pins."""


class BuildError(HetgenError):
    """The generated project failed to compile or link."""


class InternalError(RuntimeError):
    """A broken invariant between pipeline stages: this is a hetgen bug."""

    def __init__(self, message: str):
        super().__init__(f"internal error (this is a hetgen bug, please report it): {message}")
