"""onnxruntime in its two roles.

`ort_session`: the numerical reference, graph optimiser off (it has known wrong-result bugs, e.g.
Transpose feeding MatMul with a 1-D operand); `hetgen verify` and every accuracy check use it.

`speed_session`: the speed yardstick, onnxruntime as a user who picks it instead runs it: its defaults
(graph optimisations on, ORT_ENABLE_ALL: fused convolutions and activations, blocked layouts, its own
kernel choices), `threads` intra-op threads (the same count as hetgen's), one inter-op thread.
`hetgen bench` and every benchmark that times onnxruntime time this one, never the reference. Where
its outputs disagree with the reference's (`optimiser_error` above `OPTIMISER_TOLERANCE`), the
optimiser gave a wrong result and that model's speed comparison is skipped (`wrong_result_message`).
"""

from __future__ import annotations

import numpy as np

from hetgen.errors import HetgenError

# max |optimised - reference| / max |reference| over a model's outputs above which the optimised
# session's result is called wrong: far above float reassociation (fusing BatchNorm into a
# convolution, blocked kernels: ~1e-6 here), far below a wrong operator
OPTIMISER_TOLERANCE = 1e-3

SPEED_SESSION = "onnxruntime at its defaults (graph optimisations on)"
REFERENCE_SESSION = "onnxruntime with graph optimisations off"


def _session(model_bytes, threads: int, optimise: bool):
    try:
        import onnxruntime as ort
    except ImportError:
        raise HetgenError(
            "onnxruntime is not installed; `pip install onnxruntime` (it is the reference for verify and bench)"
        ) from None
    options = ort.SessionOptions()
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimise else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def ort_session(model_bytes, threads: int = 1):
    """The numerical reference: graph optimisations off (`model_bytes`: the bytes or a path)."""
    return _session(model_bytes, threads, optimise=False)


def speed_session(model_bytes, threads: int = 1):
    """The speed yardstick: onnxruntime's defaults (ORT_ENABLE_ALL), `threads` intra-op threads."""
    return _session(model_bytes, threads, optimise=True)


def optimiser_error(optimised, reference) -> float:
    """The largest |optimised - reference| over the outputs, relative to the largest |reference|
    (inf where shapes differ or the optimised outputs hold a NaN the reference does not)."""
    worst = 0.0
    for got, want in zip(optimised, reference, strict=True):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            return float("inf")
        if not np.issubdtype(want.dtype, np.number) or want.size == 0:
            worst = max(worst, 0.0 if np.array_equal(got, want) else float("inf"))
            continue
        got, want = got.astype(np.float64), want.astype(np.float64)
        if not np.array_equal(np.isnan(got), np.isnan(want)):
            return float("inf")
        finite = ~np.isnan(want)
        if not finite.any():
            continue
        scale = max(float(np.max(np.abs(want[finite]))), 1e-30)
        worst = max(worst, float(np.max(np.abs(got[finite] - want[finite]))) / scale)
    return worst


def wrong_result_message(model: str, error: float) -> str | None:
    """The benchmark's line where the optimised session's result is wrong (None where it agrees)."""
    if error <= OPTIMISER_TOLERANCE:
        return None
    return (
        f"onnxruntime's optimiser gives a wrong result on {model}: max diff {error:.2e} of the largest "
        f"reference value (optimisations off), above {OPTIMISER_TOLERANCE:g}; comparison skipped"
    )


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
