"""`hetgen verify`: run the user's inputs, or seeded random inputs the model can take, through the
built library (or, with `emulate`, the board build under qemu-user) and through onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetgen.bounded import is_shape_output
from hetgen.errors import HetgenError
from hetgen.runtime import inputs as model_inputs
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.loader import load
from hetgen.runtime.reference import ort_session, random_inputs

MODEL_COPY = "model.onnx"


@dataclass(frozen=True)
class OutputError:
    name: str
    max_abs: float
    max_rel: float
    ok: bool


def compare(name: str, got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> OutputError:
    if got.shape != expected.shape:
        return OutputError(name, float("inf"), float("inf"), False)
    if got.dtype == np.bool_ or not np.issubdtype(got.dtype, np.number):
        equal = bool(np.array_equal(got, expected))
        return OutputError(name, 0.0 if equal else 1.0, 0.0 if equal else 1.0, equal)
    a, b = got.astype(np.float64), expected.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    same_inf = np.isinf(a) & (a == b)
    diff = np.where(both_nan | same_inf, 0.0, np.abs(a - b))
    rel = diff / np.maximum(np.abs(b), 1e-30)
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.nan_to_num(b))))
    return OutputError(name, float(diff.max(initial=0.0)), float(rel.max(initial=0.0)), ok)


def feeds_for(model, out_dir: Path, seed: int, runs: int = 1) -> list[dict[str, np.ndarray]]:
    """`runs` seeded random inputs (seeds `seed`, `seed + 1`, ...), integers kept to the values the
    model can index with."""
    ranges = model_inputs.value_ranges(Path(out_dir) / MODEL_COPY, model.inputs)
    return [random_inputs(model.inputs, seed + run, ranges) for run in range(runs)]


def verify(
    out_dir: Path,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    runs: int = 2,
    inputs: Mapping[str, np.ndarray] | str | Path | None = None,
    emulate: bool = False,
    transport: str = "pipe",
) -> list[OutputError]:
    """Compare the built model with onnxruntime on `inputs` (arrays by name, or an .npz file) once,
    or on `runs` seeded random inputs. `emulate`: run the board build's programs under their kinds'
    emulators instead of the native library, its co-processors' servers reached over `transport`
    ("pipe" or "tcp")."""
    model = EmulatedModel(Path(out_dir), transport=transport) if emulate else load(out_dir)
    if isinstance(inputs, (str, Path)):
        inputs = model_inputs.read_inputs(Path(inputs), model.inputs)
    session = ort_session(str(Path(out_dir) / MODEL_COPY))  # a path: onnxruntime finds any data file beside it
    errors: dict[str, OutputError] = {}
    feeds_list = [inputs] if inputs is not None else feeds_for(model, out_dir, seed, runs)
    for feeds in feeds_list:
        # The reference first: it rejects out-of-range indices that the generated C trusts.
        expected = dict(zip([o.name for o in session.get_outputs()], _reference_run(session, feeds)))
        got = model.run(feeds)
        for info in model.outputs:
            if is_shape_output(info.name):  # a bounded output's run-time shape: `got` has it applied
                continue
            error = compare(info.name, got[info.name], np.asarray(expected[info.name]), rtol, atol)
            worst = errors.get(info.name)
            if worst is None or error.max_abs > worst.max_abs or not error.ok:
                errors[info.name] = error if (worst is None or worst.ok) else worst
    return [errors[info.name] for info in model.outputs if info.name in errors]


def _reference_run(session, feeds) -> list:
    try:
        return session.run(None, feeds)
    except Exception as error:  # onnxruntime's own errors: the reference cannot run these inputs
        message = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise HetgenError(f"onnxruntime (the reference) cannot run the model on these inputs: {message}") from None
