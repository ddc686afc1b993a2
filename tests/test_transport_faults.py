"""Faults on the transport: each ends with one clear message (which device, what happened) and a
non-zero exit within the configured timeout, never a hang; the host's runtime returns an error code
(the example program exits with its "run failed" code, no signal, no sanitizer report).

The faults are injected byte-exactly by a Python peer (transport_peer.py): as a fake server the root
program starts through exec:, and as a client of the real server."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time

import pytest

from transport_peer import ALLOC, COPY_IN, COPY_OUT, ERROR, HELLO, INVOKE, WAIT, Client, frame, read_frame
from transport_support import RUN_ENV, peer_command, shared_pair, write_inputs

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

EXIT_RUN = 4  # templates/model/main.c.j2: a failed init or run


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return shared_pair(tmp_path_factory)


def run_root(pair, tmp_path, endpoint: str, timeout_ms: int = 2000, env=None):
    write_inputs(pair.project, tmp_path / "in.bin", 0)
    start = time.monotonic()
    result = subprocess.run(
        [pair.root, "--key", pair.key, "--device", f"vdevice0={endpoint}", tmp_path / "in.bin", tmp_path / "out.bin"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **RUN_ENV, "HG_TRANSPORT_TIMEOUT_MS": str(timeout_ms), **(env or {})},
    )
    return result, time.monotonic() - start


def requests_per_run(pair, tmp_path) -> int:
    """How many requests a whole healthy run sends (start-up included), from the root's own counters."""
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    stats = healthy / "stats.jsonl"
    result, _ = run_root(pair, healthy, f"exec:{pair.server} --key {pair.key}", env={"HG_TRANSPORT_STATS": str(stats)})
    assert result.returncode == 0, result.stderr
    (line,) = stats.read_text().splitlines()
    return json.loads(line)["messages_sent"]


def assert_clean_failure(result, *phrases):
    assert result.returncode == EXIT_RUN, (result.returncode, result.stderr)
    assert "device vdevice0" in result.stderr, result.stderr
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr
    assert "Sanitizer" not in result.stderr and "runtime error" not in result.stderr


def test_server_killed_in_the_middle_of_a_run(pair, tmp_path):
    # Killed while the run's middle request is in flight (counted, so a schedule with fewer copies
    # still kills it mid-run rather than after the run has finished).
    total = requests_per_run(pair, tmp_path)
    assert total >= 5, total  # hello, auth and alloc at start-up, then the run's own requests
    middle = str(max(3, total // 2))
    result, took = run_root(
        pair, tmp_path, "exec:" + peer_command("kill-after", middle, str(pair.server), "--key", str(pair.key))
    )
    assert_clean_failure(result, "the peer closed the connection", "failed with status -3")
    assert took < 10
    assert not (tmp_path / "out.bin").exists()


def test_server_never_answering_times_out(pair, tmp_path):
    result, took = run_root(pair, tmp_path, "exec:" + peer_command("silent"), timeout_ms=500)
    assert_clean_failure(result, "hello: no answer within 500 ms", "failed with status -3")
    assert 0.5 <= took < 5


def test_reply_with_a_wrong_crc(pair, tmp_path):
    result, took = run_root(pair, tmp_path, "exec:" + peer_command("bad-crc"))
    assert_clean_failure(result, "bad frame: CRC-32")
    assert took < 5


def test_truncated_reply(pair, tmp_path):
    result, took = run_root(pair, tmp_path, "exec:" + peer_command("truncated"))
    assert_clean_failure(result, "truncated frame")
    assert took < 5


def test_server_of_another_protocol_version(pair, tmp_path):
    result, took = run_root(pair, tmp_path, "exec:" + peer_command("version"))
    assert_clean_failure(result, "protocol version mismatch: the server speaks version 99, this program 2")
    assert took < 5


def test_server_that_cannot_start(pair, tmp_path):
    result, _ = run_root(pair, tmp_path, f"exec:{tmp_path}/no-such-server")
    assert_clean_failure(result, "hello: the peer closed the connection")


@pytest.fixture
def server(pair):
    process = subprocess.Popen(
        [pair.server, "--key", pair.key, "--timeout-ms", "300"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=RUN_ENV,
    )
    yield process
    process.kill()
    process.wait()


def u64s(*values: int) -> bytes:
    return b"".join(struct.pack("<Q", v) for v in values)


def client_of(pair, server) -> Client:
    return Client(server.stdout, server.stdin, pair.key.read_bytes(), pair.plan_hash)


def test_requests_outside_the_device_memory_are_refused(pair, server):
    client = client_of(pair, server)
    client.hello()
    size = pair.memory_size
    marker = b"\xa5" * 64
    assert client.call(COPY_IN, u64s(size - 64, 64) + marker)[0] == 0  # the last 64 bytes: allowed
    refused = [
        (COPY_IN, u64s(size - 8, 64) + b"\x00" * 64, -4, "outside the device's"),
        (COPY_IN, u64s(2**64 - 8, 16) + b"\x00" * 16, -4, "outside"),  # offset + size wraps around
        (COPY_IN, u64s(0, 1000) + b"\x00" * 10, -1, "declares 1000 bytes but carries 10"),
        (COPY_OUT, u64s(size, 1), -4, "outside"),
        (COPY_OUT, u64s(0, 2**63), -4, "outside"),
        (INVOKE, struct.pack("<I", pair.num_programs), -1, f"invoke of program {pair.num_programs}"),
        (ALLOC, u64s(size + 1), -4, "exceeds"),
        (WAIT, b"x", -1, "no arguments"),
        (0x42, b"", -1, "unknown message type 0x42"),
    ]
    for kind, payload, status, reason in refused:
        got, body = client.call(kind, payload)
        assert (got, reason in body.decode()) == (status, True), (kind, body)
    # The session goes on, and the memory holds what the allowed copy wrote, nothing else.
    status, back = client.call(COPY_OUT, u64s(size - 64, 64))
    assert (status, back) == (0, marker)
    server.stdin.close()
    assert server.wait(timeout=10) == 0
    assert b"refused request" in server.stderr.read()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: f[:-1] + bytes([f[-1] ^ 1]), b"bad frame: CRC-32"),
        (lambda f: b"XXXX" + f[4:], b"bad frame: magic"),
        (lambda f: f[:12] + struct.pack("<I", 2**31) + f[16:], b"exceeds"),
    ],
    ids=["crc", "magic", "length"],
)
def test_a_broken_frame_ends_the_session(pair, server, damage, message):
    client = client_of(pair, server)
    client.hello()
    client.send(client.seal(damage(frame(COPY_IN, 3, u64s(0, 4) + b"abcd"))))  # sealed, so only the damage is wrong
    _, kind, _, body = read_frame(server.stdout)
    assert kind == ERROR and message in body
    assert server.wait(timeout=5) == 1
    assert message in server.stderr.read()


def test_a_truncated_request_ends_the_session_within_the_timeout(pair, server):
    client = client_of(pair, server)
    client.hello()
    start = time.monotonic()
    client.send(frame(COPY_IN, 2, u64s(0, 64) + b"\x00" * 64)[:40])  # and then nothing
    _, kind, _, body = read_frame(server.stdout)
    assert kind == ERROR and b"no whole frame within 300 ms" in body
    assert server.wait(timeout=5) == 1 and time.monotonic() - start < 3
    # The stream ending inside a frame is the same fault, reported at once.
    again = subprocess.Popen(
        [pair.server, "--key", pair.key], stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE
    )
    again.stdin.write(frame(HELLO, 1, b"\x02\x00\x00\x00")[:22])  # header and half the payload
    again.stdin.close()
    assert again.wait(timeout=5) == 1 and b"truncated frame" in again.stderr.read()


def test_a_client_of_another_protocol_version_is_told(pair, server):
    server.stdin.write(frame(HELLO, 1, struct.pack("<I", 1), version=1))
    server.stdin.flush()
    version, kind, _, body = read_frame(server.stdout)
    assert (version, kind) == (2, ERROR)
    assert b"protocol version mismatch: the client speaks version 1, this server 2" in body
    assert server.wait(timeout=5) == 1
