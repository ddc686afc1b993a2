"""The out-of-process transport: the root program drives its co-processor, a separate server program,
over a pipe pair and over TCP, and computes what onnxruntime computes; the frame format is the one
documented in hg_transport.h (checked byte-exactly from Python)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest

import hetgen
from hetgen.models import mlp
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.verify import verify
from transport_peer import COPY_IN, COPY_OUT, INVOKE, RESET, WAIT, Client, frame
from transport_support import (
    CFLAGS,
    REPO,
    RUN_ENV,
    SANITIZE,
    read_outputs,
    reference,
    shared_pair,
    write_inputs,
    write_key,
)

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

RUNTIME = REPO / "templates" / "runtime"


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    exe = tmp_path_factory.mktemp("unit") / "transport_unit"
    subprocess.run(
        ["gcc", *CFLAGS, *SANITIZE, "-I", str(RUNTIME), "-o", str(exe), str(REPO / "tests/c/transport_unit.c")]
        + [str(RUNTIME / name) for name in ("hg_transport.c", "hg_auth.c", "hg_server.c")],
        check=True,
    )
    return exe


def test_frames_crc_timeouts_and_endpoints_in_c(unit):
    result = subprocess.run([unit], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


@pytest.mark.parametrize("text", ["123456789", "", "hetgen transport", "\x01\xff" * 100])
def test_crc32_is_zlibs(unit, text):
    result = subprocess.run([unit, "crc", text], capture_output=True, text=True, check=True)
    assert int(result.stdout, 16) == zlib.crc32(text.encode()), text


@pytest.fixture(scope="module")
def resnet_pair(tmp_path_factory):
    return shared_pair(tmp_path_factory)


def run_root(pair, tmp_path, endpoint: str, seed: int = 0, **env):
    feeds = write_inputs(pair.project, tmp_path / "in.bin", seed)
    stats = tmp_path / "stats.jsonl"
    result = subprocess.run(
        [
            pair.root,
            "--key",
            pair.key,
            "--device",
            f"{pair.device}={endpoint}",
            tmp_path / "in.bin",
            tmp_path / "out.bin",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **RUN_ENV, "HG_TRANSPORT_STATS": str(stats), **env},
    )
    return result, feeds, stats


def assert_matches_reference(pair, tmp_path, feeds):
    expected = reference(pair.project, feeds)
    got = read_outputs(pair.project, tmp_path / "out.bin")
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_resnet_over_a_pipe_matches_onnxruntime(resnet_pair, tmp_path):
    result, feeds, stats = run_root(resnet_pair, tmp_path, f"exec:{resnet_pair.server} --key {resnet_pair.key}", seed=3)
    assert result.returncode == 0, result.stderr
    assert_matches_reference(resnet_pair, tmp_path, feeds)
    (line,) = stats.read_text().splitlines()
    counters = json.loads(line)
    assert counters["device"] == "vdevice0" and counters["ok"] and counters["runs"] == 1
    # Every request has its reply; the inputs went out, the results came back.
    assert counters["messages_sent"] == counters["messages_received"] > 4
    input_bytes = sum(v.nbytes for v in feeds.values())
    assert counters["bytes_sent"] > input_bytes and counters["bytes_received"] > 20 * counters["messages_received"]


def listening_server(pair, address: str, *options: str) -> subprocess.Popen:
    """The pair's server on TCP with its key; it announces its port on stdout."""
    return subprocess.Popen(
        [pair.server, "--key", pair.key, "--listen", address, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **RUN_ENV},
    )


def test_resnet_over_tcp_matches_onnxruntime(resnet_pair, tmp_path):
    server = listening_server(resnet_pair, "127.0.0.1:0", "--once")
    try:
        announced = server.stdout.readline()
        port = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", announced).group(1)
        # Through the environment this time; the option and the variable name the same endpoint.
        result, feeds, _ = run_root(
            resnet_pair, tmp_path, "tcp:127.0.0.1:1", HG_DEVICE_VDEVICE0=f"tcp:127.0.0.1:{port}", seed=4
        )
        assert result.returncode != 0 and "127.0.0.1:1" in result.stderr  # the option wins over the variable
        # The key through the environment too (HG_TRANSPORT_KEY), never on a command line a user must type.
        result = subprocess.run(
            [resnet_pair.root, tmp_path / "in.bin", tmp_path / "out.bin"],
            capture_output=True,
            text=True,
            timeout=60,
            env={
                **os.environ,
                **RUN_ENV,
                "HG_DEVICE_VDEVICE0": f"tcp:127.0.0.1:{port}",
                "HG_TRANSPORT_KEY": str(resnet_pair.key),
            },
        )
        assert result.returncode == 0, result.stderr
        assert_matches_reference(resnet_pair, tmp_path, feeds)
        assert server.wait(timeout=10) == 0
    finally:
        server.kill()


def test_no_endpoint_says_how_to_give_one(resnet_pair, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_DEVICE_")}
    result = subprocess.run(
        [resnet_pair.root, "--key", resnet_pair.key], capture_output=True, text=True, timeout=30, env={**env, **RUN_ENV}
    )
    assert result.returncode != 0
    assert "device vdevice0" in result.stderr and "--device vdevice0=" in result.stderr
    assert "HG_DEVICE_VDEVICE0" in result.stderr
    result = subprocess.run([resnet_pair.root, "--device", "npu9=exec:x"], capture_output=True, text=True)
    assert result.returncode != 0 and "NAME one of: vdevice0" in result.stderr


def test_the_server_serves_the_five_calls_to_any_client(resnet_pair):
    """A Python client drives the real server: the protocol is what hg_transport.h says."""
    server = subprocess.Popen(
        [resnet_pair.server, "--key", resnet_pair.key], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=RUN_ENV
    )
    try:
        client = Client(server.stdout, server.stdin, resnet_pair.key.read_bytes(), resnet_pair.plan_hash)
        memory, programs = client.hello()
        assert (memory, programs) == (resnet_pair.memory_size, resnet_pair.num_programs)
        assert client.call(RESET) == (0, b"")
        data = bytes(range(256)) * 4
        assert client.call(COPY_IN, (64).to_bytes(8, "little") + len(data).to_bytes(8, "little") + data)[0] == 0
        status, back = client.call(COPY_OUT, (64).to_bytes(8, "little") + len(data).to_bytes(8, "little"))
        assert status == 0 and back == data
        assert client.call(WAIT) == (0, b"")  # nothing queued: nothing runs
        # A sequence number is echoed, whatever it is.
        client.send(client.seal(frame(INVOKE, 0xFFFFFFFF, (0).to_bytes(4, "little"))))
        assert client.receive()[:2] == (0x80 | INVOKE, 0xFFFFFFFF)
        server.stdin.close()
        assert server.wait(timeout=10) == 0  # a clean close ends a pipe session with success
    finally:
        server.kill()


needs_board_tools = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("aarch64-linux-gnu-gcc", "riscv64-linux-gnu-gcc", "qemu-aarch64")),
    reason="the soc board build needs gcc-aarch64-linux-gnu gcc-riscv64-linux-gnu qemu-user (see the README)",
)


@pytest.mark.external
@needs_board_tools
def test_verify_emulate_runs_soc_as_two_emulated_processes(tmp_path):
    """CI's board check: a small MLP on soc.yaml, pinned so that the riscv64 co-processor runs a kernel
    itself and drives the npu for another, its server a separate program under qemu-riscv64."""
    model = mlp(features=16, hidden=(32,), classes=8)
    pins = {"gemm": "soc/vdevice0/npu0", "relu": "soc/vdevice0/host", "matmul": "soc/vdevice0/npu0"}
    project = hetgen.compile("platforms/soc.yaml", model, tmp_path / "soc", pins=pins, opt=("-O1",))
    manifest = json.loads((project / "hetgen.json").read_text())
    assert [d["name"] for d in manifest["remote_devices"]] == ["vdevice0"]
    host = next(t for t in manifest["targets"] if t["path"] == "soc/vdevice0/host")
    assert host["kernels"] >= 1
    # The build drew the transport's key: 32 bytes only the owner may read, named in hetgen.json.
    key = project / manifest["board"]["transport_key"]
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    for transport in ("pipe", "tcp"):
        result = subprocess.run(
            [sys.executable, "-m", "hetgen", "verify", str(project), "--emulate", "--transport", transport],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 of 1 outputs (board build under emulation) match onnxruntime" in result.stdout
    emulated = EmulatedModel(project)
    assert emulated.servers[0][1][0] == "qemu-riscv64" and emulated.command[0] == "qemu-aarch64"
    emulated.run({"input": np.ones((1, 16), np.float32)})
    (stats,) = emulated.transport_stats
    assert stats["ok"] and stats["messages_sent"] == stats["messages_received"] >= 5


@pytest.mark.external
@needs_board_tools
@pytest.mark.parametrize(
    ("example", "pins"),
    [
        ("resnet_tiny", {}),  # the placement puts its convolutions on the npu behind the co-processor
        # The transformer's placement keeps everything on the root; pinned, the co-processor runs a
        # LayerNormalization itself and drives the npu for a MatMul.
        (
            "transformer_tiny",
            {
                "n5_layernormalization_layernormalization": "soc/vdevice0/host",
                "n6_matmul_matmul": "soc/vdevice0/npu0",
            },
        ),
    ],
)
def test_shipped_examples_match_onnxruntime_across_the_transport(tmp_path, example, pins):
    project = hetgen.compile("platforms/soc.yaml", REPO / f"examples/{example}.onnx", tmp_path, pins=pins, opt=("-O1",))
    assert json.loads((project / "hetgen.json").read_text())["remote_devices"], "the co-processor must take part"
    errors = verify(project, seed=5, runs=1, emulate=True)
    assert errors and all(error.ok for error in errors), errors


def test_server_options_are_checked(resnet_pair, tmp_path):
    """Bad options, a bad or missing key, a port out of range, a non-loopback address without
    --allow-remote: each one message and exit 2, before anything listens."""
    key = ["--key", str(resnet_pair.key)]
    loose = write_key(tmp_path / "loose.key")
    loose.chmod(0o644)
    short = write_key(tmp_path / "short.key", b"0123456789")
    for arguments, message in (
        (["--bogus"], "usage:"),
        ([*key, "--timeout-ms", "soon"], "--timeout-ms soon: expected a whole number from 1 to 86400000"),
        ([*key, "--max-sessions", "0"], "--max-sessions 0: expected a whole number from 1 to 1024"),
        ([*key, "--listen", "localhost"], "expected ADDR:PORT"),
        ([*key, "--listen", "127.0.0.1:70000"], "--listen 127.0.0.1:70000: the port must be 0..65535"),
        ([*key, "--listen", "0.0.0.0:0"], "not a loopback address, so other machines could reach the device"),
        ([], "no transport key: pass --key FILE"),
        (["--key", str(tmp_path / "none.key")], "cannot open the transport key"),
        (["--key", str(loose)], "may be read or written by others (mode 644): run chmod 600"),
        (["--key", str(short)], "holds 10 bytes; a key has at least 16"),
    ):
        env = {k: v for k, v in os.environ.items() if k != "HG_TRANSPORT_KEY"}
        result = subprocess.run([resnet_pair.server, *arguments], capture_output=True, text=True, timeout=10, env=env)
        assert result.returncode == 2 and message in result.stderr, (arguments, result.stderr)
        assert result.stdout == "", "nothing listens"


def test_a_remote_listener_needs_allow_remote_and_warns(resnet_pair):
    server = listening_server(resnet_pair, "0.0.0.0:0", "--allow-remote")
    try:
        assert re.fullmatch(r"listening on 0\.0\.0\.0:\d+\n", server.stdout.readline())
    finally:
        server.kill()
        _, errors = server.communicate()
    assert "warning: listening on 0.0.0.0:0, which other machines can reach" in errors


def test_the_root_refuses_endpoints_it_cannot_use(resnet_pair, tmp_path):
    for endpoint, message in (
        ("tcp:127.0.0.1:70000", '"tcp:127.0.0.1:70000": the port must be 1..65535'),
        ("tcp:127.0.0.1:0", "the port must be 1..65535"),
        ("tcp:127.0.0.1", "is not tcp:HOST:PORT"),
    ):
        result, _, _ = run_root(resnet_pair, tmp_path, endpoint)
        assert result.returncode == 4 and message in result.stderr, (endpoint, result.stderr)
    result = subprocess.run([resnet_pair.root, "--key"], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and "--key needs FILE" in result.stderr


TWO_COPROCESSORS = """
name: two
target:
  kind: aarch64
  runtime: vm
  devices:
    left:
      kind: accelerator-with-coprocessor
      host: {kind: riscv64, runtime: graph}
      devices: {npu0: {kind: npu}}
    right:
      kind: accelerator-with-coprocessor
      host: {kind: aarch64, runtime: aot}
      devices: {npu0: {kind: npu}}
"""


@pytest.mark.external
@needs_board_tools
def test_two_coprocessors_each_a_server_of_its_own(tmp_path):
    """Every co-processor of the root is remote, whatever its ISA or runtime, each named by its device."""
    platform = tmp_path / "two.yaml"
    platform.write_text(TWO_COPROCESSORS)
    pins = {"gemm": "two/left/npu0", "relu": "two/right/host", "matmul": "two/right/npu0"}
    model = mlp(features=16, hidden=(32,), classes=8)
    project = hetgen.compile(platform, model, tmp_path / "two", pins=pins, opt=("-O1",))
    manifest = json.loads((project / "hetgen.json").read_text())
    assert [(d["name"], d["env"]) for d in manifest["remote_devices"]] == [
        ("left", "HG_DEVICE_LEFT"),
        ("right", "HG_DEVICE_RIGHT"),
    ]
    emulated = EmulatedModel(project, transport="tcp")
    assert [command[0] for _, command in emulated.servers] == ["qemu-riscv64", "qemu-aarch64"]
    errors = verify(project, seed=2, runs=1, emulate=True)
    assert errors and all(error.ok for error in errors), errors
    emulated.run({"input": np.ones((1, 16), np.float32)})
    assert [stats["device"] for stats in emulated.transport_stats] == ["left", "right"]
