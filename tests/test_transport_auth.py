"""The transport as an attacker or a careless peer meets it: the handshake's HMAC-SHA256 against
Python's, peers without the key, replayed sessions, idle and trickling peers, sessions that try to
read each other's memory, oversized frames and refusal texts with terminal escapes.

The real server listens on loopback with short deadlines (--timeout-ms), a Python peer
(transport_peer.py) speaks the protocol byte-exactly; the root program meets fake servers through
exec:. Every test runs in about a second."""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import re
import socket
import struct
import subprocess
import time
import zlib

import pytest

from hetgen.names import terminal_text
from transport_peer import (
    AUTH,
    COPY_IN,
    COPY_OUT,
    ERROR,
    HELLO,
    NONCE,
    Client,
    Refused,
    frame,
    hello_payload,
    proof,
    read_frame,
)
from transport_support import CFLAGS, REPO, RUN_ENV, SANITIZE, peer_command, shared_pair, write_inputs, write_key

RUNTIME = REPO / "templates" / "runtime"
EXIT_RUN = 4


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return shared_pair(tmp_path_factory)


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    exe = tmp_path_factory.mktemp("unit") / "transport_unit"
    sources = [str(RUNTIME / name) for name in ("hg_transport.c", "hg_auth.c", "hg_server.c")]
    subprocess.run(
        ["gcc", *CFLAGS, *SANITIZE, "-I", str(RUNTIME), "-o", str(exe), str(REPO / "tests/c/transport_unit.c")]
        + sources,
        check=True,
    )
    return exe


def c_says(unit, *arguments: str) -> str:
    return subprocess.run([unit, *arguments], capture_output=True, text=True, check=True).stdout.strip()


# RFC 4231's HMAC-SHA256 test cases 1-4, 6 and 7 (case 5 is a truncated MAC): (key, data, MAC).
RFC_4231 = [
    (b"\x0b" * 20, b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
    (b"Jefe", b"what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
    (b"\xaa" * 20, b"\xdd" * 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
    (
        bytes(range(1, 26)),
        b"\xcd" * 50,
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
    ),
    (
        b"\xaa" * 131,
        b"Test Using Larger Than Block-Size Key - Hash Key First",
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
    ),
    (
        b"\xaa" * 131,
        b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be "
        b"hashed before being used by the HMAC algorithm.",
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
    ),
]


@pytest.mark.cc
@pytest.mark.parametrize(("key", "data", "mac"), RFC_4231, ids=["1", "2", "3", "4", "6", "7"])
def test_c_hmac_sha256_meets_rfc_4231_and_pythons_hmac(unit, key, data, mac):
    assert hmac.new(key, data, hashlib.sha256).hexdigest() == mac  # the vector as Python computes it
    assert c_says(unit, "hmac", key.hex(), data.hex()) == mac


@pytest.mark.cc
def test_c_sha256_and_hmac_agree_with_python_on_every_padding_boundary(unit):
    rng = random.Random(7)
    for size in (0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000, 20000):
        data = bytes(rng.randrange(256) for _ in range(size))
        assert c_says(unit, "sha256", data.hex()) == hashlib.sha256(data).hexdigest(), size
        key = bytes(rng.randrange(256) for _ in range(rng.choice((1, 16, 32, 64, 65, 200))))
        assert c_says(unit, "hmac", key.hex(), data.hex()) == hmac.new(key, data, hashlib.sha256).hexdigest(), size


@pytest.mark.cc
def test_escape_leaves_no_control_character(unit):
    text = b"ok \x1b[2J\x1b]0;owned\x07 \\ \r\n\x9b\xff end"
    assert c_says(unit, "escape", text.hex()) == r"ok \x1b[2J\x1b]0;owned\x07 \x5c \x0d\x0a\x9b\xff end"
    assert c_says(unit, "escape", (b"\x1b" * 200).hex()).endswith("...")


# --- the server, listening ----------------------------------------------------------------------------


class Listening:
    def __init__(self, process: subprocess.Popen, port: int):
        self.process, self.port = process, port

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


def listen(pair, *options: str) -> Listening:
    process = subprocess.Popen(
        [pair.server, "--key", pair.key, "--listen", "127.0.0.1:0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **RUN_ENV},
    )
    line = process.stdout.readline().decode()
    found = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
    assert found, line
    return Listening(process, int(found.group(1)))


def stop(listening: Listening) -> str:
    """Stop the server; its stderr, which must hold no sanitizer report (sessions included)."""
    time.sleep(0.2)  # the last session's process finishes what it was doing
    listening.process.terminate()
    _, errors = listening.process.communicate(timeout=10)
    text = errors.decode(errors="replace")
    assert "Sanitizer" not in text and "runtime error" not in text, text
    return text


@pytest.fixture
def server(pair):
    listening = listen(pair, "--timeout-ms", "600")
    yield listening
    stop(listening)


def client(pair, sock: socket.socket, key: bytes | None = None) -> Client:
    return Client(
        sock.makefile("rb"), sock.makefile("wb"), pair.key.read_bytes() if key is None else key, pair.plan_hash
    )


def u64s(*values: int) -> bytes:
    return b"".join(struct.pack("<Q", v) for v in values)


def refusal_then_close(sock: socket.socket) -> bytes:
    """What a refused peer gets: exactly one error frame, then the end of the stream."""
    reader = sock.makefile("rb")
    _, kind, _, body = read_frame(reader)
    assert kind == ERROR, kind
    assert reader.read(1) == b"", "the server closes after its one refusal"
    return body[4:].rstrip(b"\0")


@pytest.mark.cc
def test_an_idle_peer_does_not_block_a_second_client(pair, server):
    idle = server.connect()  # connects, then says nothing
    start = time.monotonic()
    with server.connect() as sock:
        busy = client(pair, sock)
        assert busy.hello() == (pair.memory_size, pair.num_programs)
        assert busy.call(COPY_IN, u64s(0, 4) + b"abcd")[0] == 0
        assert busy.call(COPY_OUT, u64s(0, 4)) == (0, b"abcd")
    assert time.monotonic() - start < 0.5, "served while the idle peer still held its connection"
    # And the idle peer is dropped at the hello's deadline, told why.
    assert b"no answer within 600 ms" in refusal_then_close(idle)
    assert time.monotonic() - start < 2
    idle.close()


@pytest.mark.cc
def test_a_trickling_peer_is_dropped_at_its_frame_deadline(pair, server):
    """A hello sent one byte every 50 ms would take 4.8 s whole; a per-read timeout would wait for it."""
    hello = frame(HELLO, 1, hello_payload(os.urandom(NONCE), pair.plan_hash, pair.device.encode()))
    with server.connect() as sock:
        sock.settimeout(0.05)
        start = time.monotonic()
        sent = 0
        for byte in hello:
            try:
                sock.sendall(bytes([byte]))
                sent += 1
            except OSError:
                break  # the server closed
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    break  # its refusal arrived
            except TimeoutError:
                pass
        took = time.monotonic() - start
        sock.settimeout(5)
        assert b"no whole frame within 600 ms" in refusal_then_close(sock)
    assert sent < len(hello) and 0.55 < took < 1.5, (sent, took)


@pytest.mark.cc
def test_a_peer_without_the_key_gets_one_refusal_and_a_close(pair, server):
    # It skips the proof and asks for memory.
    with server.connect() as sock:
        peer = client(pair, sock)
        peer.challenge()
        peer.send(frame(COPY_OUT, 2, u64s(0, 64)))
        assert b"authentication failed" in refusal_then_close(sock)
    # It asks for memory straight away.
    with server.connect() as sock:
        sock.sendall(frame(COPY_OUT, 1, u64s(0, 64)))
        assert b"expected a hello" in refusal_then_close(sock)
    # It holds another key: the server's proof does not check out, and its own is refused.
    with server.connect() as sock:
        peer = client(pair, sock, key=os.urandom(32))
        client_nonce, server_nonce, server_proof = peer.challenge()
        assert server_proof != proof(peer.key, "server", client_nonce, server_nonce, pair.plan_hash, peer.name)
        peer.send(frame(AUTH, 2, proof(peer.key, "client", client_nonce, server_nonce, pair.plan_hash, peer.name)))
        assert b"authentication failed" in refusal_then_close(sock)
    # The right key, the proof of the other role (a reflected server proof): refused.
    with server.connect() as sock:
        peer = client(pair, sock)
        client_nonce, server_nonce, server_proof = peer.challenge()
        peer.send(frame(AUTH, 2, server_proof))
        assert b"authentication failed" in refusal_then_close(sock)


class Recorder:
    """A writer that keeps what passes through it."""

    def __init__(self, writer):
        self.writer, self.recorded = writer, b""

    def write(self, data: bytes) -> None:
        self.recorded += data
        self.writer.write(data)

    def flush(self) -> None:
        self.writer.flush()


@pytest.mark.cc
def test_a_recorded_session_replayed_is_refused(pair, server):
    with server.connect() as sock:
        recorder = Recorder(sock.makefile("wb"))
        honest = Client(sock.makefile("rb"), recorder, pair.key.read_bytes(), pair.plan_hash)
        honest.hello()
        assert honest.call(COPY_IN, u64s(0, 8) + b"replayed")[0] == 0
    with server.connect() as sock:
        sock.sendall(recorder.recorded)  # hello, the old proof, the copy: all of it, byte for byte
        reader = sock.makefile("rb")
        _, kind, _, _ = read_frame(reader)
        assert kind == 0x80 | HELLO  # a fresh challenge, which the old proof does not answer
        _, kind, _, body = read_frame(reader)
        assert kind == ERROR and b"authentication failed" in body
        assert reader.read(1) == b""


@pytest.mark.cc
def test_frames_injected_or_replayed_inside_a_session_are_refused(pair, server):
    """After the handshake every frame carries a tag over its number: one that the peer did not
    seal, or an old one sent again, is a broken frame, though its CRC is right."""
    with server.connect() as sock:
        peer = client(pair, sock)
        peer.hello()
        peer.send(frame(COPY_IN, 3, u64s(0, 4) + b"evil") + bytes(32))  # a well-formed frame, a made-up tag
        assert b"bad frame: its tag does not match" in refusal_then_close(sock)
    with server.connect() as sock:
        peer = client(pair, sock)
        peer.hello()
        sealed = peer.seal(frame(COPY_IN, 3, u64s(0, 4) + b"once"))
        peer.send(sealed)
        assert peer.receive()[:2] == (0x80 | COPY_IN, 3)
        peer.send(sealed)  # the same bytes again: its number is spent
        assert b"bad frame: its tag does not match" in refusal_then_close(sock)


@pytest.mark.cc
def test_a_second_session_reads_zeros_not_the_first_ones_data(pair, server):
    marker = bytes(range(256)) * 32  # 8 KiB, as the reproduction read back
    size = min(len(marker), pair.memory_size)
    with server.connect() as first_sock:
        first = client(pair, first_sock)
        first.hello()
        assert first.call(COPY_IN, u64s(0, size) + marker[:size])[0] == 0
        # While the first session holds its data, and after it has gone: zeros.
        with server.connect() as second_sock:
            second = client(pair, second_sock)
            second.hello()
            assert second.call(COPY_OUT, u64s(0, size)) == (0, bytes(size))
        assert first.call(COPY_OUT, u64s(0, size)) == (0, marker[:size])
    with server.connect() as third_sock:
        third = client(pair, third_sock)
        third.hello()
        assert third.call(COPY_OUT, u64s(0, size)) == (0, bytes(size))


@pytest.mark.cc
def test_the_hello_names_the_device_and_the_plan(pair, server):
    with server.connect() as sock:
        peer = Client(sock.makefile("rb"), sock.makefile("wb"), pair.key.read_bytes(), pair.plan_hash, b"npu\x1b[31m")
        with pytest.raises(Refused) as refused:
            peer.challenge()
        assert rb'asks for device "npu\x1b[31m"; this server serves vdevice0' in refused.value.text
    with server.connect() as sock:
        peer = Client(sock.makefile("rb"), sock.makefile("wb"), pair.key.read_bytes(), bytes(32))
        with pytest.raises(Refused) as refused:
            peer.challenge()
        assert b"built from another generated project (plan hash 0000000000000000..." in refused.value.text
    with server.connect() as sock:
        sock.sendall(frame(HELLO, 1, struct.pack("<I", 1) + bytes(64) + b"vdevice0"))
        assert b"the client's hello says version 1, this server 2" in refusal_then_close(sock)


@pytest.mark.cc
def test_an_oversized_frame_before_authentication_is_refused_unread(pair, server):
    with server.connect() as sock:
        head = struct.pack("<IHHII", 0x50544748, 2, HELLO, 1, 100_000)
        sock.sendall(head + struct.pack("<I", zlib.crc32(head)))  # and none of the 100,000 bytes
        assert b"a 100000-byte frame before authentication; a handshake frame has at most 256" in refusal_then_close(
            sock
        )


@pytest.mark.cc
def test_more_peers_than_sessions_are_refused_not_queued(pair):
    listening = listen(pair, "--timeout-ms", "600", "--max-sessions", "1")
    try:
        with listening.connect(), listening.connect() as second:  # the first one idles
            assert b"the server is busy: 1 sessions at once" in refusal_then_close(second)
    finally:
        assert "refused a connection" in stop(listening)


# --- the root, meeting servers that misbehave ---------------------------------------------------------


def run_root(pair, tmp_path, endpoint: str, timeout_ms: int = 2000, key=None):
    write_inputs(pair.project, tmp_path / "in.bin", 0)
    start = time.monotonic()
    result = subprocess.run(
        [pair.root, "--key", key or pair.key, "--device", f"vdevice0={endpoint}", tmp_path / "in.bin", tmp_path / "o"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **RUN_ENV, "HG_TRANSPORT_TIMEOUT_MS": str(timeout_ms)},
    )
    return result, time.monotonic() - start


def assert_refused(result, *phrases):
    assert result.returncode == EXIT_RUN, (result.returncode, result.stderr)
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr
    assert "Sanitizer" not in result.stderr and "runtime error" not in result.stderr


@pytest.mark.cc
def test_the_root_drops_a_server_trickling_its_reply(pair, tmp_path):
    """The reply (92 bytes) comes a byte every 50 ms: 4.6 s whole; the root gives the frame 500 ms."""
    result, took = run_root(pair, tmp_path, "exec:" + peer_command("trickle", "50"), timeout_ms=500)
    assert_refused(result, "hello: no whole frame within 500 ms")
    assert took < 2, took


@pytest.mark.cc
def test_the_root_refuses_a_server_without_the_key(pair, tmp_path):
    result, _ = run_root(pair, tmp_path, "exec:" + peer_command("wrong-key"))
    assert_refused(result, "hello: the server did not prove that it holds the transport key")
    # The real server with another key: the root stops at the server's proof, the server at the root's.
    other = write_key(tmp_path / "other.key")
    result, _ = run_root(pair, tmp_path, f"exec:{pair.server} --key {other}")
    assert_refused(result, "the server did not prove that it holds the transport key")


@pytest.mark.cc
def test_the_root_refuses_a_reply_whose_tag_is_forged(pair, tmp_path):
    """A server that passed the handshake (it holds the key) but whose sealed reply was altered."""
    result, _ = run_root(pair, tmp_path, "exec:" + peer_command("bad-tag", str(pair.key)))
    assert_refused(result, "auth: bad frame: its tag does not match")


@pytest.mark.cc
def test_the_root_refuses_an_oversized_reply_and_a_loose_key(pair, tmp_path):
    result, _ = run_root(pair, tmp_path, "exec:" + peer_command("oversize"))
    assert_refused(result, "exceeds the 268435456-byte limit")
    loose = write_key(tmp_path / "loose.key")
    loose.chmod(0o640)
    result, _ = run_root(pair, tmp_path, f"exec:{pair.server} --key {pair.key}", key=loose)
    assert_refused(result, "may be read or written by others (mode 640): run chmod 600")


@pytest.mark.cc
def test_a_refusal_reaches_the_terminal_escaped(pair, tmp_path):
    result, _ = run_root(pair, tmp_path, "exec:" + peer_command("escape"))
    assert_refused(result, r"the server refused the request: no \x1b[2J\x1b]0;owned\x07 entry\x0d")
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr and "\r" not in result.stderr


def test_python_quotes_a_peers_text_escaped_too():
    """hetgen verify --emulate quotes the board programs' stderr (a server's refusal among it)."""
    raw = "refused: \x1b[2J\x1b]0;owned\x07\r\x9b \\ é\nnext line\ttab"
    assert terminal_text(raw) == "refused: \\x1b[2J\\x1b]0;owned\\x07\\x0d\\u009b \\x5c é\nnext line\ttab"
