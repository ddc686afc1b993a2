"""The board build: each controller compiled by its own toolchain in the same build.ninja as the
native build, board programs run under qemu-user and compared with onnxruntime, a missing toolchain
refused before anything is written, launchers (ccache) that survive regeneration."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from ninja import BIN_DIR

import hetgen
from hetgen.build import BuildOptions
from hetgen.models import mlp
from hetgen.pipeline import CompileOptions, options_argv
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.verify import verify

REPO = Path(__file__).resolve().parent.parent
NINJA = str(Path(BIN_DIR) / "ninja")
FAST = {"opt": ("-O1",), "native_tuning": False}
CROSS = ("aarch64-linux-gnu-gcc", "riscv64-linux-gnu-gcc", "qemu-aarch64", "qemu-riscv64")
# ELF e_machine values
EM_X86_64, EM_AARCH64, EM_RISCV = 62, 183, 243

needs_cross = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in CROSS),
    reason="needs gcc-aarch64-linux-gnu gcc-riscv64-linux-gnu qemu-user (the README's set-up installs them)",
)


def e_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return struct.unpack("<H", header[18:20])[0]  # EI_DATA is little-endian on every target here


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hetgen", *args], capture_output=True, text=True, cwd=REPO, env=env)


@pytest.fixture(scope="module")
def soc(tmp_path_factory) -> Path:
    """The shipped soc example, both builds, with -Werror: the cross compilers must be warning-free."""
    if any(shutil.which(tool) is None for tool in CROSS[:2]):
        pytest.skip("needs the aarch64 and riscv64 cross compilers")
    out = tmp_path_factory.mktemp("board") / "soc"
    return hetgen.compile("soc", REPO / "examples/resnet_tiny.onnx", out=out, werror=True, opt=("-O1",))


@pytest.mark.external
@needs_cross
def test_soc_targets_get_their_own_compilers_and_isa(soc):
    commands = json.loads((soc / "compile_commands.json").read_text())
    board = [c for c in commands if c["output"].startswith("board/")]
    native = [c for c in commands if not c["output"].startswith("board/")]
    assert board and native
    compiler_of = {}
    for command in board:
        assert "-march=native" not in command["arguments"], command["output"]
        assert "-Werror" in command["arguments"]
        target = (
            "riscv64"
            if command["file"].startswith("soc/vdevice0/") or "/soc/vdevice0/" in command["output"]
            else "aarch64"
        )
        compiler_of.setdefault(target, set()).add(command["arguments"][0])
    assert compiler_of == {"aarch64": {"aarch64-linux-gnu-gcc"}, "riscv64": {"riscv64-linux-gnu-gcc"}}
    assert all("-march=rv64gc" in c["arguments"] for c in board if c["arguments"][0].startswith("riscv64"))
    assert all(c["arguments"][0] == "cc" and "-march=native" in c["arguments"] for c in native)
    # The objects really are for those ISAs, and the native ones for this machine.
    assert {e_machine(p) for p in (soc / "board/obj/soc").rglob("*.o") if "vdevice0" not in str(p)} == {EM_AARCH64}
    assert {e_machine(p) for p in (soc / "board/obj/soc/vdevice0").rglob("*.o")} == {EM_RISCV}
    if os.uname().machine == "x86_64":
        assert {e_machine(p) for p in (soc / "obj").rglob("*.o")} == {EM_X86_64}
    assert (soc / "board/lib/libhg_soc.a").is_file() and (soc / "board/lib/libhg_soc_vdevice0_host.a").is_file()


@pytest.mark.external
@needs_cross
def test_soc_root_program_reaches_its_coprocessor_over_the_transport(soc):
    """The root (aarch64) cannot link its riscv64 co-processor: it gets a remote device, and the
    co-processor a device-server program of its own (docs/transport.md)."""
    board = json.loads((soc / "hetgen.json").read_text())["board"]
    assert board["notes"] == []
    programs = {p["name"]: p for p in board["programs"]}
    assert set(programs) == {"hg_soc_main", "hg_soc_vdevice0_host_server"}
    assert e_machine(soc / programs["hg_soc_main"]["path"]) == EM_AARCH64
    assert e_machine(soc / programs["hg_soc_vdevice0_host_server"]["path"]) == EM_RISCV
    assert programs["hg_soc_vdevice0_host_server"]["emulator"][0] == "qemu-riscv64"
    # The root links its remote devices, not the co-processor's library.
    build_ninja = (soc / "build.ninja").read_text()
    root_link = next(line for line in build_ninja.splitlines() if line.startswith("build board/bin/hg_soc_main:"))
    assert "libhg_soc_vdevice0_host.a" not in root_link and "board/lib/libhg_soc.a" in root_link
    assert "board/obj/soc/remote_devices.c.o" in build_ninja


@pytest.mark.external
@needs_cross
def test_named_targets_native_and_board(soc):
    subprocess.run([NINJA, "-C", str(soc), "-t", "clean"], check=True, capture_output=True)
    subprocess.run([NINJA, "-C", str(soc), "native"], check=True, capture_output=True)
    assert (soc / "lib/libhg_soc.so").is_file() and not (soc / "board/lib/libhg_soc.a").exists()
    subprocess.run([NINJA, "-C", str(soc)], check=True, capture_output=True)  # the default: both
    assert (soc / "board/lib/libhg_soc.a").is_file()
    up_to_date = subprocess.run([NINJA, "-C", str(soc), "-n", "native", "board"], capture_output=True, text=True)
    assert "no work to do" in up_to_date.stdout


MODELS = {
    "resnet_tiny": lambda tmp: REPO / "examples/resnet_tiny.onnx",
    "transformer_tiny": lambda tmp: REPO / "examples/transformer_tiny.onnx",
    "mlp": lambda tmp: mlp(seed=3),
}


@pytest.mark.external
@needs_cross
@pytest.mark.parametrize("board", ["aarch64", "riscv64"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_board_program_under_qemu_matches_onnxruntime(tmp_path, board, model):
    out = hetgen.compile(
        REPO / f"platforms/board-{board}.yaml", MODELS[model](tmp_path), out=tmp_path / "out", werror=True, **FAST
    )
    manifest = json.loads((out / "hetgen.json").read_text())
    (program,) = manifest["board"]["programs"]
    assert e_machine(out / program["path"]) == {"aarch64": EM_AARCH64, "riscv64": EM_RISCV}[board]
    errors = verify(out, seed=5, emulate=True)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.external
@needs_cross
def test_board_program_refuses_bad_input_files(tmp_path):
    out = hetgen.compile(REPO / "platforms/board-riscv64.yaml", mlp(seed=1), out=tmp_path / "out", **FAST)
    program = out / "board/bin/hg_board_riscv64_main"
    (tmp_path / "short.bin").write_bytes(b"\0" * 10)  # the mlp takes 32 float32 values
    run = subprocess.run(
        ["qemu-riscv64", str(program), str(tmp_path / "short.bin"), str(tmp_path / "o.bin")],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "ends inside input 0" in run.stderr
    (tmp_path / "long.bin").write_bytes(b"\0" * (32 * 4 + 1))
    run = subprocess.run(
        ["qemu-riscv64", str(program), str(tmp_path / "long.bin"), str(tmp_path / "o.bin")],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "longer than the inputs" in run.stderr
    run = subprocess.run(
        ["qemu-riscv64", str(program), str(tmp_path / "none.bin"), str(tmp_path / "o.bin")],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "cannot open" in run.stderr and not (tmp_path / "o.bin").exists()
    # Without the emulator, verify --emulate says which one and where it comes from.
    (tmp_path / "empty").mkdir()
    result = cli("verify", str(out), "--emulate", env={**os.environ, "PATH": str(tmp_path / "empty")})
    assert result.returncode == 1
    assert "the emulator qemu-riscv64 of target board_riscv64 is not installed" in result.stderr
    assert "apt-get install -y qemu-user" in result.stderr


MISSING = """
name: far
target:
  kind: aarch64
  runtime: aot
  toolchain: {cc: arm-none-eabi-gcc-missing, ar: arm-none-eabi-ar}
"""


@pytest.mark.cc
def test_missing_compiler_is_refused_before_anything_is_written(tmp_path):
    platform = tmp_path / "far.yaml"
    platform.write_text(MISSING.replace("arm-none-eabi-gcc-missing", "arm-none-eabi-gcc"))
    hidden = tmp_path / "bin"  # a PATH without any arm-none-eabi tools, whatever this machine has
    hidden.mkdir()
    for tool in ("cc", "ar", "gcc", "as", "ld"):
        if shutil.which(tool):
            (hidden / tool).symlink_to(shutil.which(tool))
    env = {**os.environ, "PATH": str(hidden)}
    result = cli(str(platform), "examples/resnet_tiny.onnx", "-o", str(tmp_path / "out"), env=env)
    assert result.returncode == 1, result.stderr
    assert "compiler arm-none-eabi-gcc of far is not installed (Debian package gcc-arm-none-eabi)" in result.stderr
    assert "archiver arm-none-eabi-ar of far is not installed (Debian package binutils-arm-none-eabi)" in result.stderr
    assert "apt-get install -y binutils-arm-none-eabi gcc-arm-none-eabi" in result.stderr
    assert "--native-only" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
    # --native-only needs no cross toolchain and still builds the simulation.
    result = cli(str(platform), "examples/resnet_tiny.onnx", "-o", str(tmp_path / "out"), "--native-only", "-O1")
    assert result.returncode == 0, result.stderr
    assert "board build: none (--native-only)" in result.stdout
    assert (tmp_path / "out/lib/libhg_far.so").is_file() and not (tmp_path / "out/board").exists()
    assert "build board:" not in (tmp_path / "out/build.ninja").read_text()
    assert json.loads((tmp_path / "out/hetgen.json").read_text())["board"] is None
    emulate = cli("verify", str(tmp_path / "out"), "--emulate")
    assert emulate.returncode == 1 and "built with --native-only" in emulate.stderr


def test_toolchain_overrides_reach_the_board_commands(tmp_path):
    platform = load_platform_text("""
name: tuned
target:
  kind: aarch64
  runtime: vm
  toolchain: {cflags: [-mcpu=cortex-a53], ldflags: ["-Wl,--gc-sections"], sysroot: /opt/sysroot-a53, launcher: [ccache]}
""")
    out = hetgen.compile(platform, mlp(seed=2), out=tmp_path / "out", build=False, native_only=False, **FAST)
    commands = json.loads((out / "compile_commands.json").read_text())
    board = next(c["arguments"] for c in commands if c["output"] == "board/obj/tuned/model.c.o")
    assert board[:2] == ["ccache", "aarch64-linux-gnu-gcc"]
    assert board.index("--sysroot=/opt/sysroot-a53") < board.index("-mcpu=cortex-a53")  # the platform's flags last
    native = next(c["arguments"] for c in commands if c["output"] == "obj/tuned/model.c.o")
    assert native[:2] == ["ccache", "cc"] and "-mcpu=cortex-a53" not in native
    build_ninja = (out / "build.ninja").read_text()
    assert "board-tuned_ldflags = --sysroot=/opt/sysroot-a53 -Wl,--gc-sections" in build_ninja


def test_regeneration_keeps_every_option(monkeypatch):
    """What build.ninja re-runs parses back to the options the project was generated with, and not
    to whatever the environment of the ninja that runs it says."""
    from hetgen.cli import _compile_options, parser

    monkeypatch.setenv("HETGEN_LAUNCHER", "sccache")
    plain = parser().parse_args(["generate", "p.yaml", "m.onnx", *options_argv(CompileOptions())])
    assert _compile_options(plain, build=False).build_options == BuildOptions()

    options = CompileOptions(
        placement="greedy",
        pins={"conv=1": "soc/vdevice0/npu0"},
        input_shapes={"input": (1, 3, 8, 8)},
        weights="c_array",
        native_only=True,
        build_options=BuildOptions(
            opt=("-O2", "-g"),
            native_tuning=False,
            sanitize=("address", "undefined"),
            werror=True,
            launcher=("distcc", "-j", "8 jobs"),
            extra_cflags=("-DNAME=a b",),
        ),
    )
    args = parser().parse_args(["generate", "p.yaml", "m.onnx", *options_argv(options)])
    assert _compile_options(args, build=False).build_options == options.build_options
    parsed = _compile_options(args, build=False)
    for field in ("placement", "pins", "input_shapes", "weights", "native_only"):
        assert getattr(parsed, field) == getattr(options, field), field


@pytest.mark.external
@needs_cross
@pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (the README's set-up installs it)")
def test_ccache_launcher_serves_a_clean_rebuild_and_survives_regeneration(tmp_path, monkeypatch):
    platform = tmp_path / "board.yaml"
    platform.write_text((REPO / "platforms/board-riscv64.yaml").read_text())
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp(seed=4).SerializeToString())
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    out = tmp_path / "out"
    result = cli(str(platform), str(model), "-o", str(out), "-O1", "--werror", "--launcher=ccache")
    assert result.returncode == 0, result.stderr
    subprocess.run(["ccache", "--zero-stats"], check=True, capture_output=True)
    subprocess.run([NINJA, "-C", str(out), "-t", "clean"], check=True, capture_output=True)
    subprocess.run([NINJA, "-C", str(out)], check=True, capture_output=True)
    stats = dict(
        line.split("\t", 1)
        for line in subprocess.run(
            ["ccache", "--print-stats"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
    )
    hits = int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0))
    compiled_c = sum(1 for c in json.loads((out / "compile_commands.json").read_text()) if c["file"].endswith(".c"))
    assert hits >= compiled_c, stats  # every C compile of both builds came from the cache
    # A changed platform file makes ninja regenerate build.ninja with the same options.
    platform.write_text(platform.read_text().replace("runtime: graph", "runtime: vm"))
    subprocess.run([NINJA, "-C", str(out)], check=True, capture_output=True)
    assert json.loads((out / "hetgen.json").read_text())["targets"][0]["runtime"] == "vm"
    build_ninja = (out / "build.ninja").read_text()
    assert "board-board_riscv64_launcher = ccache" in build_ninja
    assert "-O1" in build_ninja and "-Werror" in build_ninja and "-O3" not in build_ninja
    errors = verify(out, seed=1, emulate=True)
    assert all(e.ok for e in errors), errors


def test_readme_set_up_installs_what_the_boards_need():
    """The README's first command sets up the soc example's board build; its second is .ci/run."""
    import re

    first, second = re.findall(r"```sh\n(.+?)\n```", (REPO / "README.md").read_text())[:2]
    for command in (first, second):
        assert "apt-get install -y" in command
        for package in ("gcc-aarch64-linux-gnu", "gcc-riscv64-linux-gnu", "qemu-user", "ccache"):
            assert package in command.split("apt-get install -y", 1)[1].split(")")[0], (package, command)
    assert (REPO / ".ci/run").read_text().rstrip().splitlines()[-1] == second
