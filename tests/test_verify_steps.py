"""`hetgen verify` speaks quantized: int8/uint8 outputs, and the float outputs a DequantizeLinear makes
of them (how quantize_static ends a QDQ model), are compared in quantization steps (`--steps`,
default one step per element), the others in rtol/atol, and the messages say which tolerance each
output had, how far off a mismatch is and which option changes it (issue 20, item 6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.cli import main
from hetgen.errors import HetgenError
from hetgen.pipeline import MODEL_COPY
from hetgen.runtime.verify import Quantum, compare, dequantized_outputs, tolerances, verify

REPO = Path(__file__).resolve().parent.parent

ONNXRUNTIME = np.array([[-128, -3, 0, 4, 127]], np.int8)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_one_step_passes_by_default_and_fails_with_steps_0(dtype):
    expected = ONNXRUNTIME.astype(dtype)
    got = expected.copy()
    got[0, 2] += 1
    error = compare("y", got, expected, rtol=1e-4, atol=1e-5)
    assert error.ok and error.in_steps and error.max_abs == 1 and error.off == 0
    name = np.dtype(dtype).name
    assert error.describe() == f"y: {name}, max difference 1 step  ok"
    strict = compare("y", got, expected, rtol=1e-4, atol=1e-5, steps=0)
    assert not strict.ok and strict.off == 1 and strict.size == 5
    assert strict.describe() == (
        f"y: {name}, max difference 1 step, 1 of 5 elements beyond \u00b10 steps  MISMATCH"
        " (--steps N allows N quantization steps per int8/uint8 element)"
    )


def test_steps_are_integers_not_wrapped_bytes():
    """-128 against 127 is 255 steps, not 1 (int8 subtraction would wrap)."""
    error = compare("y", np.array([-128], np.int8), np.array([127], np.int8), 1e-4, 1e-5, steps=3)
    assert not error.ok and error.max_abs == 255
    assert "max difference 255 steps, 1 of 1 elements beyond \u00b13 steps" in error.describe()


def test_float_outputs_keep_rtol_and_atol_and_name_them():
    expected = np.array([1.0, 2.0, 3.0], np.float32)
    error = compare("z", expected + np.float32([0, 0.5, 1e-6]), expected, rtol=1e-4, atol=1e-5, steps=100)
    assert not error.ok and error.off == 1 and not error.in_steps
    assert error.describe() == (
        "z: max abs error 0.5, max rel error 0.25, 1 of 3 elements beyond rtol 0.0001, atol 1e-05  MISMATCH"
        " (--rtol/--atol set the tolerance of the other outputs)"
    )


def test_dequantized_outputs_are_compared_in_steps_of_their_scale():
    """A QDQ model's float output is (q - zp) * scale on both sides: one step apart is one scale apart,
    and a difference off that grid (not a dequantized int8) is not excused by rounding it."""
    quantum = Quantum(scale=1 / 256, dtype="int8")
    expected = (np.arange(-3, 5, dtype=np.float32) * np.float32(quantum.scale)).astype(np.float32)
    got = expected.copy()
    got[2] += np.float32(quantum.scale)
    error = compare("p", got, expected, rtol=1e-4, atol=1e-5, quantum=quantum)
    assert error.ok and error.in_steps and error.max_abs == pytest.approx(1) and error.off == 0
    assert error.describe() == "p: float32 dequantized from int8, max difference 1 step  ok"
    strict = compare("p", got, expected, rtol=1e-4, atol=1e-5, steps=0, quantum=quantum)
    assert not strict.ok and strict.off == 1
    assert tolerances([strict]) == "float32 dequantized from int8: \u00b10 steps"
    half = expected + np.float32(0.4 * quantum.scale)
    assert not compare("p", half, expected, 1e-4, 1e-5, steps=0, quantum=quantum).ok
    assert compare("p", half, expected, 1e-4, 1e-5, steps=1, quantum=quantum).ok


def test_only_outputs_dequantized_from_int8_with_one_constant_scale_have_a_quantum():
    model = quantize_model()
    assert dequantized_outputs(model) == {"w": Quantum(scale=np.float32(0.05).item(), dtype="int8")}


def test_other_integers_are_not_compared_in_steps():
    """int32/int64 outputs are accumulators or indices: rtol/atol as before, never --steps."""
    error = compare("i", np.array([5], np.int64), np.array([4], np.int64), 1e-4, 1e-5, steps=1)
    assert not error.ok and not error.in_steps and error.tolerance == "rtol 0.0001, atol 1e-05"


def test_the_summary_names_each_tolerance_in_effect():
    errors = [
        compare("a", np.float32([1]), np.float32([1]), 1e-4, 1e-5),
        compare("b", np.int8([1]), np.int8([1]), 1e-4, 1e-5, 2),
        compare("c", np.uint8([1]), np.uint8([1]), 1e-4, 1e-5, 2),
        compare("d", np.float32([1]), np.float32([1]), 1e-4, 1e-5),
    ]
    assert tolerances(errors) == "float32: rtol 0.0001, atol 1e-05; int8, uint8: \u00b12 steps"
    assert tolerances(errors[:1]) == "float32: rtol 0.0001, atol 1e-05"


def test_steps_must_be_a_count(capsys):
    assert main(["verify", "nowhere", "--steps", "-1"]) == 2  # a usage error
    assert "argument --steps: '-1' is not a number of quantization steps" in capsys.readouterr().err
    with pytest.raises(HetgenError, match="steps must be 0 or more"):
        verify(Path("nowhere"), steps=-1)


def quantize_model() -> onnx.ModelProto:
    """x[1, 64] -> QuantizeLinear -> y (int8) -> DequantizeLinear (its own zero point) -> w (float32),
    and x -> Relu -> z (float32)."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["y"], name="quantize"),
        helper.make_node("DequantizeLinear", ["y", "scale", "wzero"], ["w"], name="dequantize"),
        helper.make_node("Relu", ["x"], ["z"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "quantize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [
            helper.make_tensor_value_info("y", TensorProto.INT8, [1, 64]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 64]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64]),
        ],
        initializer=[
            numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
            numpy_helper.from_array(np.array(0, np.int8), "zero"),
            numpy_helper.from_array(np.array(0, np.int8), "wzero"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.cc
def test_verify_allows_one_step_by_default_and_says_how_to_change_it(tmp_path, capfd, monkeypatch):
    """The reference's zero point moved by one: onnxruntime's int8 output, and its dequantized float
    copy, are one step above what was built wherever it does not saturate, the float output unchanged."""
    monkeypatch.chdir(REPO)
    model = tmp_path / "quantize.onnx"
    onnx.save(quantize_model(), model)
    out = tmp_path / "host"
    assert main(["host", str(model), "-o", str(out)]) == 0, capfd.readouterr().err
    copy = onnx.load(out / MODEL_COPY)
    zero = next(i for i in copy.graph.initializer if i.name == "zero")
    zero.CopyFrom(numpy_helper.from_array(np.array(1, np.int8), "zero"))
    onnx.save(copy, out / MODEL_COPY)
    capfd.readouterr()

    assert main(["verify", str(out)]) == 0
    printed = capfd.readouterr().out
    assert "y: int8, max difference 1 step  ok" in printed, printed
    assert "w: float32 dequantized from int8, max difference 1 step  ok" in printed, printed
    assert "z: max abs error 0, max rel error 0  ok" in printed, printed
    assert (
        "3 of 3 outputs match onnxruntime"
        " (float32: rtol 0.0001, atol 1e-05; int8, float32 dequantized from int8: \u00b11 step)"
    ) in printed, printed

    assert main(["verify", str(out), "--steps", "0"]) == 1
    printed = capfd.readouterr().out
    assert "y: int8, max difference 1 step, " in printed and " of 64 elements beyond \u00b10 steps  MISMATCH" in printed
    assert "(--steps N allows N quantization steps per int8/uint8 element)" in printed, printed
    assert "w: float32 dequantized from int8, max difference 1 step, " in printed, printed
    assert (
        "1 of 3 outputs match onnxruntime"
        " (float32: rtol 0.0001, atol 1e-05; int8, float32 dequantized from int8: \u00b10 steps)"
    ) in printed, printed

    errors = verify(out, steps=0)
    assert [(e.name, e.ok) for e in errors] == [("y", False), ("w", False), ("z", True)]
    assert errors[0].max_abs == 1 and errors[1].max_abs == 1
