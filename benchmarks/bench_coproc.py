"""A Linux core beside a bare-metal co-processor (platforms/linux-mcu.yaml): resnet_tiny with a
convolution pinned onto the Cortex-M7's NPU and the classifier onto the M7, the root under
qemu-aarch64, the M7's device server ELF under qemu-system-arm, its UART on a loopback socket.

    python benchmarks/bench_coproc.py [--repeats 3] [--out DIR]

Prints, with the server started once and kept warm: the wall time of the root program run with 1
and with 11 inferences in one session (medians of --repeats), what crossed the UART (the root's
HG_TRANSPORT_STATS: bytes and messages each way, headers and tags included) and so the bytes and
wall time of each inference beyond the first; then, with a Python peer (tests/transport_peer.py),
the handshake and single requests' round trips (copy_in of 0, 1 and 4 KiB, copy_out of 4 KiB). The
figures are the emulator's (qemu moves UART bytes one main-loop turn at a time), not the board's.
Needs aarch64-linux-gnu-gcc, arm-none-eabi-gcc, qemu-user and qemu-system-arm.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import hetgen
from hetgen.runtime.emulate import EmulatedModel, _stop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from transport_peer import COPY_IN, COPY_OUT, Client  # noqa: E402

PINS = {"n23_conv_conv_7": "linux_mcu/mcu0/npu0", "n31_gemm_gemm": "linux_mcu/mcu0/host"}


def root_runs(built: Path, port: int, folder: Path, runs: int) -> tuple[float, dict]:
    stats = folder / f"stats-{time.monotonic_ns()}.jsonl"
    command = [
        "qemu-aarch64",
        "-L",
        "/usr/aarch64-linux-gnu",
        str(built / "board/bin/hg_linux_mcu_main"),
        "--key",
        str(built / "board/transport.key"),
        "--device",
        f"mcu0=tcp:127.0.0.1:{port}",
        str(folder / "in.bin"),
        str(folder / "out.bin"),
        str(runs),
    ]
    started = time.monotonic()
    ran = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "HG_TRANSPORT_STATS": str(stats)}
    )
    wall = time.monotonic() - started
    if ran.returncode != 0:
        raise SystemExit(f"the root failed: {ran.stderr}")
    return wall, json.loads(stats.read_text())


def requests(built: Path, port: int, repeats: int) -> None:
    plan_hash = bytes.fromhex(json.loads((built / "hetgen.json").read_text())["remote_devices"][0]["plan_hash"])
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        reader, writer = sock.makefile("rb"), sock.makefile("wb")
        with reader, writer:
            peer = Client(reader, writer, (built / "board/transport.key").read_bytes(), plan_hash, name=b"mcu0")
            started = time.monotonic()
            peer.hello()
            print(f"handshake (hello and auth): {(time.monotonic() - started) * 1000:.0f} ms")
            cases = [
                (f"copy_in {size} B", COPY_IN, struct.pack("<QQ", 0, size) + bytes(size)) for size in (0, 1024, 4096)
            ]
            cases.append(("copy_out 4096 B", COPY_OUT, struct.pack("<QQ", 0, 4096)))
            for label, kind, payload in cases:
                times = []
                for _ in range(repeats):
                    started = time.monotonic()
                    status, _ = peer.call(kind, payload)
                    times.append(time.monotonic() - started)
                    assert status == 0, status
                print(f"{label}: {statistics.median(times) * 1000:.1f} ms a round trip (median of {repeats})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="build here (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-coproc-") as scratch:
        built = hetgen.compile(
            ROOT / "platforms/linux-mcu.yaml",
            ROOT / "examples/resnet_tiny.onnx",
            out=args.out or Path(scratch) / "linux_mcu",
            pins=PINS,
        )
        folder = Path(scratch) / "run"
        folder.mkdir()
        np.random.default_rng(0).standard_normal((1, 3, 32, 32), dtype=np.float32).tofile(folder / "in.bin")
        model = EmulatedModel(built)
        server, port = model._start_uart_server("mcu0", model.uart_servers["mcu0"], folder)
        try:
            results = {runs: [root_runs(built, port, folder, runs) for _ in range(args.repeats)] for runs in (1, 11)}
            requests(built, port, max(args.repeats, 5))
        finally:
            _stop(server)
    walls = {runs: statistics.median(wall for wall, _ in found) for runs, found in results.items()}
    one, eleven = results[1][0][1], results[11][0][1]
    for runs in (1, 11):
        stats = results[runs][0][1]
        print(
            f"root with {runs} inference(s): {walls[runs]:.2f} s wall (median of {args.repeats}); sent "
            f"{stats['bytes_sent']} B in {stats['messages_sent']} messages, received {stats['bytes_received']} B"
        )
    print(
        f"each inference beyond the first: {(walls[11] - walls[1]) / 10 * 1000:.0f} ms wall, "
        f"{(eleven['bytes_sent'] - one['bytes_sent']) / 10:.0f} B sent, "
        f"{(eleven['bytes_received'] - one['bytes_received']) / 10:.0f} B received, "
        f"{(eleven['messages_sent'] - one['messages_sent']) / 10:.0f} messages each way"
    )


if __name__ == "__main__":
    main()
