"""`hetgen verify`: run the user's inputs, or seeded random inputs the model can take, through the
built library (or, with `emulate`, the board build under qemu-user) and through onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from hetgen.bounded import is_shape_output
from hetgen.errors import HetgenError
from hetgen.runtime import inputs as model_inputs
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.loader import load
from hetgen.runtime.reference import ort_session, random_inputs

MODEL_COPY = "model.onnx"


# The quantized types: their outputs are compared in quantization steps (`steps`), everything else
# numeric in rtol/atol. int16/uint16 quantization is refused by the frontend and int32 outputs are
# accumulators or indices, so no other integer output is a quantized one.
STEP_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
STEPS_OPTION = "--steps N allows N quantization steps per int8/uint8 element"
FLOAT_OPTION = "--rtol/--atol set the tolerance of the other outputs"
# A dequantized output is (q - zero point) * scale in float32 on both sides, so two of them lie a whole
# number of steps apart up to float32's rounding of each product (|q - zp| <= 255: under 1e-4 step);
# anything further off the grid is a real difference and counts against `steps`.
GRID_SLACK = 1e-3


@dataclass(frozen=True)
class Quantum:
    """A float output that a DequantizeLinear makes of an int8/uint8 tensor with one constant scale
    (what onnxruntime's quantize_static ends a QDQ model with): compared in steps of `scale`."""

    scale: float
    dtype: str


def dequantized_outputs(model: onnx.ModelProto) -> dict[str, Quantum]:
    """The graph outputs made by DequantizeLinear of an int8/uint8 tensor with a constant one-value
    scale and a constant zero point (the zero point's type is the quantized tensor's)."""
    constants = {init.name: init for init in model.graph.initializer}
    producers = {name: node for node in model.graph.node for name in node.output}
    found = {}
    for output in model.graph.output:
        node = producers.get(output.name)
        if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.input) < 3 or node.input[1] not in constants or node.input[2] not in constants:
            continue
        scale = numpy_helper.to_array(constants[node.input[1]])
        zero_point = numpy_helper.to_array(constants[node.input[2]])
        if scale.size == 1 and zero_point.dtype in STEP_TYPES and np.isfinite(scale).all() and float(scale) > 0:
            found[output.name] = Quantum(float(scale.reshape(-1)[0]), str(zero_point.dtype))
    return found


def steps_text(steps: int) -> str:
    return f"\u00b1{steps} step" + ("" if steps == 1 else "s")


@dataclass(frozen=True)
class OutputError:
    """One output's worst run: `max_abs` the largest absolute difference (in steps where `in_steps`),
    `off` how many of its `size` elements lie beyond `tolerance` (its text, e.g. "±1 step")."""

    name: str
    max_abs: float
    max_rel: float
    ok: bool
    dtype: str = ""
    tolerance: str = ""
    in_steps: bool = False
    off: int = 0
    size: int = 0
    shapes: tuple = ()

    def describe(self) -> str:
        """The line `hetgen verify` prints for this output."""
        status = "ok" if self.ok else "MISMATCH"
        if self.shapes:
            return f"{self.name}: shape {self.shapes[0]}, onnxruntime's {self.shapes[1]}  {status}"
        off = f", {self.off} of {self.size} elements beyond {self.tolerance}" if not self.ok else ""
        if self.in_steps:
            largest = self.max_abs
            text = f"{self.name}: {self.dtype}, max difference {largest:.4g} step{'' if largest == 1 else 's'}{off}"
            return f"{text}  {status}" + ("" if self.ok else f" ({STEPS_OPTION})")
        if self.tolerance == "exact":
            return f"{self.name}: {self.dtype}, {self.off} of {self.size} elements differ  {status}"
        text = f"{self.name}: max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}{off}"
        return f"{text}  {status}" + ("" if self.ok else f" ({FLOAT_OPTION})")


def tolerances(errors: list[OutputError]) -> str:
    """The tolerances in effect for `errors`' outputs, by dtype: "float32: rtol 0.0001, atol 1e-05; int8: ±1 step"."""
    groups: dict[str, list[str]] = {}
    for error in errors:
        if error.tolerance and error.dtype not in groups.setdefault(error.tolerance, []):
            groups[error.tolerance].append(error.dtype)
    ordered = sorted(groups.items(), key=lambda group: "step" in group[0])  # rtol/atol first, then steps
    return "; ".join(f"{', '.join(dtypes)}: {tolerance}" for tolerance, dtypes in ordered)


def compare(
    name: str,
    got: np.ndarray,
    expected: np.ndarray,
    rtol: float,
    atol: float,
    steps: int = 1,
    quantum: Quantum | None = None,
) -> OutputError:
    """`got` against onnxruntime's `expected`: int8/uint8, and float outputs dequantized from them
    (`quantum`), within `steps` quantization steps per element, other numbers within
    `atol + rtol * |expected|`, anything else exactly."""
    dtype = str(got.dtype)
    if got.shape != expected.shape:
        return OutputError(name, float("inf"), float("inf"), False, dtype, shapes=(got.shape, expected.shape))
    if got.dtype == np.bool_ or not np.issubdtype(got.dtype, np.number):
        off = int(np.sum(got != expected)) if got.size else 0
        return OutputError(name, float(off > 0), float(off > 0), off == 0, dtype, "exact", False, off, got.size)
    if got.dtype in STEP_TYPES and np.issubdtype(expected.dtype, np.integer):
        diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
        rel = diff / np.maximum(np.abs(expected.astype(np.float64)), 1e-30)
        off = int(np.sum(diff > steps))
        largest = float(diff.max(initial=0))
        return OutputError(
            name, largest, float(rel.max(initial=0.0)), off == 0, dtype, steps_text(steps), True, off, got.size
        )
    a, b = got.astype(np.float64), expected.astype(np.float64)
    if quantum is not None and np.issubdtype(got.dtype, np.floating):
        diff = np.abs(a - b) / quantum.scale  # a NaN (never dequantized) compares as off
        rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-30)
        off = int(np.sum(~(diff <= steps + GRID_SLACK)))
        largest = float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0))
        if abs(largest - round(largest)) <= GRID_SLACK:  # on the grid: a whole number of steps
            largest = float(round(largest))
        label = f"{dtype} dequantized from {quantum.dtype}"
        return OutputError(
            name, largest, float(rel.max(initial=0.0)), off == 0, label, steps_text(steps), True, off, got.size
        )
    both_nan = np.isnan(a) & np.isnan(b)
    same_inf = np.isinf(a) & (a == b)
    diff = np.where(both_nan | same_inf, 0.0, np.abs(a - b))
    rel = diff / np.maximum(np.abs(b), 1e-30)
    off = int(np.sum(~(diff <= atol + rtol * np.abs(np.nan_to_num(b)))))
    largest, relative = float(diff.max(initial=0.0)), float(rel.max(initial=0.0))
    return OutputError(name, largest, relative, off == 0, dtype, f"rtol {rtol}, atol {atol}", False, off, got.size)


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
    steps: int = 1,
) -> list[OutputError]:
    """Compare the built model with onnxruntime on `inputs` (arrays by name, or an .npz file) once,
    or on `runs` seeded random inputs. `emulate`: run the board build's programs under their kinds'
    emulators instead of the native library, its co-processors' servers reached over `transport`
    ("pipe" or "tcp"). int8/uint8 outputs, and float outputs a DequantizeLinear makes of them, may
    differ by `steps` quantization steps per element, the others by `atol + rtol * |expected|`."""
    if steps < 0:
        raise HetgenError(f"steps must be 0 or more, not {steps}")
    model = EmulatedModel(Path(out_dir), transport=transport) if emulate else load(out_dir)
    if isinstance(inputs, (str, Path)):
        inputs = model_inputs.read_inputs(Path(inputs), model.inputs)
    session = ort_session(str(Path(out_dir) / MODEL_COPY))  # a path: onnxruntime finds any data file beside it
    quanta = dequantized_outputs(onnx.load(str(Path(out_dir) / MODEL_COPY), load_external_data=False))
    errors: dict[str, OutputError] = {}
    feeds_list = [inputs] if inputs is not None else feeds_for(model, out_dir, seed, runs)
    for feeds in feeds_list:
        # The reference first: it rejects out-of-range indices that the generated C trusts.
        expected = dict(zip([o.name for o in session.get_outputs()], _reference_run(session, feeds)))
        got = model.run(feeds)
        for info in model.outputs:
            if is_shape_output(info.name):  # a bounded output's run-time shape: `got` has it applied
                continue
            reference = np.asarray(expected[info.name])
            error = compare(info.name, got[info.name], reference, rtol, atol, steps, quanta.get(info.name))
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
