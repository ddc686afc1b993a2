"""A Linux core beside a bare-metal co-processor (platforms/linux-mcu.yaml, hetgen/codegen/coproc.py):
the Cortex-M7's device server is a bare-metal ELF serving the transport on the board's UART.

Fast tier: the platform loads and prices its UART; the board plan lists the server as a bare-metal
ELF (hetgen.json), its static buffers sized from the device memory; refusals with file:line.
External tier: resnet_tiny with work pinned onto the M7 and its NPU, built by aarch64-linux-gnu-gcc
and arm-none-eabi-gcc, matches onnxruntime with the root under qemu-aarch64 and the server under
qemu-system-arm; a peer with another key is refused by the bare-metal server, which then serves the
next root (a UART has no end-of-stream: a new hello opens the next session)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hetgen
from hetgen.codegen.coproc import MPS2_UART0
from hetgen.errors import HetgenError
from hetgen.platform.loader import load_platform, load_platform_text
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transport_peer import AUTH, ERROR, Client, frame, proof, read_frame  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PLATFORM = REPO / "platforms/linux-mcu.yaml"
# One conv onto the M7's NPU, the classifier onto the M7 itself: both ends of the UART carry work.
PINS = {"n23_conv_conv_7": "linux_mcu/mcu0/npu0", "n31_gemm_gemm": "linux_mcu/mcu0/host"}
FAST = {"opt": ("-O1",), "native_tuning": False}
TOOLS = ("aarch64-linux-gnu-gcc", "arm-none-eabi-gcc", "qemu-aarch64", "qemu-system-arm")
SERVER = "hg_linux_mcu_mcu0_host_server.elf"


def test_the_platform_prices_its_uart():
    platform = load_platform(PLATFORM)
    host = platform.target("linux_mcu/mcu0/host")
    assert host.toolchain.triple == "arm-none-eabi" and "mps2-an500" in host.toolchain.emulator
    link = platform.target("linux_mcu/mcu0").link
    # 25 MHz / 16 baud, 10 bits a byte: 156,250 B/s; a copy's 124 bytes of framing at that rate.
    assert link.bandwidth_gbps == pytest.approx(25e6 / 16 / 10 / 1e9)
    assert link.latency_us == pytest.approx(124 / (25e6 / 16 / 10) * 1e6, abs=1)


def test_unpinned_nothing_crosses_the_uart(tmp_path):
    # The cost model prices 12 KB of input at 79 ms over this link: resnet_tiny stays on the Cortex-A53.
    out = hetgen.compile(PLATFORM, REPO / "examples/resnet_tiny.onnx", out=tmp_path / "out", build=False, **FAST)
    manifest = json.loads((out / "hetgen.json").read_text())
    assert manifest["remote_devices"] == [] and [t["path"] for t in manifest["targets"]] == ["linux_mcu"]


def test_board_plan_lists_the_bare_metal_server(tmp_path):
    out = hetgen.compile(
        PLATFORM, REPO / "examples/resnet_tiny.onnx", out=tmp_path / "out", build=False, pins=PINS, **FAST
    )
    manifest = json.loads((out / "hetgen.json").read_text())
    programs = {p["name"]: p for p in manifest["board"]["programs"]}
    assert set(programs) == {"hg_linux_mcu_main", SERVER} and not manifest["board"]["notes"]
    server = programs[SERVER]
    assert server["kind"] == "program" and server["target"] == "linux_mcu/mcu0/host"
    assert server["semihosting"] and server["emulator"] == ["qemu-system-arm", "-M", "mps2-an500"]
    assert server["memory"] == {"flash_bytes": 4 << 20, "ram_bytes": 4 << 20, "stack_bytes": 16 << 10}
    assert manifest["board"]["transport_key"] == "board/transport.key"
    [remote] = manifest["remote_devices"]
    assert remote["name"] == "mcu0" and remote["server"] == SERVER
    # The server: its UART, and its request buffer sized at generation from the device memory.
    main = (out / "linux_mcu/mcu0/host/server_main.c").read_text()
    arena = next(t["arena_size"] for t in manifest["targets"] if t["path"] == "linux_mcu/mcu0/host")
    assert f"0x{MPS2_UART0:08x}" in main and f"({arena}u + 16u)" in main
    assert "hg_serve_forever" in main and "malloc" not in main
    build = (out / "build.ninja").read_text()
    assert f"build board/bin/{SERVER} | board/bin/{SERVER.removesuffix('.elf')}.map: board_link" in build
    assert "linux_mcu/mcu0/host/link.ld -Wl,-Map=board/bin/hg_linux_mcu_mcu0_host_server.map" in build


def test_a_bare_metal_coprocessor_takes_no_threads():
    text = PLATFORM.read_text().replace("        runtime: graph\n", "        runtime: graph\n        threads: 2\n")
    with pytest.raises(HetgenError) as refused:
        load_platform_text(text, "linux-mcu.yaml")
    message = str(refused.value)
    assert "linux-mcu.yaml:" in message and "threads" in message and "bare metal" in message


def test_a_board_without_a_known_uart_is_refused(tmp_path):
    text = PLATFORM.read_text().replace("kind: cortex-m7", "kind: cortex-m55")
    with pytest.raises(HetgenError) as refused:
        hetgen.compile(
            load_platform_text(text, "m55.yaml"),
            REPO / "examples/resnet_tiny.onnx",
            out=tmp_path / "out",
            build=False,
            pins=PINS,
            **FAST,
        )
    message = str(refused.value)
    assert "m55.yaml:" in message and "mps3-an547" in message and "UART" in message
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    out = tmp_path_factory.mktemp("coproc") / "linux_mcu"
    return hetgen.compile(PLATFORM, REPO / "examples/resnet_tiny.onnx", out=out, pins=PINS, werror=True, **FAST)


@pytest.mark.external
def test_verify_emulate_runs_both_cores_and_matches_onnxruntime(built):
    errors = verify(built, seed=3, runs=1, emulate=True)
    assert errors and all(error.ok for error in errors), errors
    model = EmulatedModel(built)
    started = time.monotonic()
    model.run({"input": np.random.default_rng(4).standard_normal((1, 3, 32, 32), dtype=np.float32)})
    wall = time.monotonic() - started
    [stats] = model.transport_stats
    # The pinned conv's input (16x8x8 floats, 4 KB) and the classifier's crossed the UART, and their results back.
    assert stats["device"] == "mcu0" and stats["ok"] and stats["bytes_sent"] > 4096 and stats["bytes_received"] > 40
    print(f"\ncoproc: one run, {wall:.2f} s wall with both emulators started: {stats}")


def _uart_server(built: Path):
    """The bare-metal server alone under qemu-system-arm, on a loopback socket: (process, port)."""
    model = EmulatedModel(built)
    server = model.uart_servers["mcu0"]
    folder = built / "coproc-test"
    folder.mkdir(exist_ok=True)
    return model._start_uart_server("mcu0", server, folder)


@pytest.mark.external
def test_the_bare_metal_server_refuses_another_key_then_serves_the_next_root(built):
    from hetgen.runtime.emulate import _stop

    process, port = _uart_server(built)
    plan_hash = bytes.fromhex(json.loads((built / "hetgen.json").read_text())["remote_devices"][0]["plan_hash"])
    try:
        # qemu's chardev serves one connection at a time (a UART has one peer): this one must be
        # closed, its file objects too, before the root's is taken.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            reader, writer = sock.makefile("rb"), sock.makefile("wb")
            with reader, writer:
                peer = Client(reader, writer, os.urandom(32), plan_hash, name=b"mcu0")
                client_nonce, server_nonce, _ = peer.challenge()
                peer.send(frame(AUTH, 2, proof(peer.key, "client", client_nonce, server_nonce, plan_hash, b"mcu0")))
                _, kind, _, body = read_frame(reader)
                assert kind == ERROR and b"authentication failed" in body
        root = [
            "qemu-aarch64",
            "-L",
            "/usr/aarch64-linux-gnu",
            str(built / "board/bin/hg_linux_mcu_main"),
            "--key",
            str(built / "board/transport.key"),
            "--device",
            f"mcu0=tcp:127.0.0.1:{port}",
        ]
        ran = subprocess.run(root, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
    finally:
        _stop(process)
    log = (built / "coproc-test").glob("uart-server-*.log")
    assert any("authentication failed" in path.read_text() for path in log)
