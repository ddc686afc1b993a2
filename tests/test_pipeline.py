"""End-to-end: platform + model → generated project → ninja → library, against onnxruntime."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.devices import device_report
from hetgen.runtime.reference import ort_session
from hetgen.runtime.verify import verify

REPO = Path(__file__).resolve().parent.parent


def residual_model(channels: int = 8, size: int = 16, kernel: int = 3, final: str = "LeakyRelu") -> onnx.ModelProto:
    """Conv→Relu→Conv→Add(residual)→LeakyRelu: the heart of a ResNet block."""
    rng = np.random.default_rng(1)
    pad = kernel // 2
    inits = [
        numpy_helper.from_array((rng.standard_normal((channels, 3, kernel, kernel)) * 0.3).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[pad] * 4, name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
        helper.make_node("LeakyRelu", ["a"], ["y"], alpha=0.1, name="leaky")
        if final == "LeakyRelu"
        else helper.make_node(final, ["a"], ["y"], name="final"),
    ]
    graph = helper.make_graph(
        nodes,
        "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "residual.onnx"
    onnx.save(residual_model(), path)
    return path


@pytest.fixture(scope="module")
def big_model_file(tmp_path_factory) -> Path:
    """Large enough that offloading the convolutions to the npu pays for the link."""
    path = tmp_path_factory.mktemp("models") / "residual_big.onnx"
    onnx.save(residual_model(channels=16, size=16, final="Relu"), path)
    return path


def reference(model_path: Path, feeds):
    session = ort_session(model_path.read_bytes())
    return session.run(None, feeds)


def host_platform(runtime: str) -> str:
    return f"name: host_{runtime}\ntarget: {{kind: native, runtime: {runtime}}}\n"


@pytest.mark.cc
@pytest.mark.parametrize("runtime", ["aot", "graph", "vm"])
def test_every_runtime_matches_onnxruntime(tmp_path, model_file, runtime):
    platform = load_platform_text(host_platform(runtime))
    out = hetgen.compile(platform, model_file, out=tmp_path / "out")
    model = hetgen.load(out)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = model.run({"x": x})["y"]
    np.testing.assert_allclose(got, reference(model_file, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert [t.name for t in model.inputs] == ["x"] and model.outputs[0].shape == (1, 8, 16, 16)


@pytest.mark.cc
def test_soc_runs_heterogeneous_program_in_one_process(tmp_path, big_model_file):
    out = hetgen.compile("soc", big_model_file, out=tmp_path / "soc", native_only=True)  # one process: the native build
    manifest = json.loads((out / "hetgen.json").read_text())
    roles = {t["path"]: t["role"] for t in manifest["targets"]}
    assert roles["soc"] == "root"
    assert roles.get("soc/vdevice0/npu0") == "accelerator", "the npu should take the convolutions"
    assert (out / "soc/vdevice0/npu0/model.c").is_file() and (out / "soc/model.c").is_file()
    assert all(error.ok for error in verify(out))
    report = device_report(out, runs=2)
    npu = next(line for line in report if line.startswith("  soc/vdevice0/npu0: "))
    assert "kernels 0.0 us" not in npu, report


@pytest.mark.cc
def test_second_run_leaves_ninja_nothing_to_do_and_edits_rebuild_one_kernel(tmp_path, model_file):
    out = tmp_path / "inc"
    platform = tmp_path / "host.yaml"
    platform.write_text(host_platform("graph"))
    hetgen.compile(platform, model_file, out=out)
    ninja = [
        sys.executable,
        "-c",
        "import ninja, sys; sys.exit(ninja._program('ninja', sys.argv[1:]))",
        "-C",
        str(out),
        "-n",
        "-d",
        "explain",
    ]
    hetgen.compile(platform, model_file, out=out, build=False)
    dry = subprocess.run(ninja, capture_output=True, text=True)
    assert "no work to do" in dry.stdout, dry.stdout + dry.stderr
    # Change one node's attribute: only its kernel (and the links) rebuild.
    edited = onnx.load(model_file)
    for node in edited.graph.node:
        if node.name == "leaky":
            node.attribute[0].f = 0.2
    edited_path = tmp_path / "edited.onnx"
    onnx.save(edited, edited_path)
    hetgen.compile(platform, edited_path, out=out, build=False)
    plan = subprocess.run(ninja[:-2], capture_output=True, text=True).stdout
    compiled = {line.rsplit("/", 1)[1] for line in plan.splitlines() if "] CC " in line}
    # The Conv that absorbed the residual Add and the LeakyRelu: only the kernel file that holds it
    # (hetgen/codegen/kernel_files.py groups kernels), not model.c, the weights or another file.
    assert compiled == {f"{_kernel_file_of(out, 'host_graph', '_conv_conv2(')}.o"}, plan


def test_generation_is_deterministic(tmp_path, model_file):
    platform = load_platform_text(host_platform("vm"))
    first = hetgen.compile(platform, model_file, out=tmp_path / "a", build=False)
    second = hetgen.compile(platform, model_file, out=tmp_path / "b", build=False)
    files_a = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert files_a == files_b
    for relative in files_a:
        if relative.name in ("build.ninja", "compile_commands.json"):
            continue  # they name the output folder
        assert (first / relative).read_bytes() == (second / relative).read_bytes(), relative


@pytest.mark.cc
def test_sanitized_example_runs_clean(tmp_path, big_model_file):
    out = tmp_path / "asan"
    result = subprocess.run(
        [sys.executable, "-m", "hetgen", "soc", str(big_model_file), "-o", str(out), "--sanitize", "address,undefined"]
        + ["--native-only", "-O1"],  # sanitizers are the native build's
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    run = subprocess.run([str(out / "bin/hg_soc_main")], capture_output=True, text=True)
    assert run.returncode == 0 and "runtime error" not in run.stderr, run.stderr
    assert "y: 16384 bytes" in run.stdout


@pytest.mark.cc
def test_example_main_reads_inputs_and_writes_outputs(tmp_path, model_file):
    out = hetgen.compile(load_platform_text(host_platform("aot")), model_file, out=tmp_path / "c", native_only=True)
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    x.tofile(tmp_path / "in.bin")
    subprocess.run([str(out / "bin/hg_host_aot_main"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    y = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(1, 8, 16, 16)
    np.testing.assert_allclose(y, reference(model_file, {"x": x})[0], rtol=1e-4, atol=1e-5)


def run_cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "hetgen", *args], capture_output=True, text=True, cwd=cwd)


def test_unsupported_operator_is_one_message_and_writes_nothing(tmp_path):
    nodes = [
        helper.make_node("Det", ["x"], ["d"], name="det"),
        helper.make_node("Frobnicate", ["d"], ["y"], name="frob", domain="com.example"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    path = tmp_path / "bad.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, path)
    result = run_cli("host", str(path), "-o", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "Det" in result.stderr and "Frobnicate" in result.stderr  # both, in one message
    assert not (tmp_path / "out").exists()


def test_broken_model_file(tmp_path, cli):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07garbage")
    result = cli("host", str(path), "-o", str(tmp_path / "out"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert str(path) in result.stderr
    assert not (tmp_path / "out").exists()


def test_missing_platform_names_what_exists(tmp_path, model_file, cli):
    result = cli("no_such_platform", str(model_file), "-o", str(tmp_path / "out"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "no_such_platform" in result.stderr


@pytest.mark.cc
def test_verify_cli_reports_errors_per_output(tmp_path, model_file, cli):
    out = tmp_path / "v"
    assert cli("host", str(model_file), "-o", str(out)).returncode == 0
    result = cli("verify", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "y: max abs error" in result.stdout and "1 of 1 outputs match" in result.stdout


@pytest.mark.cc
def test_c_array_weights_build_and_match(tmp_path, model_file):
    out = hetgen.compile(
        load_platform_text(host_platform("aot")), model_file, out=tmp_path / "arr", weights="c_array", native_only=True
    )
    assert (out / "host_aot/weights.c").is_file() and not (out / "host_aot/weights.S").exists()
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = hetgen.load(out).run({"x": x})["y"]
    np.testing.assert_allclose(got, reference(model_file, {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.cc
def test_installed_command_works_from_any_directory(tmp_path):
    """The console script of the installed wheel (CI installs it) carries templates and platforms."""
    command = shutil.which("hetgen")
    if command is None:
        pytest.skip("hetgen is not installed as a command (pip install .)")
    model = tmp_path / "m.onnx"
    onnx.save(residual_model(), model)
    result = subprocess.run([command, "host", str(model), "-o", "out"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert subprocess.run([command, "verify", "out"], capture_output=True, text=True, cwd=tmp_path).returncode == 0
    targets = subprocess.run([command, "targets"], capture_output=True, text=True, cwd=tmp_path)
    assert "npu" in targets.stdout and "accelerator-with-coprocessor" in targets.stdout


def test_output_folder_that_is_not_ours_is_refused(tmp_path, model_file, cli):
    (tmp_path / "a_file").write_text("x")
    result = cli("host", str(model_file), "-o", str(tmp_path / "a_file"))
    assert result.returncode == 1 and "not a folder" in result.stderr and "Traceback" not in result.stderr
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    result = cli("host", str(model_file), "-o", str(foreign))
    assert result.returncode == 1 and "did not generate" in result.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


@pytest.mark.cc
def test_ninja_regenerates_when_the_model_changes(tmp_path, model_file):
    model = tmp_path / "model.onnx"
    model.write_bytes(model_file.read_bytes())
    platform = tmp_path / "host.yaml"
    platform.write_text(host_platform("vm"))
    out = hetgen.compile(platform, model, out=tmp_path / "regen", opt=("-O1",))
    edited = onnx.load(model)
    for node in edited.graph.node:
        if node.name == "leaky":
            node.attribute[0].f = 0.3
    onnx.save(edited, model)
    ninja = [sys.executable, "-c", "import ninja, sys; sys.exit(ninja._program('ninja', sys.argv[1:]))", "-C", str(out)]
    result = subprocess.run(ninja, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    holding = _kernel_file_of(out, "host_vm", "_conv_conv2(")  # the LeakyRelu fused into that Conv
    assert "REGENERATE build.ninja" in result.stdout and f"kernels/{holding}" in result.stdout, result.stdout
    x = np.random.default_rng(9).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(hetgen.load(out).run({"x": x})["y"], reference(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` (ninja's logs included) with its bytes and its mtime in ns."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


def edited_model(model_file: Path, tmp_path: Path, alpha: float) -> Path:
    edited = onnx.load(model_file)
    for node in edited.graph.node:
        if node.name == "leaky":
            node.attribute[0].f = alpha
    path = tmp_path / f"edited_{alpha}.onnx"
    onnx.save(edited, path)
    return path


@pytest.mark.cc
def test_failed_build_leaves_no_new_folder_and_keeps_its_log(tmp_path, model_file):
    platform = load_platform_text(host_platform("graph"))
    out = tmp_path / "new"
    with pytest.raises(hetgen.HetgenError) as raised:
        hetgen.compile(platform, model_file, out=out, extra_cflags=("-fno-such-flag-for-hetgen",))
    assert not out.exists()
    message = str(raised.value)
    assert "the build failed" in message and "log: " in message, message
    log = Path(message.split("log: ", 1)[1].split(";")[0].split()[0])
    assert log == tmp_path / "new.hetgen-failed/build.log" and "-fno-such-flag-for-hetgen" in log.read_text()
    assert (tmp_path / "new.hetgen-failed/project/build.ninja").is_file()  # the failed project, to inspect
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.hetgen-failed"]  # no staging debris
    # The next successful build clears the record of the failure.
    hetgen.compile(platform, model_file, out=out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]
    umask = os.umask(0)
    os.umask(umask)
    # Staged, yet with the permissions of an ordinary folder and files (not a temporary's 0700/0600).
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((out / "build.ninja").stat().st_mode) == 0o666 & ~umask


@pytest.mark.cc
def test_failed_build_or_generation_leaves_an_existing_folder_exactly_as_it_was(tmp_path, model_file):
    platform = load_platform_text(host_platform("graph"))
    out = hetgen.compile(platform, model_file, out=tmp_path / "out")
    before = snapshot(out)
    assert ".ninja_log" in before and "lib/libhg_host_graph.so" in before
    changed_model = edited_model(model_file, tmp_path, 0.25)  # new sources, so the failure is mid-update
    with pytest.raises(hetgen.HetgenError, match="the build failed"):
        hetgen.compile(platform, changed_model, out=out, extra_cflags=("-fno-such-flag-for-hetgen",))
    assert snapshot(out) == before
    with pytest.raises(hetgen.HetgenError, match="no such model file"):
        hetgen.compile(platform, tmp_path / "missing.onnx", out=out)
    assert snapshot(out) == before
    result = run_cli("host", str(changed_model), "-o", str(out), cwd=tmp_path)  # and through the CLI
    assert result.returncode == 0 and snapshot(out) != before, result.stderr


@pytest.mark.cc
def test_rebuild_through_staging_recompiles_only_the_changed_kernel(tmp_path, model_file):
    """The build runs in a copy of the project that is then swapped in: timestamps and ninja's logs
    survive both, so a rebuild after a small model change compiles one kernel, in place of all."""
    platform = tmp_path / "host.yaml"
    platform.write_text(host_platform("graph"))
    out = hetgen.compile(platform, model_file, out=tmp_path / "inc")
    objects = {p.name: p.stat().st_mtime_ns for p in (out / "obj").rglob("*.o")}
    hetgen.compile(platform, edited_model(model_file, tmp_path, 0.2), out=out)
    rebuilt = sorted(p.name for p in (out / "obj").rglob("*.o") if p.stat().st_mtime_ns != objects[p.name])
    # the kernel file holding the Conv with the Add and LeakyRelu (hetgen/codegen/kernel_files.py)
    assert rebuilt == [f"{_kernel_file_of(out, 'host_graph', '_conv_conv2(')}.o"], rebuilt
    ninja = [sys.executable, "-c", "import ninja, sys; sys.exit(ninja._program('ninja', sys.argv[1:]))", "-C", str(out)]
    dry = subprocess.run([*ninja, "-n"], capture_output=True, text=True)
    assert "no work to do" in dry.stdout, dry.stdout  # the swapped-in folder is up to date where it now lies
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = reference(edited_model(model_file, tmp_path, 0.2), {"x": x})[0]
    np.testing.assert_allclose(hetgen.load(out).run({"x": x})["y"], expected, rtol=1e-4, atol=1e-5)


def _kernel_file_of(out: Path, folder: str, text: str) -> str:
    """The one kernel file of `folder` whose C holds `text` (kernels are grouped into files)."""
    (found,) = [p.name for p in (out / folder / "kernels").glob("*.c") if text in p.read_text()]
    return found
