"""`hetgen tune --on HOST:PORT`: timing on the target through the device transport, end to end with
a native device server over loopback (its programs timed by its own clock, the figures written
back), the server's validation of timing requests, and the refusals of emulated time."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import time

import pytest
import yaml

from hetgen.errors import HetgenError
from hetgen.platform.loader import load_platform_text
from hetgen.tune import remote, tune_on
from transport_peer import HG_ERR_ARGUMENT, INVOKE, Client, Refused
from transport_support import REPO, RUN_ENV, build_pair

DELAY_S = 0.2  # each timed run of the test server also sleeps this long: longer than the program runs
PLATFORM = REPO / "platforms/soc.yaml"


@pytest.fixture(scope="module")
def slow_pair(tmp_path_factory):
    """The soc's co-processor server, built so that every timed run takes DELAY_S more: what the
    server's own clock sees, which only the server's figures can show."""
    defines = (f"-DHG_TIME_TEST_DELAY_NS={int(DELAY_S * 1e9)}",)
    return build_pair(str(PLATFORM), REPO / "examples/resnet_tiny.onnx", tmp_path_factory.mktemp("tune"), defines)


class Listening:
    def __init__(self, pair, **env: str):
        self.process = subprocess.Popen(
            [pair.server, "--key", pair.key, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **RUN_ENV, **env},
        )
        found = re.fullmatch(r"listening on (127\.0\.0\.1:\d+)\n", self.process.stdout.readline())
        assert found, self.process.stderr.read()
        self.address = found.group(1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.process.kill()
        self.process.wait()


pytestmark = pytest.mark.cc


def test_the_figures_written_are_the_servers_measured_times(slow_pair, tmp_path):
    out = tmp_path / "soc-tuned.yaml"
    with Listening(slow_pair) as server:
        started = time.perf_counter()
        result = tune_on(PLATFORM, server.address, slow_pair.project, key_file=slow_pair.key, out=out, repeats=3)
        elapsed = time.perf_counter() - started
    timing = result.timing
    assert timing.target == "soc/vdevice0/host" and timing.device == "vdevice0"
    assert len(timing.seconds) == slow_pair.num_programs
    # Each program's fastest run includes the server-side sleep, and the four runs of each (a warm-up
    # and three) took no longer than the whole call from here.
    assert all(DELAY_S <= s < elapsed / 4 for s in timing.seconds), (timing.seconds, elapsed)
    platform = load_platform_text(PLATFORM.read_text(), file=str(PLATFORM))
    before = {t.path_str: t for t in platform.targets()}["soc/vdevice0/host"].figures.peak_gflops
    expected = float(f"{before * result.estimate_s / sum(timing.seconds):.4g}")
    assert result.figures == {"peak_gflops": expected}
    # The server's delay dominates: the model's estimate (microseconds) over milliseconds measured.
    assert expected < before * result.estimate_s / (DELAY_S * slow_pair.num_programs)
    # The tuned file loads, carries the figure on the co-processor and names where it was measured.
    tuned = load_platform_text(result.text, file=str(out))
    assert {t.path_str: t for t in tuned.targets()}["soc/vdevice0/host"].figures.peak_gflops == expected
    document = yaml.safe_load(result.text)
    assert document["target"]["devices"]["vdevice0"]["host"]["figures"] == {"peak_gflops": expected}
    assert f"--on {server.address}` for soc/vdevice0/host (device vdevice0)" in result.text.splitlines()[0]
    assert "tuning" not in (document.get("options") or {})  # the blocks are not measured here


def test_the_command_line_writes_the_tuned_file(slow_pair, tmp_path):
    out = tmp_path / "tuned.yaml"
    with Listening(slow_pair) as server:
        command = [sys.executable, "-m", "hetgen", "tune", str(PLATFORM), "--on", server.address]
        command += ["--built", str(slow_pair.project), "--key", str(slow_pair.key), "--repeats", "2", "--out", str(out)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout and "soc/vdevice0/host on 127.0.0.1:" in result.stderr
    assert "peak_gflops" in yaml.safe_load(out.read_text())["target"]["devices"]["vdevice0"]["host"]["figures"]


def test_an_emulated_server_refuses_to_time(slow_pair, tmp_path):
    with Listening(slow_pair, HG_EMULATED="1") as server:
        command = [sys.executable, "-m", "hetgen", "tune", str(PLATFORM), "--on", server.address]
        command += ["--built", str(slow_pair.project), "--key", str(slow_pair.key), "--out", str(tmp_path / "t.yaml")]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "refused to time program 0" in result.stderr and "emulated time is not the board's" in result.stderr
    assert not (tmp_path / "t.yaml").exists()


def test_timing_requests_are_validated(slow_pair):
    """Bad timing requests are refused with a reason and the session goes on; an unauthenticated peer
    cannot ask for one."""
    with Listening(slow_pair) as server:
        host, port = server.address.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as connection:
            stream = connection.makefile("rwb")
            client = Client(stream, stream, slow_pair.key.read_bytes(), slow_pair.plan_hash, slow_pair.device.encode())
            client.hello()
            for payload, reason in [
                (struct.pack("<I", 0), b"time takes 8 bytes of arguments"),
                (struct.pack("<III", 0, 1, 0), b"time takes 8 bytes of arguments"),
                (struct.pack("<II", 0, 0), b"time of 0 runs; from 1 to 256"),
                (struct.pack("<II", 0, 257), b"time of 257 runs; from 1 to 256"),
                (struct.pack("<II", 99, 1), b"time of program 99; the device has 1"),
            ]:
                assert client.call(remote.TIME, payload) == (HG_ERR_ARGUMENT, reason)
            status, body = client.call(remote.TIME, struct.pack("<II", 0, 2))
            assert status == 0 and struct.unpack("<III", body[:12]) == (1, 1, 2) and len(body) == 12 + 16
            assert all(ns >= DELAY_S * 1e9 for ns in struct.unpack("<2Q", body[12:]))
            assert client.call(INVOKE, struct.pack("<I", 0))[0] == 0  # the session goes on
        with socket.create_connection((host, int(port)), timeout=30) as connection:
            stream = connection.makefile("rwb")
            with pytest.raises(Refused, match="expected a hello"):
                Client(stream, stream).call(remote.TIME, struct.pack("<II", 0, 1))


def test_a_wrong_key_is_refused_before_any_timing(slow_pair, tmp_path):
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(b"\1" * 32)
    with Listening(slow_pair) as server:
        with pytest.raises(HetgenError, match="refused: authentication failed|does not hold the transport key"):
            tune_on(PLATFORM, server.address, slow_pair.project, key_file=wrong, repeats=1)
