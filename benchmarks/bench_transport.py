"""The out-of-process transport on the shipped soc example: the root program under qemu-aarch64
driving its co-processor's device server under qemu-riscv64, over a pipe pair and over TCP.

    python benchmarks/bench_transport.py [--runs 5] [--model examples/resnet_tiny.onnx]

Prints, per transport, the median wall time of one emulated run (both programs started, the model
run once, both ended: what `hetgen verify --emulate` pays per input) and what crossed the transport
in that run: messages and bytes each way, headers included (the client's counters,
HG_TRANSPORT_STATS). Then the handshake's cost: the median time to open a TCP session with the
emulated server (connect, the server's fork, hello and auth: two round trips and four HMAC-SHA256s,
two of them under qemu) and, for scale, of one request's round trip inside the session. Needs the
board toolchains and qemu-user (see the README's set-up command).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import hetgen
from hetgen.runtime.emulate import EmulatedModel
from hetgen.runtime.reference import random_inputs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from transport_peer import RESET, Client  # noqa: E402  (the tests' byte-exact peer: one Python copy of the protocol)


def handshake_ms(model: EmulatedModel, sessions: int) -> tuple[float, float]:
    """(median ms to open a session, median ms of one reset's round trip inside it) against the
    first co-processor's emulated server, listening on loopback."""
    name, server = model.servers[0]
    device = model.manifest.remote_devices[0]
    process, port = model._start_listening(name, server)
    opens, trips = [], []
    try:
        for _ in range(sessions):
            begin = time.perf_counter()
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                key, plan = model.key.read_bytes(), bytes.fromhex(device.plan_hash)
                client = Client(sock.makefile("rb"), sock.makefile("wb"), key, plan, device.name.encode())
                client.hello()
                opened = time.perf_counter()
                client.call(RESET)
                trips.append((time.perf_counter() - opened) * 1e3)
            opens.append((opened - begin) * 1e3)
    finally:
        process.kill()
        process.wait()
    return statistics.median(opens), statistics.median(trips)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--platform", default=str(ROOT / "platforms/soc.yaml"))
    parser.add_argument("--model", default=str(ROOT / "examples/resnet_tiny.onnx"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-transport-") as tmp:
        start = time.perf_counter()
        project = hetgen.compile(args.platform, args.model, out=Path(tmp) / "project")
        print(f"generate + native and board builds: {time.perf_counter() - start:.1f} s")
        print(f"{'transport':10} {'run ms':>8} {'messages':>9} {'bytes to device':>16} {'bytes from device':>18}")
        for transport in ("pipe", "tcp"):
            model = EmulatedModel(project, transport=transport)
            if not model.servers:
                print(f"{transport:10} (the model needs no co-processor on this platform: nothing crosses)")
                continue
            feeds = random_inputs(model.inputs, seed=0)
            times = []
            for _ in range(args.runs):
                begin = time.perf_counter()
                model.run(feeds)
                times.append((time.perf_counter() - begin) * 1e3)
            for stats in model.transport_stats:
                print(
                    f"{transport:10} {statistics.median(times):8.1f} {stats['messages_sent']:>4} + "
                    f"{stats['messages_received']:<3} {stats['bytes_sent']:16d} {stats['bytes_received']:18d}"
                    f"  ({stats['device']})"
                )
        model = EmulatedModel(project, transport="tcp")
        if model.servers:
            opened, trip = handshake_ms(model, max(args.runs, 5))
            print(
                f"handshake (tcp, emulated server): open a session {opened:.1f} ms, one round trip after {trip:.1f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
