"""Hostile and careless input files: each gets one clear error, quickly, and never a traceback.

The corpora in tests/bad_platforms/ and tests/bad_models/ pin the first error line of each case;
this file checks what a corpus cannot: time and memory bounds, files that are not files, external
data read only from the model's folder (and still working when valid), sizes no target can hold,
and a few hundred random mutations of a valid model and platform run through the CLI in-process.
"""

from __future__ import annotations

import io
import random
import re
import time
import tracemalloc
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.cli import main
from hetgen.errors import ModelError, PlacementError, PlatformError
from hetgen.frontend import import_model
from hetgen.platform import load_platform, load_platform_text
from hetgen.runtime.reference import ort_session

BAD_PLATFORMS = Path(__file__).resolve().parent / "bad_platforms"


def run_cli(*argv: str) -> tuple[int, str]:
    """hetgen's exit code and stderr for one in-process CLI call."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse
            code = exit_.code
    return code, err.getvalue()


def assert_clean_failure(code: int, stderr: str) -> None:
    assert code == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert stderr.startswith("hetgen: error: "), stderr


# --- platform files -----------------------------------------------------------------------------


def billion_laughs(levels: int) -> str:
    lines = ["name: soc", "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join([*lines, "target: native", ""])


def test_alias_bomb_is_refused_fast_and_small_with_its_position():
    text = billion_laughs(12)  # 9^12 ≈ 2.8e11 values once expanded
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(PlatformError) as caught:
        load_platform_text(text, file="bomb.yaml")
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 100 << 20
    assert str(caught.value).startswith("bomb.yaml:6:15: alias '*a3' expands to 7381 values"), caught.value


def test_small_aliases_and_merge_keys_still_work():
    """Reusing a link block (and merging a figures block) is what anchors are for."""
    platform = load_platform_text(
        "name: soc\n"
        "target:\n"
        "  kind: native\n"
        "  devices:\n"
        "    npu0: {kind: npu, link: &link {bandwidth_gbps: 4, latency_us: 20}}\n"
        "    npu1: {kind: npu, link: *link}\n"
        "    npu2:\n"
        "      kind: npu\n"
        "      link: {<<: *link, latency_us: 5}\n",
        file="soc.yaml",
    )
    links = {device.name: device.link for device in platform.root.devices}
    assert links["npu0"] == links["npu1"]
    assert (links["npu2"].bandwidth_gbps, links["npu2"].latency_us) == (4, 5)


@pytest.mark.parametrize("spec, reason", [("folder", "is a folder"), ("/dev/zero", "is not a regular file")])
def test_a_platform_that_is_not_a_file_is_refused(tmp_path, spec, reason):
    spec = str(tmp_path) if spec == "folder" else spec
    code, stderr = run_cli("check", spec)
    assert_clean_failure(code, stderr)
    assert reason in stderr


def test_an_oversized_platform_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: soc\ntarget: native\n" + "# padding\n" * 40_000)
    started = time.perf_counter()
    with pytest.raises(PlatformError, match="larger than 262144 bytes"):
        load_platform(str(path))
    assert time.perf_counter() - started < 1.0


def test_every_bad_platform_fails_cleanly_through_the_cli():
    for path in sorted(BAD_PLATFORMS.glob("*.yaml")):
        assert_clean_failure(*run_cli("check", str(path)))


# --- models -------------------------------------------------------------------------------------

BAD_MODELS = Path(__file__).resolve().parent / "bad_models"


def _expected(path: Path) -> tuple[str, str]:
    """The pinned first error line and the platform to compile for (host unless it says)."""
    lines = path.with_suffix(".expected").read_text().splitlines()
    platform = next((line.removeprefix("platform: ") for line in lines[1:] if line.startswith("platform: ")), "host")
    return lines[0].replace("{file}", str(path)), platform


@pytest.mark.parametrize("path", sorted(BAD_MODELS.glob("*.onnx")), ids=lambda p: p.stem)
def test_every_bad_model_fails_cleanly_through_the_cli_with_its_pinned_line(tmp_path, path):
    expected, platform = _expected(path)
    out = tmp_path / "out"
    code, stderr = run_cli("generate", platform, str(path), "-o", str(out))
    assert_clean_failure(code, stderr)
    assert stderr.splitlines()[0].removeprefix("hetgen: error: ").startswith(expected), stderr
    assert not out.exists()


# --- external data ------------------------------------------------------------------------------


def _matmul_model(weight_shape=(32, 48)) -> onnx.ModelProto:
    rng = np.random.default_rng(6)
    weight = numpy_helper.from_array(rng.standard_normal(weight_shape).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(weight_shape[1]).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, weight_shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, weight_shape[1]])],
        initializer=[weight, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.cc
@pytest.mark.parametrize("location", ["weights.bin", "data/weights.bin"])
def test_valid_external_data_builds_and_matches_onnxruntime(tmp_path, location):
    model_path = tmp_path / "model" / "model.onnx"
    (tmp_path / "model" / "data").mkdir(parents=True)
    onnx.save_model(_matmul_model(), model_path, save_as_external_data=True, location=location, size_threshold=0)
    assert (tmp_path / "model" / location).stat().st_size > 6000  # the weights really are outside
    x = np.random.default_rng(1).standard_normal((2, 32)).astype(np.float32)
    expected = ort_session(onnx.load(model_path).SerializeToString()).run(None, {"x": x})[0]
    out = hetgen.compile("host", model_path, out=tmp_path / "out", native_only=True, opt=("-O1",))
    np.testing.assert_allclose(hetgen.load(out).run({"x": x})["y"], expected, rtol=1e-5, atol=1e-5)


def test_a_symlink_to_data_inside_the_folder_is_followed(tmp_path):
    model_path = tmp_path / "model.onnx"
    onnx.save_model(_matmul_model(), model_path, save_as_external_data=True, location="real.bin", size_threshold=0)
    (tmp_path / "link.bin").symlink_to("real.bin")
    proto = onnx.load(model_path, load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "link.bin"
    relinked = tmp_path / "relinked.onnx"
    relinked.write_bytes(proto.SerializeToString())
    graph = import_model(relinked)
    np.testing.assert_array_equal(graph.constants["w"], numpy_helper.to_array(_matmul_model().graph.initializer[0]))


def test_an_in_memory_model_with_external_data_is_refused_and_left_unchanged(tmp_path):
    model_path = tmp_path / "model.onnx"
    onnx.save_model(_matmul_model(), model_path, save_as_external_data=True, location="w.bin", size_threshold=0)
    proto = onnx.load(model_path, load_external_data=False)
    before = proto.SerializeToString()
    with pytest.raises(ModelError, match=r"^model 'external': tensor 'w' keeps its data in an external file"):
        import_model(proto)
    assert proto.SerializeToString() == before


def test_external_data_with_a_bad_offset_is_refused(tmp_path):
    model_path = tmp_path / "model.onnx"
    onnx.save_model(_matmul_model(), model_path, save_as_external_data=True, location="w.bin", size_threshold=0)
    proto = onnx.load(model_path, load_external_data=False)
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "offset":
            entry.value = "-5"
    model_path.write_bytes(proto.SerializeToString())
    with pytest.raises(ModelError, match=r"tensor 'w': external data 'offset' is '-5'; it must be a non-negative"):
        import_model(model_path)


# --- random mutations through the CLI ------------------------------------------------------------

SHIPPED_PLATFORMS = Path(hetgen.__file__).resolve().parent.parent / "platforms"
# Words a careless edit or a hostile file puts where a value was.
YAML_TOKENS = (b"-1", b"0", b"1e400", b".inf", b".nan", b"null", b"[]", b"{}", b"*x", b"&x", b"~", b"'", b"9" * 30)
YAML_TOKENS += (b"!!python/object:os.system", b"{a: *a}", b"<<: 3", b"\t", b"\n  - ", b"npu", b"vm", b"2 ** 64", b"1/0")
YAML_TOKENS += (b"'(10**64)**64'", b"'((9**64)**64)**64'", b"'(0-8)**0.5'", b"Conv2d", b"./no/such/dir", b"9" * 400)


def small_model() -> bytes:
    """Conv, Relu, MaxPool, Reshape, Gemm, Softmax: few weights, so most flips hit structure."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
        numpy_helper.from_array(rng.standard_normal((64, 5)).astype(np.float32), "g"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Reshape", ["p", "shape"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "g"], ["z"], name="gemm"),
        helper.make_node("Softmax", ["z"], ["y"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def mutate(data: bytes, rng: random.Random, tokens: tuple[bytes, ...] = ()) -> bytes:
    """A byte flip, a few random bytes, a truncation, a repeated slice, or (text) a replaced word."""
    if tokens and rng.random() < 0.5:
        word = rng.choice(list(re.finditer(rb"[A-Za-z0-9_.]+", data)))
        return data[: word.start()] + rng.choice(tokens) + data[word.end() :]
    data = bytearray(data)
    choice = rng.randrange(4)
    if choice == 0:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif choice == 1:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif choice == 2:
        del data[rng.randrange(len(data)) :]
    else:
        start, end = sorted(rng.randrange(len(data)) for _ in range(2))
        data[start:start] = data[start:end][:64]
    return bytes(data)


def assert_no_internal_error(code: int, stderr: str, case: Path) -> None:
    assert code in (0, 1), (case, stderr)
    assert "internal error" not in stderr and "Traceback" not in stderr, (case, stderr)


@pytest.mark.usefixtures("templates_compiled_once")  # generates many projects (conftest.py)
def test_mutated_models_never_crash_hetgen(tmp_path):
    rng, base = random.Random(2026), small_model()
    outcomes = {0: 0, 1: 0}
    for index in range(250):
        case = tmp_path / "mutated.onnx"
        case.write_bytes(mutate(base, rng))
        if index % 2:  # generating also runs lowering and code generation
            code, stderr = run_cli("generate", "soc", str(case), "-o", str(tmp_path / "out"))
        else:
            code, stderr = run_cli("explain", "soc", str(case))
        assert_no_internal_error(code, stderr, case)
        outcomes[code] += 1
    assert min(outcomes.values()) > 20, outcomes  # the mutations reach past parsing, and are refused too


@pytest.mark.parametrize("name", ["soc", "dual"])
def test_mutated_platform_files_never_crash_hetgen(tmp_path, name):
    rng, base = random.Random(name), (SHIPPED_PLATFORMS / f"{name}.yaml").read_bytes()
    # The copy lives in tmp_path: a templates folder relative to the shipped file must still exist.
    base = base.replace(b"../templates/", str(SHIPPED_PLATFORMS.parent / "templates").encode() + b"/")
    outcomes = {0: 0, 1: 0}
    for _ in range(150):
        case = tmp_path / f"{name}.yaml"
        case.write_bytes(mutate(base, rng, YAML_TOKENS))
        code, stderr = run_cli("check", str(case))
        assert_no_internal_error(code, stderr, case)
        outcomes[code] += 1
    assert min(outcomes.values()) > 10, outcomes


# --- regressions the fuzzing found (each was "internal error" before) ------------------------------

EXAMPLES = Path(hetgen.__file__).resolve().parent.parent / "examples"


def _edited(proto: onnx.ModelProto, tmp_path: Path, **initializers: np.ndarray) -> Path:
    for tensor in proto.graph.initializer:
        if tensor.name in initializers:
            tensor.CopyFrom(numpy_helper.from_array(initializers[tensor.name], tensor.name))
    path = tmp_path / "model.onnx"
    path.write_bytes(proto.SerializeToString())
    return path


def test_regression_zero_size_input_reshaped_to_a_huge_dimension(tmp_path):
    """numpy refused to build the (2^63 - 1, 0) placeholder used to type the next node."""
    proto = onnx.ModelProto.FromString(small_model())
    proto.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 0
    path = _edited(proto, tmp_path, shape=np.array([(1 << 63) - 1, -1], np.int64))
    code, stderr = run_cli("generate", "soc", str(path), "-o", str(tmp_path / "out"))
    assert_clean_failure(code, stderr)
    # onnx's strict inference sees the Reshape's 0 elements reach the Gemm's 64 inputs (issue 18, item 3)
    assert "Gemm 'gemm': Dimension mismatch in unification between 64 and 0 (onnx shape inference, strict)" in stderr


def test_regression_decomposed_gelu_over_an_untyped_tensor(tmp_path):
    """The Gelu rewrite read the type of a tensor whose shape could not be inferred."""
    proto = onnx.load(EXAMPLES / "transformer_tiny.onnx")
    path = _edited(proto, tmp_path, shape_6=np.array([16, 1 << 40], np.int64))
    code, stderr = run_cli("generate", "host", str(path), "-o", str(tmp_path / "out"))
    assert_clean_failure(code, stderr)
    assert "Gemm 'gemm': Dimension mismatch in unification between 32 and 1099511627776 (onnx shape inference" in stderr


def test_regression_conv_bias_of_another_layer_before_batchnorm(tmp_path):
    """Folding BatchNormalization broadcast a 16-value bias against 32 channels."""
    proto = onnx.load(EXAMPLES / "resnet_tiny.onnx")
    conv = next(node for node in proto.graph.node if node.name == "conv_3")
    conv.input[2] = "conv_b_2"
    path = tmp_path / "model.onnx"
    path.write_bytes(proto.SerializeToString())
    code, stderr = run_cli("explain", "soc", str(path))
    assert code in (0, 1) and "internal error" not in stderr, stderr


# --- sizes ------------------------------------------------------------------------------------------


def _chain_model(elements: int) -> onnx.ModelProto:
    """y = relu(relu(x) + 1): one intermediate of `elements` float32 values."""
    one = numpy_helper.from_array(np.ones((1,), np.float32), "one")
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Add", ["r", "one"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ],
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, elements])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, elements])],
        initializer=[one],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


MCU_PLATFORM = """\
name: board
kinds:
  mcu:
    refines: cpu
    doc: A 32-bit microcontroller with 256 KiB of RAM for static data.
    memory: {address_bytes: "2 ** 32", static_bytes: 262144}
target: mcu
"""


def test_a_declared_static_bytes_figure_takes_effect(tmp_path):
    platform = load_platform_text(MCU_PLATFORM, file="board.yaml")
    assert (platform.root.address_bytes, platform.root.static_bytes) == (1 << 32, 262144)
    hetgen.compile(platform, _chain_model(16 << 10), out=tmp_path / "fits", build=False)  # 64 KiB arena
    with pytest.raises(PlacementError) as caught:
        hetgen.compile(platform, _chain_model(64 << 10), out=tmp_path / "too_big", build=False)
    assert str(caught.value).startswith(
        "board: the static arena (262144 bytes, largest tensor 'r' 262144 bytes) and weights (4 bytes) need "
        "262148 bytes; kind 'mcu' links at most 262144 bytes of static data (memory.static_bytes)"
    )
    assert not (tmp_path / "too_big").exists()


@pytest.mark.cc
@pytest.mark.parametrize("platform", ["host", pytest.param("soc", marks=pytest.mark.external)])
def test_zero_size_tensors_build_and_match_onnxruntime(tmp_path, platform):
    bias = numpy_helper.from_array(np.ones((3,), np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
            helper.make_node("ReduceSum", ["s"], ["total"], keepdims=0),
        ],
        "zero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 3]),
            helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
        ],
        initializer=[bias],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.zeros((0, 3), np.float32)
    expected = ort_session(proto.SerializeToString()).run(None, {"x": x})
    got = hetgen.load(hetgen.compile(platform, proto, out=tmp_path / "out")).run({"x": x})
    assert got["y"].shape == (0, 3)
    np.testing.assert_array_equal(got["total"], expected[1])


@pytest.mark.parametrize("spec, reason", [("folder", "is a folder"), ("/dev/zero", "is not a regular file")])
def test_a_model_that_is_not_a_file_is_refused(tmp_path, spec, reason):
    spec = str(tmp_path) if spec == "folder" else spec
    code, stderr = run_cli("explain", "host", spec)
    assert_clean_failure(code, stderr)
    assert reason in stderr


def test_a_model_past_protobufs_limit_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "huge.onnx"
    with path.open("wb") as stream:  # sparse: no disk or memory is used
        stream.truncate(3 << 30)
    tracemalloc.start()
    with pytest.raises(ModelError, match=r"3221225472 bytes, past protobuf's 2 GiB limit"):
        import_model(path)
    assert tracemalloc.get_traced_memory()[1] < 10 << 20
    tracemalloc.stop()


def test_a_large_constant_is_not_computed_at_import(tmp_path):
    """ConstantOfShape of 1 GiB stays a node: folding it would take that memory in hetgen itself."""
    shape = numpy_helper.from_array(np.array([1, 256 << 20], np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["big"]),
            helper.make_node("Add", ["big", "x"], ["sum"]),
            helper.make_node("ReduceMax", ["sum"], ["y"], keepdims=0),
        ],
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        initializer=[shape],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    tracemalloc.start()
    imported = import_model(proto)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100 << 20
    assert [node.op for node in imported.nodes][0] == "ConstantOfShape"
    assert imported.types["big"].nbytes == 1 << 30


def test_bad_model_folder_covers_the_hostile_cases():
    names = {path.stem for path in BAD_MODELS.glob("*.onnx")}
    required = {
        "external_missing",
        "external_short",
        "external_absolute",
        "external_escaping",
        "external_symlink",
        "huge_constant_of_shape",
        "huge_initializer_dims",
        "arena_too_large",
        "overflowing_shape",
        "negative_dimension",
        "cycle",
        "input_never_produced",
        "duplicate_output_names",
        "empty_graph",
        "wrong_message_type",
        "random_bytes",
        "non_utf8_name",
    }
    assert required <= names, required - names
