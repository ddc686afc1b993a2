"""`hetgen tune PLATFORM --on HOST:PORT --built DIR`: timing on the target, through the device transport.

The board's device server (templates/runtime/hg_server.c, built from the generated project DIR)
times its own programs: a HG_MSG_TIME request (program, repeats; at most HG_TIME_MAX_REPEATS)
over the authenticated session makes it run the program with invoke and wait, each run timed with
the server's clock (CLOCK_MONOTONIC), and the reply carries the nanoseconds of each run. The host
only records them: the fastest run of each program counts (as in measure.py). A server that runs
under an emulator (HG_EMULATED in its environment: `hetgen verify --emulate` sets it) refuses, and
so does `hetgen tune --emulate`: emulated time is not the board's.

The figure written back: the served co-processor's `peak_gflops`, scaled so that the cost model's
estimate of what its programs run (hetgen.json's estimates on the co-processor and the devices
behind it) equals the measured time. The client speaks the protocol of hg_transport.h and
hg_auth.h (the handshake's proofs, then every frame sealed with the session key).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import zlib
from dataclasses import dataclass

from hetgen.errors import HetgenError

MAGIC = 0x50544748
VERSION = 2
HEADER = struct.Struct("<IHHIII")  # magic, version, type, sequence, length, crc
HELLO, AUTH, TIME, ERROR, REPLY = 1, 8, 9, 0x7F, 0x80
NONCE, TAG = 32, 32
MAX_REPEATS = 256  # HG_TIME_MAX_REPEATS
TIME_FORMAT, CLOCK_MONOTONIC = 1, 1
TIME_TIMEOUT_S = 600.0  # how long a timing reply may take
MAX_REPLY = 12 + 8 * MAX_REPEATS + 4 + 512  # a timing reply, or a refusal's reason


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise HetgenError(f"--on {text}: expected HOST:PORT, the address a device server listens on")
    return host, int(port)


def _proof(key: bytes, label: bytes, client: bytes, server: bytes, plan_hash: bytes, name: bytes) -> bytes:
    transcript = client + server + plan_hash + struct.pack("<IB", VERSION, len(name)) + name
    return hmac.new(key, label + transcript, hashlib.sha256).digest()


def _text(data: bytes) -> str:
    """A peer's message, printable: control characters escaped (names from peers are data)."""
    return data.rstrip(b"\0").decode("utf-8", "replace").encode("unicode_escape").decode("ascii")


class Session:
    """One authenticated session with a device server over TCP."""

    def __init__(self, address: str, key: bytes, plan_hash: bytes, name: str, timeout_s: float = 30.0):
        host, port = parse_address(address)
        self.where = address
        try:
            self.socket = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as error:
            raise HetgenError(
                f"--on {address}: cannot connect to the device server: {error.strerror or error}"
            ) from None
        self.stream = self.socket.makefile("rwb")
        self.sequence, self.sent, self.received, self.session_key = 0, 0, 0, b""
        self._handshake(key, plan_hash, name.encode())

    def close(self) -> None:
        self.stream.close()
        self.socket.close()

    def _read(self, size: int) -> bytes:
        try:
            data = self.stream.read(size)
        except OSError as error:
            raise HetgenError(f"{self.where}: the device server did not answer: {error}") from None
        if data is None or len(data) != size:
            raise HetgenError(f"{self.where}: the device server closed the connection")
        return data

    def _write(self, data: bytes) -> None:
        try:
            self.stream.write(data)
            self.stream.flush()
        except OSError as error:
            raise HetgenError(f"{self.where}: the device server closed the connection: {error}") from None

    def _receive(self) -> tuple[int, int, bytes]:
        head = self._read(HEADER.size)
        magic, version, kind, sequence, length, crc = HEADER.unpack(head)
        if magic != MAGIC or version != VERSION or length > MAX_REPLY:
            raise HetgenError(
                f"{self.where}: not a hetgen device server of protocol version {VERSION} "
                f"(magic {magic:#x}, version {version}, {length} bytes)"
            )
        payload = self._read(length)
        if zlib.crc32(head[:16] + payload) != crc:
            raise HetgenError(f"{self.where}: a reply with a bad CRC")
        if kind == ERROR:
            raise HetgenError(f"{self.where}: the device server refused: {_text(payload[4:])}")
        if self.session_key:
            expected = hmac.new(
                self.session_key, b"S" + struct.pack("<Q", self.received) + head + payload, hashlib.sha256
            ).digest()
            if not hmac.compare_digest(self._read(TAG), expected):
                raise HetgenError(f"{self.where}: a reply whose tag does not check (not the session's key)")
            self.received += 1
        return kind, sequence, payload

    def call(self, kind: int, payload: bytes) -> tuple[int, bytes]:
        """(status, results or reason) of one request."""
        self.sequence += 1
        head = struct.pack("<IHHII", MAGIC, VERSION, kind, self.sequence, len(payload))
        data = head + struct.pack("<I", zlib.crc32(head + payload)) + payload
        if self.session_key:
            data += hmac.new(self.session_key, b"C" + struct.pack("<Q", self.sent) + data, hashlib.sha256).digest()
            self.sent += 1
        self._write(data)
        reply, sequence, body = self._receive()
        if (reply, sequence) != (REPLY | kind, self.sequence) or len(body) < 4:
            raise HetgenError(f"{self.where}: a reply of type {reply:#x} #{sequence} to request #{self.sequence}")
        return struct.unpack("<i", body[:4])[0], body[4:]

    def _handshake(self, key: bytes, plan_hash: bytes, name: bytes) -> None:
        client = os.urandom(NONCE)
        status, body = self.call(HELLO, struct.pack("<I", VERSION) + client + plan_hash + name)
        if status != 0 or len(body) != 4 + NONCE + 32:
            raise HetgenError(f"{self.where}: the hello was refused ({status}): {_text(body)}")
        server, server_proof = body[4 : 4 + NONCE], body[4 + NONCE :]
        if not hmac.compare_digest(server_proof, _proof(key, b"hgtp2 server", client, server, plan_hash, name)):
            raise HetgenError(f"{self.where}: the device server does not hold the transport key")
        self.session_key = _proof(key, b"hgtp2 session", client, server, plan_hash, name)
        # the auth goes unsealed; its reply is the first sealed frame
        session_key, self.session_key = self.session_key, b""
        self.sequence += 1
        proof = _proof(key, b"hgtp2 client", client, server, plan_hash, name)
        head = struct.pack("<IHHII", MAGIC, VERSION, AUTH, self.sequence, len(proof))
        self._write(head + struct.pack("<I", zlib.crc32(head + proof)) + proof)
        self.session_key = session_key
        reply, _, body = self._receive()
        if reply != REPLY | AUTH or struct.unpack("<i", body[:4])[0] != 0:
            raise HetgenError(f"{self.where}: the session was not opened")
        self.memory_size, self.num_programs = struct.unpack("<QI", body[4:16])

    def time(self, program: int, repeats: int) -> list[float]:
        """Seconds of each of `repeats` runs of `program`, by the server's clock."""
        if not 0 < repeats <= MAX_REPEATS:
            raise HetgenError(f"--repeats {repeats}: from 1 to {MAX_REPEATS}")
        self.socket.settimeout(TIME_TIMEOUT_S)  # the server runs the program `repeats` times first
        status, body = self.call(TIME, struct.pack("<II", program, repeats))
        if status != 0:
            raise HetgenError(f"{self.where}: the device server refused to time program {program}: {_text(body)}")
        if len(body) < 12:
            raise HetgenError(f"{self.where}: a timing reply of {len(body)} bytes")
        form, clock, count = struct.unpack("<III", body[:12])
        if form != TIME_FORMAT or clock != CLOCK_MONOTONIC or count != repeats or len(body) != 12 + 8 * count:
            raise HetgenError(
                f"{self.where}: a timing reply this hetgen does not read (format {form}, clock {clock}, {count} runs)"
            )
        return [ns * 1e-9 for ns in struct.unpack(f"<{count}Q", body[12:])]


@dataclass(frozen=True)
class RemoteTiming:
    address: str
    device: str  # the remote device's name (the hello names it)
    target: str  # the co-processor served
    seconds: tuple[float, ...]  # each program's fastest run, by the server's clock

    @property
    def total(self) -> float:
        return sum(self.seconds)


def time_remote(address: str, key: bytes, plan_hash: bytes, device: str, target: str, repeats: int) -> RemoteTiming:
    """Every program of the device server at `address`, `repeats` runs each, the first not counted
    (a warm-up)."""
    session = Session(address, key, plan_hash, device)
    try:
        best = tuple(min(session.time(p, repeats + 1)[1:]) for p in range(session.num_programs))
    finally:
        session.close()
    return RemoteTiming(address, device, target, best)
