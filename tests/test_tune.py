"""`hetgen tune` and the tuning data it writes: `options: {tuning: {mc, kc, nc}}` (the GEMM's cache
blocks) and the tuned CPU's `figures:` (the cost model's). Each setting is shown to take effect:
the generated runtime and kernels change with it and still match onnxruntime; the figures change
what `explain` estimates."""

from __future__ import annotations

import platform as host
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.cli import main
from hetgen.errors import HetgenError
from hetgen.ops._gemm_plan import DEFAULT_BLOCKS, GemmBlocks, pack_bytes
from hetgen.partition.search import place
from hetgen.pipeline import import_graph
from hetgen.platform.loader import load_platform
from hetgen.platform.tuning import gemm_blocks
from hetgen.runtime.verify import verify
from hetgen.tune import search, tune

REPO = Path(__file__).resolve().parent.parent
HOST = "name: host\ntarget: {kind: native, runtime: aot}\n"


def conv_matmul_model() -> onnx.ModelProto:
    """A strided 3x3 convolution (implicit GEMM: k = 288, n = 576 pixels) and a matrix product with
    constant weights: both workspaces depend on kc and nc."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "m"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 32, 3, 3)).astype(np.float32) * 0.1, "w"),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([64, 576], np.int64), "shape"),
        numpy_helper.from_array(rng.standard_normal((576, 300)).astype(np.float32) * 0.05, "m"),
    ]
    graph = helper.make_graph(
        nodes,
        "tuned",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 48, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 300])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def static_asserts(out: Path) -> list[str]:
    return sorted(
        line
        for path in (out / "host" / "kernels").glob("*.c")
        for line in path.read_text().splitlines()
        if "HG_SGEMM_PACK_BYTES" in line
    )


@pytest.mark.cc
def test_tuning_blocks_change_the_generated_runtime_and_kernels_which_still_match(tmp_path):
    # memory: fast, so no layer takes blocks smaller than the platform's (lean would here: prepack.py)
    tuned_file, default_file = tmp_path / "tuned.yaml", tmp_path / "default.yaml"
    tuned_file.write_text(HOST + "options:\n  memory: fast\n  tuning: {mc: 64, kc: 128, nc: 256}\n")
    default_file.write_text(HOST + "options:\n  memory: fast\n")
    assert gemm_blocks(load_platform(tuned_file)) == GemmBlocks(64, 128, 256)
    model = conv_matmul_model()
    default = hetgen.compile(default_file, model, out=tmp_path / "default", native_only=True, werror=True)
    tuned = hetgen.compile(tuned_file, model, out=tmp_path / "tuned", native_only=True, werror=True)
    config = (tuned / "runtime" / "hg_gemm_config.h").read_text()
    assert "#define HG_SGEMM_MC 64" in config and "#define HG_SGEMM_KC 128" in config
    assert "#define HG_SGEMM_NC 256" in config
    assert f"#define HG_SGEMM_KC {DEFAULT_BLOCKS.kc}" in (default / "runtime" / "hg_gemm_config.h").read_text()
    # each kernel's workspace follows the blocks (the implicit conv's B block: (min(n, nc) + 32) x min(k, kc))
    tuned_conv = pack_bytes(64, 576, 288, GemmBlocks(64, 128, 256), a_packed=True)
    default_conv = pack_bytes(64, 576, 288, a_packed=True)
    assert tuned_conv < default_conv
    assert any(line.startswith(f"_Static_assert({tuned_conv}u") for line in static_asserts(tuned))
    assert any(line.startswith(f"_Static_assert({default_conv}u") for line in static_asserts(default))
    for out in (default, tuned):
        errors = verify(out, seed=2)
        assert errors and all(e.ok for e in errors), errors


@pytest.mark.parametrize(
    ("options", "where", "message"),
    [
        ("tuning: {mc: 60, kc: 256}", "60", "'mc' must be a multiple of 8 from 8 to 1024, not 60"),
        ("tuning: {mc: 64, kc: 0}", "0}", "'kc' of options.tuning must be at least 1"),
        ("tuning: {nc: 100000}", "100000", "'nc' must be a multiple of 32 from 32 to 8192, not 100000"),
        ("tuning: {mr: 8}", "mr", "unknown key 'mr' in 'tuning' of options; accepted: kc, mc, nc"),
        ("tuning: [128, 256, 1024]", "[", "'tuning' of options must be a mapping"),
        ("memory: tiny", "tiny", "'memory' of options cannot be 'tiny'; accepted: lean, fast"),
    ],
)
def test_bad_tuning_data_is_refused_with_its_line(tmp_path, capfd, options, where, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions:\n  {options}\n")
    assert main(["check", str(bad)]) == 1
    err = capfd.readouterr().err
    column = 2 + options.index(where) + 1
    assert f"bad.yaml:4:{column}: {message}" in err, err
    assert "Traceback" not in err and err.count("bad.yaml:") == 1


def test_search_keeps_the_fastest_candidate_of_each_block_size():
    """One block size at a time, each with the best of the previous ones."""
    costs = {"kc": {128: 3.0, 256: 2.0, 512: 2.5}, "mc": {64: 1.0, 128: 2.0}}
    plan = search.Plan(candidates=(("kc", (128, 256, 512)), ("mc", (64, 128))), shapes=(), repeats=1)
    best, trials = search.search(plan, lambda b: costs["kc"][b.kc] + costs["mc"].get(b.mc, 0.0))
    assert best == GemmBlocks(mc=64, kc=256, nc=DEFAULT_BLOCKS.nc)
    assert len(trials) == 4  # (128, 256 default), kc 128, 512, mc 64: the default is not timed twice


@pytest.mark.cc
def test_a_quick_tune_on_this_machine_writes_blocks_and_figures_that_explain_uses(tmp_path):
    out = tmp_path / "host-tuned.yaml"
    result = tune("host", out=out, quick=True, search_path=(str(REPO / "platforms"),))
    out.write_text(result.text)
    tuned = load_platform(out)
    assert gemm_blocks(tuned) == result.blocks and result.blocks.kc in (128, 256)
    figures = tuned.root.figures
    assert figures.peak_gflops == result.calibration.figures["peak_gflops"] > 0
    assert figures.bandwidth_gbps == result.calibration.figures["bandwidth_gbps"] > 0
    assert all(rate > 0.1 for _, rate in result.calibration.rates)
    # the cost model prices the host with the measured figures
    graph = import_graph(REPO / "examples/resnet_tiny.onnx", {})
    before, after = place(graph, load_platform("host")), place(graph, tuned)
    assert after.total_us != pytest.approx(before.total_us, rel=1e-3)


def test_a_cross_target_is_refused_not_timed_under_qemu(capfd):
    board = "board-riscv64.yaml" if host.machine() == "aarch64" else "board-aarch64.yaml"
    with pytest.raises(HetgenError, match="qemu-user would measure the emulator"):
        tune(REPO / "platforms" / board, quick=True)
    assert main(["tune", str(REPO / "platforms" / board), "--quick"]) == 1
    err = capfd.readouterr().err
    assert err.startswith("hetgen: error: ") and "Run `hetgen tune` on the board itself" in err
    assert "Traceback" not in err


def test_tuning_through_an_emulator_is_refused(capfd):
    """`hetgen tune --emulate`: a clear refusal naming the emulators, exit 1, nothing timed."""
    assert main(["tune", str(REPO / "platforms/soc.yaml"), "--emulate"]) == 1
    err = capfd.readouterr().err
    assert err.startswith("hetgen: error: hetgen tune --emulate: ") and "Traceback" not in err
    assert "soc/vdevice0/host under qemu-riscv64" in err and "emulated time is not the board's" in err
    assert "--on ADDR:PORT --built DIR" in err


def test_tune_on_needs_its_project_and_an_address(tmp_path, capfd):
    soc = str(REPO / "platforms/soc.yaml")
    assert main(["tune", soc, "--on", "127.0.0.1:9"]) == 1
    assert "needs --built DIR" in capfd.readouterr().err
    assert main(["tune", soc, "--on", "nowhere", "--built", str(tmp_path)]) == 1
    assert "--on nowhere: expected HOST:PORT" in capfd.readouterr().err
