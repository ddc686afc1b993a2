"""The command line as a user meets it: exit codes, pipes, --shape, --inputs, --version, sanitizer
builds, and the model copy verify reads. Every build here is real and checked against onnxruntime."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.pipeline import MODEL_COPY, model_copy_files
from hetgen.runtime.inputs import value_ranges
from hetgen.runtime.loader import TensorInfo
from hetgen.runtime.reference import ort_session

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args, cwd=REPO):
    """hetgen as a separate process (for what needs one: pipes, the interpreter's exit)."""
    return subprocess.run([sys.executable, "-m", "hetgen", *map(str, args)], capture_output=True, text=True, cwd=cwd)


def dense_model(batch: int | str = 1) -> onnx.ModelProto:
    """x[batch, 8] -> MatMul -> Add -> Relu -> y[batch, 4]."""
    rng = np.random.default_rng(2)
    weights = [
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        initializer=weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def embedding_model(vocabulary: int = 5) -> onnx.ModelProto:
    """Token ids index a table of `vocabulary` rows, fewer than the 8 values random ints used to take."""
    table = np.random.default_rng(3).standard_normal((vocabulary, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids64"], to=TensorProto.INT64, name="cast"),
        helper.make_node("Gather", ["table", "ids64"], ["embedded"], axis=0, name="embed"),
        helper.make_node("Relu", ["embedded"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT32, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 4])],
        initializer=[numpy_helper.from_array(table, "table")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def dense_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "dense.onnx"
    onnx.save(dense_model(), path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory, dense_file) -> Path:
    out = tmp_path_factory.mktemp("built") / "host"
    result = run_cli("host", dense_file, "-o", out)
    assert result.returncode == 0, result.stderr
    return out


# Exit codes, --version, pipes


def test_help_documents_the_exit_codes_and_version_prints_it(cli):
    result = cli("--help")
    assert result.returncode == 0
    for line in ("0    success", "1    a user error", "2    a usage error", "3    a hetgen bug"):
        assert line in result.stdout, result.stdout
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"hetgen {hetgen.__version__}"
    usage = cli("verify")  # a missing argument is argparse's usage error
    assert usage.returncode == 2 and "usage:" in usage.stderr


@pytest.mark.parametrize(
    "args", [("targets",), ("schema",), ("explain", "soc", "examples/resnet_tiny.onnx"), ("check", "soc")]
)
def test_a_reader_that_goes_away_ends_the_command_quietly(args):
    """`hetgen explain ... | head -1`: the pipe closes before hetgen writes."""
    process = subprocess.Popen(
        [sys.executable, "-m", "hetgen", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
    )
    process.stdout.close()  # like `head` after its line, but before hetgen's first write
    stderr = process.stderr.read().decode()
    assert process.wait() == 141 and stderr == "", stderr


def test_a_real_shell_pipe_into_head(tmp_path):
    command = f"{sys.executable} -m hetgen explain soc examples/resnet_tiny.onnx | head -1; echo ${{PIPESTATUS[0]}}"
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=REPO)
    first, status = result.stdout.splitlines()
    assert first.startswith("placement of") and status in ("0", "141") and result.stderr == "", result


# verify: exit 1 for a mismatch, --inputs, inputs the model can take


@pytest.mark.cc
def test_verify_returns_1_for_a_mismatch(cli, tmp_path, dense_file):
    """verify compares with the model copy; make that copy disagree with what was built."""
    out = tmp_path / "mismatch"
    result = cli("host", dense_file, "-o", out)
    assert result.returncode == 0, result.stderr
    changed = onnx.load(out / MODEL_COPY)
    changed.graph.node[2].op_type = "Sigmoid"  # Relu -> Sigmoid
    onnx.save(changed, out / MODEL_COPY)
    result = cli("verify", out)
    assert result.returncode == 1 and "MISMATCH" in result.stdout and "0 of 1 outputs match" in result.stdout


@pytest.mark.cc
def test_verify_takes_the_users_inputs(cli, tmp_path, built):
    x = np.random.default_rng(11).standard_normal((1, 8)).astype(np.float32)
    good = tmp_path / "good.npz"
    np.savez(good, x=x)
    result = cli("verify", built, "--inputs", good)
    assert result.returncode == 0 and "1 of 1 outputs match" in result.stdout, result.stdout + result.stderr
    expected = ort_session(str(built / MODEL_COPY)).run(None, {"x": x})[0]
    np.testing.assert_allclose(hetgen.load(built).run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.cc
@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x": np.zeros((2, 4), np.float32)}, "'x' has shape (2, 4); the model was built for (1, 8)"),
        ({"x": np.zeros((1, 8), np.float64)}, "'x' has dtype float64; the model takes float32"),
        ({"input": np.zeros((1, 8), np.float32)}, "missing inputs ['x'], unknown arrays ['input']"),
    ],
)
def test_verify_refuses_inputs_the_model_does_not_take(cli, tmp_path, built, arrays, message):
    path = tmp_path / "inputs.npz"
    np.savez(path, **arrays)
    result = cli("verify", built, "--inputs", path)
    assert result.returncode == 1 and message in result.stderr and "x: float32[1x8]" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.cc
def test_verify_inputs_that_are_not_npz(cli, tmp_path, built):
    (tmp_path / "notes.txt").write_text("not numpy")
    for path in (tmp_path / "notes.txt", tmp_path / "missing.npz"):
        result = cli("verify", built, "--inputs", path)
        assert result.returncode == 1 and str(path) in result.stderr and "np.savez" in result.stderr, result.stderr


@pytest.mark.cc
def test_random_index_inputs_stay_inside_the_table(cli, tmp_path):
    """Token ids for a 5-row table: random values up to 8 made onnxruntime fail and verify blame hetgen."""
    model = tmp_path / "embedding.onnx"
    onnx.save(embedding_model(vocabulary=5), model)
    out = tmp_path / "emb"
    assert cli("host", model, "-o", out).returncode == 0
    for seed in range(3):
        result = cli("verify", out, "--seed", seed)
        assert result.returncode == 0 and "1 of 1 outputs match" in result.stdout, result.stdout + result.stderr


def test_value_ranges_follow_indices_to_what_they_index(tmp_path):
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [3])
    rows = helper.make_tensor_value_info("rows", TensorProto.INT64, [2, 3])
    hot = helper.make_tensor_value_info("hot", TensorProto.INT64, [4])
    divisor = helper.make_tensor_value_info("divisor", TensorProto.INT64, [4])
    plain = helper.make_tensor_value_info("plain", TensorProto.INT64, [4])
    data = np.zeros((10, 7), np.float32)
    nodes = [
        helper.make_node("Unsqueeze", ["ids", "zero"], ["ids2"]),
        helper.make_node("Gather", ["data", "ids2"], ["g"], axis=1),  # axis 1: 7 columns
        helper.make_node("GatherElements", ["data", "rows"], ["ge"], axis=0),  # axis 0: 10 rows
        helper.make_node("OneHot", ["hot", "depth", "values"], ["oh"]),
        helper.make_node("Div", ["plain", "divisor"], ["q"]),
    ]
    inits = [
        numpy_helper.from_array(data, "data"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([3], np.int64), "depth"),
        numpy_helper.from_array(np.array([0, 1], np.float32), "values"),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("g", "ge", "oh", "q")]
    graph = helper.make_graph(nodes, "indices", [ids, rows, hot, divisor, plain], outputs, initializer=inits)
    path = tmp_path / "indices.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    infos = [
        TensorInfo(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim), np.dtype(np.int64))
        for v in (ids, rows, hot, divisor, plain)
    ]
    assert value_ranges(path, infos) == {
        "ids": (0, 7),
        "rows": (0, 8),  # GatherElements on axis 0 of 10 rows: the default small range already fits
        "hot": (0, 3),
        "divisor": (1, 8),
        "plain": (0, 8),
    }


# --shape and shapes=


@pytest.mark.cc
def test_shape_fixes_a_dynamic_dimension(cli, tmp_path):
    model = tmp_path / "dynamic.onnx"
    onnx.save(dense_model(batch="N"), model)
    refused = cli("host", model, "-o", tmp_path / "refused")
    assert refused.returncode == 1 and "--shape x=1x8" in refused.stderr and "shapes=" in refused.stderr
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "fixed"
    result = cli("host", model, "-o", out, "--shape", "x=3x8")
    assert result.returncode == 0, result.stderr
    unwrapped = re.sub(r" \$\n +", " ", (out / "build.ninja").read_text())  # ninja_syntax wraps long lines
    assert "--shape x=3x8" in unwrapped  # regeneration keeps the shapes
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(
        hetgen.load(out).run({"x": x})["y"], ort_session(str(model)).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6
    )
    assert cli("verify", out).returncode == 0
    explained = cli("explain", "host", model, "--shape", "x=2x8")
    assert explained.returncode == 0 and "placement of" in explained.stdout, explained.stderr
    python = hetgen.compile("host", model, out=tmp_path / "python", shapes={"x": (2, 8)}, native_only=True)
    assert [t.shape for t in hetgen.load(python).inputs] == [(2, 8)]


@pytest.mark.cc
def test_ninja_regeneration_keeps_the_shapes(cli, tmp_path):
    model = tmp_path / "dynamic.onnx"
    onnx.save(dense_model(batch="N"), model)
    out = tmp_path / "regen"
    assert cli("host", model, "-o", out, "--shape", "x=2x8").returncode == 0
    os.utime(model)  # newer than build.ninja: ninja regenerates
    ninja = [sys.executable, "-c", "import ninja, sys; sys.exit(ninja._program('ninja', sys.argv[1:]))", "-C", out]
    result = subprocess.run(list(map(str, ninja)), capture_output=True, text=True)
    assert result.returncode == 0 and "REGENERATE" in result.stdout, result.stdout + result.stderr
    assert [t.shape for t in hetgen.load(out).inputs] == [(2, 8)]


@pytest.mark.parametrize("value", ["x", "x=1xa", "=1x8", "x=-1x8"])
def test_a_malformed_shape_is_one_message(cli, tmp_path, dense_file, value):
    result = cli("host", dense_file, "-o", tmp_path / "o", "--shape", value)
    assert result.returncode == 1 and "--shape" in result.stderr and "NAME=DIMS" in result.stderr, result.stderr


# The model copy keeps external data


@pytest.mark.cc
def test_model_copy_keeps_external_data(cli, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    onnx.save(dense_model(), source / "dense.onnx", save_as_external_data=True, location="dense.data", size_threshold=0)
    out = tmp_path / "ext"
    assert cli("host", source / "dense.onnx", "-o", out).returncode == 0
    (source / "dense.data").unlink()  # verify must not need the user's data file any more
    copy = onnx.load(out / MODEL_COPY, load_external_data=False)
    assert not any(t.data_location == TensorProto.EXTERNAL for t in copy.graph.initializer)
    result = cli("verify", out)
    assert result.returncode == 0 and "1 of 1 outputs match" in result.stdout, result.stdout + result.stderr


def test_a_model_beyond_one_protobuf_keeps_its_data_beside_the_copy(tmp_path):
    model = dense_model()
    files = model_copy_files(model, limit=100)  # as if it were over protobuf's 2 GiB
    assert [f.path for f in files] == [MODEL_COPY, f"{MODEL_COPY}.data"]
    for generated in files:
        (tmp_path / generated.path).write_bytes(generated.content)
    x = np.ones((1, 8), np.float32)
    got = ort_session(str(tmp_path / MODEL_COPY)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, ort_session(model.SerializeToString()).run(None, {"x": x})[0])
    assert len(model.graph.initializer[0].raw_data) > 0  # the caller's model is left as it was


# Sanitizer builds


@pytest.mark.cc
def test_sanitized_build_is_verified_with_its_runtime_loaded(cli, tmp_path, dense_file):
    out = tmp_path / "asan"
    result = cli("host", dense_file, "-o", out, "--sanitize", "address,undefined", "-O1")
    assert result.returncode == 0, result.stderr
    result = cli("verify", out)
    assert result.returncode == 0 and "1 of 1 outputs match" in result.stdout, result.stdout + result.stderr
    with pytest.raises(hetgen.HetgenError, match=r"LD_PRELOAD=\$\(cc -print-file-name=libasan.so\)"):
        hetgen.load(out)  # this Python started without the ASan runtime: refused, with what to run
    bench = cli("bench", out)
    assert bench.returncode == 1 and "LD_PRELOAD=" in bench.stderr and "rebuild without --sanitize" in bench.stderr


# Atomic output


@pytest.mark.cc
def test_a_failed_build_names_its_log_and_writes_no_folder(cli, tmp_path, dense_file, monkeypatch):
    monkeypatch.setenv("HETGEN_LAUNCHER", "false")  # every compile command fails
    result = cli("host", dense_file, "-o", tmp_path / "out")
    log = (tmp_path / "out").resolve().with_name("out.hetgen-failed") / "build.log"
    assert result.returncode == 1 and f"the build failed (ninja exit 1); log: {log}" in result.stderr, result.stderr
    assert log.is_file() and "FAILED" in log.read_text()
    assert not (tmp_path / "out").exists() and "Traceback" not in result.stderr


# Docs


def test_readme_and_docs_link_only_to_files_in_the_repository():
    import re

    documents = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert {d.name for d in documents} >= {"README.md", "architecture.md", "platform-language.md"}
    for document in documents:
        text = document.read_text()
        assert "shared/DESIGN.md" not in text, document
        for target in re.findall(r"\]\(([^)#]+)", text):
            if not target.startswith(("http://", "https://")):
                assert (document.parent / target).resolve().is_file(), f"{document.name} links to missing {target}"
    readme = (REPO / "README.md").read_text()
    assert "](docs/architecture.md)" in readme and "](docs/platform-language.md)" in readme
