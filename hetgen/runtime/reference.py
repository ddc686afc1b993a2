"""onnxruntime as the numerical reference, with its graph optimiser off (it has known
wrong-result bugs, e.g. Transpose feeding MatMul with a 1-D operand)."""

from __future__ import annotations

import numpy as np

from hetgen.errors import HetgenError


def ort_session(model_bytes: bytes, threads: int = 1):
    try:
        import onnxruntime as ort
    except ImportError:
        raise HetgenError(
            "onnxruntime is not installed; `pip install onnxruntime` (it is the reference for verify and bench)"
        ) from None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def random_inputs(inputs, seed: int, ranges=None) -> dict[str, np.ndarray]:
    """Seeded inputs: normal floats; bools; integers in `ranges[name]` = [low, high) where given
    (hetgen.runtime.inputs.value_ranges), else small non-negative ones."""
    ranges = ranges or {}
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in inputs:
        if np.issubdtype(info.dtype, np.floating):
            feeds[info.name] = rng.standard_normal(info.shape).astype(info.dtype)
        elif info.dtype == np.bool_:
            feeds[info.name] = rng.integers(0, 2, info.shape).astype(np.bool_)
        else:
            low, high = ranges.get(info.name, (0, 8))
            feeds[info.name] = rng.integers(low, high, info.shape).astype(info.dtype)
    return feeds
