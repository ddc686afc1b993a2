"""Run the board build: the cross-built root program under its kind's emulator (qemu-user), on
inputs written to a file, its outputs read back from a file.

`EmulatedModel` has the loaded model's interface (`inputs`, `outputs`, `run(feeds) -> outputs`), so
`hetgen verify --emulate` compares it with onnxruntime exactly as it compares the native library.

The file format is the board program's (templates/model/main.c.j2): the tensors raw, little-endian,
concatenated in the manifest's order, no header. A root whose co-processors are separate programs
(hetgen.json's `remote_devices`) reaches each one's device server over the transport, as a board
would: a pipe pair to the server started through its own emulator (`transport="pipe"`, the root
starts it), or TCP on loopback (`transport="tcp"`, the server started first, listening). The
traffic of the last run is in `transport_stats` (one entry per device).
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from hetgen.build.toolchain import DEBIAN_PACKAGES
from hetgen.errors import HetgenError
from hetgen.runtime.loader import MANIFEST, TensorInfo

DEFAULT_TIMEOUT_S = 300.0
TRANSPORTS = ("pipe", "tcp")


def _tensor(entry: dict) -> TensorInfo:
    return TensorInfo(entry["name"], tuple(entry["shape"]), np.dtype(entry["dtype"]))


def _little_endian(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("<")


class EmulatedModel:
    """The board build's root program, run once per `run` under the emulator its kind names."""

    def __init__(self, out_dir: Path, timeout_s: float = DEFAULT_TIMEOUT_S, transport: str = "pipe"):
        self.path = Path(out_dir)
        manifest_path = self.path / MANIFEST
        if not manifest_path.is_file():
            raise HetgenError(
                f"{out_dir}: not a hetgen project (no {MANIFEST}); run `hetgen PLATFORM MODEL -o {out_dir}` first"
            )
        self.manifest = json.loads(manifest_path.read_text())
        self.inputs = tuple(_tensor(t) for t in self.manifest["inputs"])
        self.outputs = tuple(_tensor(t) for t in self.manifest["outputs"])
        self.timeout_s = timeout_s
        if transport not in TRANSPORTS:
            raise HetgenError(f"transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
        self.transport = transport
        self.program = self._programs()
        self.command = (*self._emulator(self.program), str(self.path / self.program["path"]))
        # Each co-processor's server: (device name, the command that runs it on this machine).
        self.servers = tuple(
            (device["name"], (*self._emulator(server), str(self.path / server["path"])))
            for device, server in self._servers()
        )
        self.transport_stats: list[dict] = []

    def _programs(self) -> dict:
        """The root program. (The two-process case — a co-processor's server under its own emulator —
        adds its server here.)"""
        board = self.manifest.get("board")
        if board is None:
            raise HetgenError(
                f"{self.path}: built with --native-only, so it has no board build to emulate; build it again without --native-only"
            )
        root = next((p for p in board["programs"] if p["kind"] == "root"), None)
        if root is None:
            notes = "; ".join(board["notes"]) or "the board build has no root program"
            raise HetgenError(f"{self.path}: --emulate needs the board's root program, and there is none: {notes}")
        if not (self.path / root["path"]).is_file():
            raise HetgenError(
                f"{self.path / root['path']}: the board program is not built; run `ninja -C {self.path} board`"
            )
        return root

    def _servers(self) -> list[tuple[dict, dict]]:
        """Each remote device with its server program (both from hetgen.json), built."""
        programs = {p["name"]: p for p in self.manifest["board"]["programs"]}
        found = []
        for device in self.manifest.get("remote_devices", []):
            server = programs.get(device["server"])
            if server is None or not (self.path / server["path"]).is_file():
                raise HetgenError(
                    f"{self.path}: the device server of {device['target']} ({device['server']}) is not built; "
                    f"run `ninja -C {self.path} board`"
                )
            found.append((device, server))
        return found

    def _emulator(self, program: dict) -> tuple[str, ...]:
        emulator = program["emulator"]
        if not emulator:
            return ()  # built for this machine
        if shutil.which(emulator[0]) is None:
            package = DEBIAN_PACKAGES.get(emulator[0])
            install = f"; install it (apt-get install -y {package})" if package else ""
            raise HetgenError(
                f"{self.path}: the emulator {emulator[0]} of target {program['target']} is not installed{install}"
            )
        return tuple(emulator)

    def run(self, feeds: dict[str, np.ndarray], runs: int = 1) -> dict[str, np.ndarray]:
        with tempfile.TemporaryDirectory(prefix="hetgen-emulate-") as folder:
            inputs, outputs = Path(folder) / "in.bin", Path(folder) / "out.bin"
            stats = Path(folder) / "transport.jsonl"
            inputs.write_bytes(self._input_bytes(feeds))
            listening = []
            try:
                devices = []
                for name, server in self.servers:
                    if self.transport == "pipe":
                        devices += ["--device", f"{name}=exec:{shlex.join(server)}"]
                    else:
                        process, port = self._start_listening(name, server)
                        listening.append(process)
                        devices += ["--device", f"{name}=tcp:127.0.0.1:{port}"]
                command = [*self.command, *devices, str(inputs), str(outputs), *([str(runs)] if runs != 1 else [])]
                self._run_program(command, {"HG_TRANSPORT_STATS": str(stats)} if self.servers else {})
            finally:
                for process in listening:
                    process.kill()
                    process.wait()
            self.transport_stats = (
                [json.loads(line) for line in stats.read_text().splitlines()] if stats.is_file() else []
            )
            return self._read_outputs(outputs)

    def _start_listening(self, name: str, server: tuple[str, ...]):
        """A device server listening on a free loopback port, and the port it announced."""
        process = subprocess.Popen(
            [*server, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        ready, _, _ = select.select([process.stdout], [], [], 60)
        line = process.stdout.readline() if ready else ""
        found = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
        if found is None:
            process.kill()
            detail = (process.stderr.read() or line).strip()[-2000:]
            raise HetgenError(f"the device server of {name} did not start listening: {shlex.join(server)}\n{detail}")
        return process, int(found.group(1))

    def _input_bytes(self, feeds: dict[str, np.ndarray]) -> bytes:
        parts = []
        for info in self.inputs:
            if info.name not in feeds:
                raise HetgenError(f"input {info.name!r} is missing; the model takes {', '.join(map(str, self.inputs))}")
            array = np.asarray(feeds[info.name])
            if array.shape != info.shape:
                raise HetgenError(
                    f"input {info.name!r} has shape {array.shape}; the project was built for {info.shape}"
                )
            parts.append(np.ascontiguousarray(array, dtype=_little_endian(info.dtype)).tobytes())
        return b"".join(parts)

    def _run_program(self, command: list[str], env: dict[str, str]) -> None:
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=self.timeout_s, env={**os.environ, **env}
            )
        except subprocess.TimeoutExpired:
            raise HetgenError(
                f"{command[0]}: the board program ran past {self.timeout_s:g} s and was stopped"
            ) from None
        except OSError as error:
            raise HetgenError(f"cannot start {command[0]}: {error.strerror}") from None
        if result.returncode != 0:
            detail = result.stderr.strip()[-2000:] or "(nothing on stderr)"
            raise HetgenError(f"the board program failed (exit {result.returncode}): {' '.join(command)}\n{detail}")

    def _read_outputs(self, path: Path) -> dict[str, np.ndarray]:
        data = path.read_bytes() if path.is_file() else b""
        expected = sum(int(np.prod(info.shape, dtype=np.int64)) * info.dtype.itemsize for info in self.outputs)
        if len(data) != expected:
            raise HetgenError(f"the board program wrote {len(data)} bytes of outputs; expected {expected}")
        outputs, offset = {}, 0
        for info in self.outputs:
            count = int(np.prod(info.shape, dtype=np.int64))
            array = np.frombuffer(data, dtype=_little_endian(info.dtype), count=count, offset=offset)
            outputs[info.name] = array.astype(info.dtype).reshape(info.shape)
            offset += count * info.dtype.itemsize
        return outputs
