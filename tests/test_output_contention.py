"""Two runs on one -o, a crashed run's leftovers, a project matched with the wrong model, a --shape
that contradicts the model: each is one clear message (exit 1) and never a half-written folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.build.output import lock_path, writing
from hetgen.cli import main
from hetgen.frontend.fingerprint import model_sha256

REPO = Path(__file__).resolve().parent.parent


def dense_model(batch: int | str = 1, seed: int = 2, name: str = "main_graph") -> onnx.ModelProto:
    """x[batch, 8] -> MatMul -> Relu -> y[batch, 4]; every torch export's graph is `main_graph`."""
    weights = np.random.default_rng(seed).standard_normal((8, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [numpy_helper.from_array(weights, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def cli(capfd, monkeypatch):
    monkeypatch.chdir(REPO)

    def run(*args):
        code = main([str(a) for a in args])
        captured = capfd.readouterr()
        return code, captured.out + captured.err

    return run


def hidden_siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def test_a_second_writer_is_refused_while_the_first_holds_the_project(cli, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(dense_model(), model)
    out = tmp_path / "out"
    with writing(out.resolve()):
        assert lock_path(out).read_text().strip() == str(os.getpid())
        code, text = cli("generate", "host", model, "-o", out)
    assert code == 1, text
    assert f"{out}: another hetgen is writing this project (pid {os.getpid()})" in text, text
    assert "Traceback" not in text and not out.exists() and hidden_siblings(out) == []
    assert not lock_path(out).exists()  # removed by its holder on the way out
    code, text = cli("generate", "host", model, "-o", out)  # free again
    assert code == 0, text


def test_two_concurrent_runs_on_one_folder_report_honestly_and_leave_no_staging(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(dense_model(), model)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "hetgen", "generate", "host", str(model), "-o", str(out)]
    runs = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    runs.append(subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = [(run.wait(timeout=300), run.stdout.read()) for run in runs]
    for code, text in results:
        assert code in (0, 1), text
        assert "Traceback" not in text and "None" not in text, text
        if code == 1:  # its pid is named unless the winner had only just taken the lock
            assert f"{out}: another hetgen is writing this project" in text, text
    assert any(code == 0 for code, _ in results), results
    assert hidden_siblings(out) == [] and not lock_path(out).exists()
    assert json.loads((out / "hetgen.json").read_text())["model"] == "main_graph"


def test_a_crashed_runs_staging_is_removed_and_a_half_swapped_project_put_back(cli, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(dense_model(), model)
    out = tmp_path / "out"
    assert cli("generate", "host", model, "-o", out)[0] == 0
    # A run killed between the two renames of its swap: the project only set aside, a staging left.
    aside = tmp_path / ".out.old-abcd1234"
    os.replace(out, aside)
    (tmp_path / ".out.staging-12345-0123abcd" / "sub").mkdir(parents=True)
    unrelated = tmp_path / ".outer.staging-12345-0123abcd"  # another project's: not ours to remove
    unrelated.mkdir()
    half_written = aside / "host" / ".model.c.tmp-12345-0123abcd"  # an in-place write killed before its rename
    half_written.write_text("/* half")
    code, text = cli("generate", "host", model, "-o", out)
    assert code == 0, text
    assert (out / "hetgen.json").is_file() and not (out / "host" / half_written.name).exists()
    assert "0 files changed" in text  # the set-aside project was put back, then regenerated unchanged
    assert hidden_siblings(out) == [] and unrelated.is_dir()


def test_explain_built_refuses_a_project_of_another_model_with_the_same_graph_name(cli, tmp_path):
    built_from, other = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(dense_model(seed=1), built_from)
    onnx.save(dense_model(seed=2), other)  # other weights, same graph name
    out = tmp_path / "out"
    assert cli("generate", "host", built_from, "-o", out)[0] == 0
    recorded = json.loads((out / "hetgen.json").read_text())["model_sha256"]
    assert len(recorded) == 64
    code, text = cli("explain", "host", other, "--format", "html", "--built", out)
    assert code == 1, text
    assert f"{out}: built from another model than {other}" in text and "main_graph" in text, text
    assert "Traceback" not in text


def test_explain_built_refuses_other_input_shapes(cli, tmp_path):
    model = tmp_path / "dynamic.onnx"
    onnx.save(dense_model(batch="N"), model)
    out = tmp_path / "out"
    assert cli("generate", "host", model, "-o", out, "--shape", "x=3x8")[0] == 0
    code, text = cli("explain", "host", model, "--format", "html", "--built", out, "--shape", "x=2x8")
    assert code == 1, text
    assert "built with input shapes 3x8, not 2x8" in text, text


def test_shape_refuses_to_change_a_static_dimension(cli, tmp_path):
    model = tmp_path / "dynamic.onnx"
    onnx.save(dense_model(batch="N"), model)  # x: N x 8
    code, text = cli("generate", "host", model, "-o", tmp_path / "o", "--shape", "x=2x9")
    assert code == 1, text
    assert "shapes gives input 'x' 2x9, but the model declares ?x8" in text, text
    assert "axis 1 is 8, not 9" in text and not (tmp_path / "o").exists()
    code, text = cli("generate", "host", model, "-o", tmp_path / "o", "--shape", "x=2x8")  # the static 8 restated
    assert code == 0, text


def test_a_model_hashes_the_same_in_memory_and_saved(tmp_path):
    proto = dense_model()
    onnx.save(proto, tmp_path / "m.onnx")
    assert model_sha256(proto) == model_sha256(tmp_path / "m.onnx") != model_sha256(dense_model(seed=3))
