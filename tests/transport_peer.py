"""A Python peer that speaks hetgen's device transport byte-exactly (templates/runtime/hg_transport.h),
to inject faults the real peers never make.

As a module: frame encoding and decoding, a client for a real device server. As a program, a fake
device server on stdin/stdout that a root program starts through `exec:`:

    python transport_peer.py silent              reads requests, never answers
    python transport_peer.py bad-crc             answers the hello with a wrong CRC
    python transport_peer.py truncated           answers the hello with half a frame, then exits
    python transport_peer.py version             answers the hello in protocol version 99
    python transport_peer.py kill-after N CMD..  relays to the real server CMD, and kills it (SIGKILL)
                                                 when request N arrives, before it can answer
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import zlib

MAGIC = 0x50544748
VERSION = 1
HEADER = struct.Struct("<IHHIII")  # magic, version, type, sequence, length, crc
HELLO, ALLOC, COPY_IN, COPY_OUT, INVOKE, WAIT, RESET, ERROR, REPLY = 1, 2, 3, 4, 5, 6, 7, 0x7F, 0x80

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


class Client:
    """Requests to a real device server over a pair of binary streams."""

    def __init__(self, reader, writer):
        self.reader, self.writer, self.sequence = reader, writer, 0

    def send(self, data: bytes) -> None:
        self.writer.write(data)
        self.writer.flush()

    def call(self, kind: int, payload: bytes = b"") -> tuple[int, bytes]:
        """(status, results or reason) of one request."""
        self.sequence += 1
        self.send(frame(kind, self.sequence, payload))
        _, reply_kind, sequence, body = read_frame(self.reader)
        assert (reply_kind, sequence) == (REPLY | kind, self.sequence), (reply_kind, sequence)
        (status,) = struct.unpack("<i", body[:4])
        return status, body[4:]

    def hello(self) -> tuple[int, int, int]:
        """(version, memory_size, num_programs) the server reports."""
        status, body = self.call(HELLO, struct.pack("<I", VERSION) + b"test")
        assert status == HG_OK
        return struct.unpack("<IQI", body)


def _serve_fault(mode: str) -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    _, _, sequence, _ = read_frame(stdin)
    hello = struct.pack("<iIQI", HG_OK, VERSION, 0, 0)
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
    stdout.flush()
    if mode != "truncated":
        time.sleep(3600)  # keep the stream open: the client must notice by itself


def _relay_then_kill(requests: int, command: list[str]) -> None:
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    for count in range(1, requests + 1):
        head = read_exact(stdin, HEADER.size)
        request = head + read_exact(stdin, HEADER.unpack(head)[4])
        if count == requests:
            os.kill(server.pid, signal.SIGKILL)  # the request arrives; the server dies before answering
            server.wait()
            return
        server.stdin.write(request)
        server.stdin.flush()
        head = read_exact(server.stdout, HEADER.size)
        stdout.write(head + read_exact(server.stdout, HEADER.unpack(head)[4]))
        stdout.flush()


if __name__ == "__main__":
    if sys.argv[1] == "kill-after":
        _relay_then_kill(int(sys.argv[2]), sys.argv[3:])
    else:
        _serve_fault(sys.argv[1])
