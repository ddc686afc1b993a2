"""Compatibility module: the frontend's entry point lives in `hetgen.frontend`."""

from hetgen.frontend import import_model, import_onnx

__all__ = ["import_model", "import_onnx"]
