"""hetgen.json is read in one place (`read_manifest`): a built project's manifest comes back as the
typed value codegen wrote, and a missing, broken or other-version file is one clear message naming
the file, a non-zero exit, and no traceback, whichever command reads it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.cli import EXIT_OK, EXIT_USER_ERROR, main
from hetgen.codegen.manifest import MANIFEST, MANIFEST_VERSION, Manifest, read_manifest
from hetgen.errors import HetgenError

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

REPO = Path(__file__).resolve().parent.parent


def small_model() -> onnx.ModelProto:
    """x[1, 8] -> MatMul -> Relu -> y[1, 4]."""
    weights = numpy_helper.from_array(np.random.default_rng(4).standard_normal((8, 4)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Relu", ["m"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[weights],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return hetgen.compile("host", small_model(), out=tmp_path_factory.mktemp("built") / "small", native_only=True)


@pytest.fixture
def project(built, tmp_path) -> Path:
    """A copy of the built project, for a test to break."""
    return Path(shutil.copytree(built, tmp_path / "small"))


@pytest.fixture
def cli(capfd, monkeypatch):
    monkeypatch.chdir(REPO)

    def run(*args) -> tuple[int, str]:
        code = main([str(a) for a in args])
        return code, capfd.readouterr().err

    return run


def test_a_built_projects_manifest_reads_back_as_the_value_written(built):
    written = (built / MANIFEST).read_bytes()
    manifest = read_manifest(built)
    assert isinstance(manifest, Manifest) and manifest.to_bytes() == written
    assert manifest.platform == "host" and [t.name for t in manifest.inputs] == ["x"]
    assert json.loads(written)["hetgen_manifest"] == MANIFEST_VERSION


def _edited(change):
    """hetgen.json with `change` applied to its JSON value."""
    return lambda text: json.dumps(change(json.loads(text))).encode()


def _without(key: str):
    return _edited(lambda data: {k: v for k, v in data.items() if k != key})


def _with(**values):
    return _edited(lambda data: {**data, **values})


# (what is wrong, the new hetgen.json from the written one, what the message says)
BROKEN = [
    ("truncated", lambda text: text[: len(text) // 2], "cannot be read as JSON"),
    ("not text", lambda text: b"\xff\x00\xfe" * 8, "cannot be read as JSON"),
    ("empty", lambda text: b"", "cannot be read as JSON"),
    ("a list", lambda text: b"[1, 2]\n", "not what hetgen writes"),
    (
        "a newer format",
        _with(hetgen_manifest=MANIFEST_VERSION + 1),
        f"another hetgen version (format {MANIFEST_VERSION + 1};",
    ),
    ("no format version", _without("hetgen_manifest"), "another hetgen version (no format version;"),
    ("a missing entry", _without("prefix"), "has no 'prefix' entry"),
    ("a wrong type", _with(inputs=5), "not what hetgen writes"),
    ("a prefix that is not C", _with(prefix="x(); abort"), "is not a C identifier"),
    ("a negative size", _with(workspace_size=-64), "workspace_size -64 is not a byte count"),
]


@pytest.mark.parametrize("what, change, says", BROKEN, ids=[case[0] for case in BROKEN])
def test_a_broken_manifest_is_one_message_naming_the_file(project, cli, what, change, says):
    path = project / MANIFEST
    path.write_bytes(change(path.read_bytes()))
    with pytest.raises(HetgenError) as raised:
        hetgen.load(project)
    message = str(raised.value)
    assert message.startswith(f"{project / MANIFEST}: ") and says in message, message
    assert "regenerate" in message
    for command in (("verify", project), ("bench", project, "--runs", 1)):
        code, err = cli(*command)
        assert code == EXIT_USER_ERROR, err
        assert err == f"hetgen: error: {message}\n"  # one line, no traceback, not "internal error"


def test_a_missing_manifest_says_the_folder_is_not_a_project(project, cli):
    (project / MANIFEST).unlink()
    code, err = cli("verify", project)
    assert code == EXIT_USER_ERROR
    assert err == (
        f"hetgen: error: {project}: not a hetgen project (no {MANIFEST}); "
        f"run `hetgen PLATFORM MODEL -o {project}` first\n"
    )


def test_the_untouched_copy_verifies(project, cli):
    code, err = cli("verify", project)  # the cases above fail by the manifest alone
    assert code == EXIT_OK, err
