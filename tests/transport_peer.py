"""A Python peer that speaks hetgen's device transport byte-exactly (templates/runtime/hg_transport.h),
to inject faults the real peers never make.

As a module: frame encoding and decoding, the handshake's proofs (Python's hmac and hashlib, the
independent check of templates/runtime/hg_auth.c), a client for a real device server. As a program,
a fake device server on stdin/stdout that a root program starts through `exec:`:

    python transport_peer.py silent              reads requests, never answers
    python transport_peer.py bad-crc             answers the hello with a wrong CRC
    python transport_peer.py truncated           answers the hello with half a frame, then exits
    python transport_peer.py version             answers the hello in protocol version 99
    python transport_peer.py trickle MS          answers the hello whole and correct, one byte every MS ms
    python transport_peer.py oversize            answers the hello with a header declaring 2 GiB
    python transport_peer.py wrong-key           answers the hello with a proof made with another key
    python transport_peer.py escape              refuses the hello with terminal escape sequences
    python transport_peer.py bad-tag KEYFILE     the handshake with the key, then a reply with a forged tag
    python transport_peer.py kill-after N CMD..  relays to the real server CMD, and kills it (SIGKILL)
                                                 when request N arrives, before it can answer
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import struct
import subprocess
import sys
import time
import zlib

MAGIC = 0x50544748
VERSION = 2
HEADER = struct.Struct("<IHHIII")  # magic, version, type, sequence, length, crc
HELLO, ALLOC, COPY_IN, COPY_OUT, INVOKE, WAIT, RESET, AUTH, ERROR, REPLY = 1, 2, 3, 4, 5, 6, 7, 8, 0x7F, 0x80
NONCE = 32

HG_OK, HG_ERR_ARGUMENT, HG_ERR_CAPACITY = 0, -1, -4


def frame(kind: int, sequence: int, payload: bytes = b"", version: int = VERSION, crc_delta: int = 0) -> bytes:
    head = struct.pack("<IHHII", MAGIC, version, kind, sequence, len(payload))
    crc = (zlib.crc32(head + payload) + crc_delta) & 0xFFFFFFFF
    return head + struct.pack("<I", crc) + payload


def read_exact(stream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError(f"the stream ended after {len(data)} of {size} bytes")
        data += chunk
    return data


def read_frame(stream) -> tuple[int, int, int, bytes]:
    """(version, type, sequence, payload) of the next frame; the CRC is checked."""
    magic, version, kind, sequence, length, crc = HEADER.unpack(read_exact(stream, HEADER.size))
    assert magic == MAGIC, f"bad magic {magic:#x}"
    payload = read_exact(stream, length)
    assert zlib.crc32(struct.pack("<IHHII", magic, version, kind, sequence, length) + payload) == crc, "bad CRC"
    return version, kind, sequence, payload


def tag(session_key: bytes, direction: bytes, number: int, whole_frame: bytes) -> bytes:
    """A sealed frame's tag (hg_transport.h: hg_channel_seal) over its header and payload."""
    return hmac.new(session_key, direction + struct.pack("<Q", number) + whole_frame, hashlib.sha256).digest()


def proof(key: bytes, role: str, client_nonce: bytes, server_nonce: bytes, plan_hash: bytes, name: bytes) -> bytes:
    """The handshake's proof of "server" or "client", or the "session" key (hg_auth.h: hg_handshake_proof)."""
    label = {"server": b"hgtp2 server", "client": b"hgtp2 client", "session": b"hgtp2 session"}[role]
    transcript = client_nonce + server_nonce + plan_hash + struct.pack("<IB", VERSION, len(name)) + name
    return hmac.new(key, label + transcript, hashlib.sha256).digest()


def hello_payload(client_nonce: bytes, plan_hash: bytes, name: bytes) -> bytes:
    return struct.pack("<I", VERSION) + client_nonce + plan_hash + name


class Refused(Exception):
    """The server sent an error frame (and closes): its code and text."""

    def __init__(self, code: int, text: bytes):
        super().__init__(f"refused ({code}): {text!r}")
        self.code, self.text = code, text


class Client:
    """Requests to a real device server over a pair of binary streams."""

    def __init__(self, reader, writer, key: bytes = b"", plan_hash: bytes = b"\0" * 32, name: bytes = b"vdevice0"):
        self.reader, self.writer, self.sequence = reader, writer, 0
        self.key, self.plan_hash, self.name = key, plan_hash, name
        self.session_key, self.sent, self.received = b"", 0, 0  # sealed once the handshake is done

    def seal(self, data: bytes) -> bytes:
        """A whole frame as a sealed session sends it: followed by its tag (unsealed: as it is)."""
        if not self.session_key:
            return data
        self.sent += 1
        return data + tag(self.session_key, b"C", self.sent - 1, data)

    def receive(self) -> tuple[int, int, bytes]:
        """(type, sequence, payload) of the next frame, its tag checked once the session is sealed."""
        head = read_exact(self.reader, HEADER.size)
        magic, _, kind, sequence, length, crc = HEADER.unpack(head)
        assert magic == MAGIC, f"bad magic {magic:#x}"
        payload = read_exact(self.reader, length)
        assert zlib.crc32(head[:16] + payload) == crc, "bad CRC"
        if self.session_key and kind != ERROR:
            expected = tag(self.session_key, b"S", self.received, head + payload)
            assert hmac.compare_digest(read_exact(self.reader, 32), expected), "bad tag"
            self.received += 1
        return kind, sequence, payload

    def send(self, data: bytes) -> None:
        self.writer.write(data)
        self.writer.flush()

    def call(self, kind: int, payload: bytes = b"") -> tuple[int, bytes]:
        """(status, results or reason) of one request."""
        self.sequence += 1
        self.send(self.seal(frame(kind, self.sequence, payload)))
        reply_kind, sequence, body = self.receive()
        if reply_kind == ERROR:
            (code,) = struct.unpack("<i", body[:4])
            raise Refused(code, body[4:].rstrip(b"\0"))
        assert (reply_kind, sequence) == (REPLY | kind, self.sequence), (reply_kind, sequence)
        (status,) = struct.unpack("<i", body[:4])
        return status, body[4:]

    def challenge(self, client_nonce: bytes | None = None) -> tuple[bytes, bytes, bytes]:
        """Send the hello; (client nonce, server nonce, server proof) of the reply."""
        client_nonce = os.urandom(NONCE) if client_nonce is None else client_nonce
        status, body = self.call(HELLO, hello_payload(client_nonce, self.plan_hash, self.name))
        assert status == HG_OK and len(body) == 4 + NONCE + 32, (status, body)
        return client_nonce, body[4 : 4 + NONCE], body[4 + NONCE :]

    def hello(self) -> tuple[int, int]:
        """The whole handshake, checking the server's proof; (memory_size, num_programs) it reports."""
        client_nonce, server_nonce, server_proof = self.challenge()
        expected = proof(self.key, "server", client_nonce, server_nonce, self.plan_hash, self.name)
        assert hmac.compare_digest(server_proof, expected), "the server does not hold the key"
        mine = proof(self.key, "client", client_nonce, server_nonce, self.plan_hash, self.name)
        self.sequence += 1
        self.send(frame(AUTH, self.sequence, mine))
        # The auth's reply is the first sealed frame.
        self.session_key = proof(self.key, "session", client_nonce, server_nonce, self.plan_hash, self.name)
        reply_kind, _, reply = self.receive()
        assert reply_kind == REPLY | AUTH, reply
        status, body = struct.unpack("<i", reply[:4])[0], reply[4:]
        assert status == HG_OK
        return struct.unpack("<QI", body)


def _serve_fault(mode: str, argument: str = "") -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    _, _, sequence, request = read_frame(stdin)
    client_nonce, plan_hash, name = request[4 : 4 + NONCE], request[4 + NONCE : 4 + 2 * NONCE], request[4 + 2 * NONCE :]
    server_nonce = os.urandom(NONCE)
    other_key = os.urandom(32)
    hello = struct.pack("<iI", HG_OK, VERSION) + server_nonce
    hello += proof(other_key, "server", client_nonce, server_nonce, plan_hash, name)
    if mode == "silent":
        while stdin.read(1):
            pass
        time.sleep(3600)
    elif mode == "bad-crc":
        stdout.write(frame(REPLY | HELLO, sequence, hello, crc_delta=1))
    elif mode == "truncated":
        stdout.write(frame(REPLY | HELLO, sequence, hello)[:-5])
    elif mode == "version":
        stdout.write(frame(REPLY | HELLO, sequence, hello, version=99))
    elif mode == "trickle":
        for byte in frame(REPLY | HELLO, sequence, hello):
            stdout.write(bytes([byte]))
            stdout.flush()
            time.sleep(int(argument) / 1000)
    elif mode == "oversize":
        stdout.write(frame(REPLY | HELLO, sequence, hello)[:12] + struct.pack("<II", 2**31, 0))
    elif mode == "wrong-key":
        stdout.write(frame(REPLY | HELLO, sequence, hello))
    elif mode == "bad-tag":  # the handshake with the real key, then an auth reply whose tag is forged
        with open(argument, "rb") as file:
            key = file.read()
        hello = struct.pack("<iI", HG_OK, VERSION) + server_nonce
        stdout.write(
            frame(REPLY | HELLO, sequence, hello + proof(key, "server", client_nonce, server_nonce, plan_hash, name))
        )
        stdout.flush()
        _, _, sequence, _ = read_frame(stdin)
        stdout.write(frame(REPLY | AUTH, sequence, struct.pack("<iQI", HG_OK, 0, 0)) + bytes(32))
    elif mode == "escape":
        text = b"no \x1b[2J\x1b]0;owned\x07 entry\r\0"
        stdout.write(frame(ERROR, sequence, struct.pack("<i", -15) + text))
    stdout.flush()
    if mode != "truncated":
        time.sleep(3600)  # keep the stream open: the client must notice by itself


def _relay_then_kill(requests: int, command: list[str]) -> None:
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    for count in range(1, requests + 1):
        head = read_exact(stdin, HEADER.size)
        sealed = count > 2  # the hello and the auth are not; every request after them carries a tag
        request = head + read_exact(stdin, HEADER.unpack(head)[4] + (32 if sealed else 0))
        if count == requests:
            os.kill(server.pid, signal.SIGKILL)  # the request arrives; the server dies before answering
            server.wait()
            return
        server.stdin.write(request)
        server.stdin.flush()
        head = read_exact(server.stdout, HEADER.size)
        _, _, kind, _, length, _ = HEADER.unpack(head)
        tagged = count > 1 and kind != ERROR  # from the auth's reply on
        stdout.write(head + read_exact(server.stdout, length + (32 if tagged else 0)))
        stdout.flush()


if __name__ == "__main__":
    if sys.argv[1] == "kill-after":
        _relay_then_kill(int(sys.argv[2]), sys.argv[3:])
    else:
        _serve_fault(*sys.argv[1:3])
