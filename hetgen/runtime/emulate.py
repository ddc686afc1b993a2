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

A bare-metal root (a Cortex-M ELF, hetgen.json's `semihosting`) runs under a system emulator
(`qemu-system-arm -M BOARD`) instead: its command line and files reach it through semihosting
(`semihosting_command`), and what it prints after its runs (ticks, stack, simulated devices'
counters) is in `board_report`.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from hetgen.abi import BOARD_COMMAND_LINE
from hetgen.bounded import trimmed
from hetgen.build.toolchain import DEBIAN_PACKAGES
from hetgen.codegen.manifest import RemoteDeviceEntry, read_manifest
from hetgen.errors import HetgenError
from hetgen.names import terminal_text
from hetgen.runtime.loader import checked_inputs, tensor_info

DEFAULT_TIMEOUT_S = 300.0
TRANSPORTS = ("pipe", "tcp")


def _little_endian(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("<")


def _qemu_option_value(text: str) -> str:
    return text.replace(",", ",,")  # qemu's option syntax: a comma inside a value is doubled


UART_SERVER_START_S = 30.0


def _stop(process: subprocess.Popen) -> None:
    """End a server: SIGTERM (qemu exits cleanly on it), then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait()


def _check_key_mode(key: Path) -> None:
    """A bare-metal server reads its key through semihosting, which cannot see the file's mode:
    the host that starts it refuses a key others may read or write, as a hosted server does."""
    mode = key.stat().st_mode & 0o777
    if mode & 0o077:
        raise HetgenError(f"{key}: the transport key may be read or written by others (mode {mode:03o}): chmod 600 it")


def semihosting_command(emulator_and_elf: tuple[str, ...], name: str, arguments: list[str]) -> list[str]:
    """A bare-metal ELF under a system emulator (qemu-system-arm -M BOARD): its command line reaches
    the program through semihosting (SYS_GET_CMDLINE), files are the host's (target=native)."""
    *emulator, elf = emulator_and_elf
    spaced = [argument for argument in arguments if any(c.isspace() for c in argument)]
    if spaced:
        raise HetgenError(
            f"{spaced[0]}: a bare-metal program's command line is split at spaces (semihosting gives it one "
            "string); use paths without spaces (for verify --emulate: a TMPDIR without spaces)"
        )
    line = " ".join((name, *arguments))
    if len(line.encode()) >= BOARD_COMMAND_LINE:
        raise HetgenError(
            f"a bare-metal program's command line of {len(line.encode())} bytes ({line!r}); its buffer holds "
            f"{BOARD_COMMAND_LINE - 1} (hetgen/abi.py BOARD_COMMAND_LINE): use shorter paths (a shorter TMPDIR)"
        )
    config = ",".join(["enable=on", "target=native", *(f"arg={_qemu_option_value(a)}" for a in (name, *arguments))])
    return [*emulator, "-nographic", "-monitor", "none", "-semihosting-config", config, "-kernel", elf]


BOARD_REPORT = re.compile(r"^(hg_board|hg_device): ((?:\w+=\d+ ?)+)$", re.MULTILINE)


def board_report(stdout: str) -> dict:
    """What a bare-metal program prints after its runs (templates/baremetal/main.c.j2): its
    `hg_board: ticks=T runs=N stack=S` line, and under "devices" each simulated device's counters."""
    report: dict = {}
    for what, fields in BOARD_REPORT.findall(stdout):
        values = {key: int(value) for key, value in (item.split("=") for item in fields.split())}
        if what == "hg_board":
            report.update(values)
        else:
            report.setdefault("devices", []).append(values)
    return report


class EmulatedModel:
    """The board build's root program, run once per `run` under the emulator its kind names."""

    def __init__(self, out_dir: Path, timeout_s: float = DEFAULT_TIMEOUT_S, transport: str = "pipe"):
        self.path = Path(out_dir)
        self.manifest = read_manifest(self.path)
        self.inputs = tuple(tensor_info(t) for t in self.manifest.inputs)
        self.outputs = tuple(tensor_info(t) for t in self.manifest.outputs)
        self.timeout_s = timeout_s
        if transport not in TRANSPORTS:
            raise HetgenError(f"transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
        self.transport = transport
        self.program = self._programs()
        self.command = (*self._emulator(self.program), str(self.path / self.program["path"]))
        # Each co-processor's server: (device name, the command that runs it on this machine).
        self.key = self._transport_key() if self.manifest.remote_devices else None
        key = ("--key", str(self.key)) if self.key else ()
        self.servers = tuple(
            (device.name, (*self._emulator(server), str(self.path / server["path"]), *key))
            for device, server in self._servers()
        )
        # Bare-metal co-processors' servers (hetgen/codegen/coproc.py): an ELF under a system emulator
        # that serves its UART, which the emulator connects to a loopback socket.
        self.uart_servers = {device.name: server for device, server in self._servers() if server.get("semihosting")}
        if self.uart_servers:
            _check_key_mode(self.key)
        self.key_options = key
        # Servers run under an emulator refuse to time their programs (`hetgen tune --on`, hg_server.h).
        emulated = any(self._emulator(server) for _, server in self._servers())
        self.server_env = {"HG_EMULATED": "1"} if emulated else {}
        self.transport_stats: list[dict] = []
        # A bare-metal ELF runs under a system emulator and reports its ticks and stack (hg_board.h).
        self.board_report: dict = {}

    def _programs(self) -> dict:
        """The root program (its co-processors' servers: `_servers`)."""
        board = self.manifest.board
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

    def _transport_key(self) -> Path:
        """The build's transport key (board/transport.key), which both ends of the transport read."""
        key = self.path / self.manifest.board.get("transport_key", "board/transport.key")
        if not key.is_file():
            raise HetgenError(f"{key}: the board build's transport key is missing; run `ninja -C {self.path} board`")
        return key

    def _servers(self) -> list[tuple[RemoteDeviceEntry, dict]]:
        """Each remote device with its server program (both from hetgen.json), built."""
        programs = {p["name"]: p for p in self.manifest.board["programs"]}
        found = []
        for device in self.manifest.remote_devices:
            server = programs.get(device.server)
            if server is None or not (self.path / server["path"]).is_file():
                raise HetgenError(
                    f"{self.path}: the device server of {device.target} ({device.server}) is not built; "
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
                    if name in self.uart_servers:
                        process, port = self._start_uart_server(name, self.uart_servers[name], Path(folder))
                        listening.append(process)
                        devices += ["--device", f"{name}=tcp:127.0.0.1:{port}"]
                    elif self.transport == "pipe":
                        devices += ["--device", f"{name}=exec:{shlex.join(server)}"]
                    else:
                        process, port = self._start_listening(name, server)
                        listening.append(process)
                        devices += ["--device", f"{name}=tcp:127.0.0.1:{port}"]
                arguments = [str(inputs), str(outputs), *([str(runs)] if runs != 1 else [])]
                if self.program.get("semihosting"):
                    command = semihosting_command(self.command, self.program["name"], arguments)
                else:
                    command = [*self.command, *self.key_options, *devices, *arguments]
                env = {"HG_TRANSPORT_STATS": str(stats), **self.server_env} if self.servers else {}
                stdout = self._run_program(command, env)
                self.board_report = board_report(stdout)
            finally:
                for process in listening:
                    _stop(process)
            self.transport_stats = (
                [json.loads(line) for line in stats.read_text().splitlines()] if stats.is_file() else []
            )
            return trimmed(self._read_outputs(outputs))  # run-time lengths (hetgen/bounded.py)

    def _start_listening(self, name: str, server: tuple[str, ...]):
        """A device server listening on a free loopback port, and the port it announced."""
        process = subprocess.Popen(
            [*server, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **self.server_env},
        )
        ready, _, _ = select.select([process.stdout], [], [], 60)
        line = process.stdout.readline() if ready else ""
        found = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
        if found is None:
            process.kill()
            detail = terminal_text((process.stderr.read() or line).strip()[-2000:])
            raise HetgenError(f"the device server of {name} did not start listening: {shlex.join(server)}\n{detail}")
        return process, int(found.group(1))

    def _start_uart_server(self, name: str, server: dict, folder: Path):
        """A bare-metal server under its system emulator, its UART on a loopback socket that this
        process opens (and hands to the emulator: no port can be taken meanwhile), once it says it
        serves; and the port. Its command line and key come through semihosting, relative to the
        project (the emulator runs there)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(4)
            port = listener.getsockname()[1]
            key = os.path.relpath(self.key, self.path)
            command = [
                *semihosting_command(
                    (*self._emulator(server), server["path"]), server["name"], ["--key", key, "--emulated"]
                ),
                "-chardev",
                f"socket,id=hg_uart,fd={listener.fileno()},server=on,wait=off",
                "-serial",
                "chardev:hg_uart",
            ]
            log = folder / f"uart-server-{len(list(folder.glob('uart-server-*')))}.log"
            with log.open("w") as output:
                process = subprocess.Popen(
                    command, cwd=self.path, stdout=output, stderr=subprocess.STDOUT, pass_fds=(listener.fileno(),)
                )
        finally:
            listener.close()
        deadline = time.monotonic() + UART_SERVER_START_S
        while "serving on the UART" not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                _stop(process)
                detail = terminal_text(log.read_text(errors="replace").strip()[-2000:]) or "(no output)"
                raise HetgenError(f"the device server of {name} did not start serving: {shlex.join(command)}\n{detail}")
            time.sleep(0.02)
        return process, port

    def _input_bytes(self, feeds: dict[str, np.ndarray]) -> bytes:
        arrays = checked_inputs(self.inputs, feeds)  # the same rules as the native library's run()
        return b"".join(array.astype(_little_endian(info.dtype)).tobytes() for info, array in zip(self.inputs, arrays))

    def _run_program(self, command: list[str], env: dict[str, str]) -> str:
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
            detail = terminal_text(result.stderr.strip()[-2000:]) or "(nothing on stderr)"
            raise HetgenError(f"the board program failed (exit {result.returncode}): {' '.join(command)}\n{detail}")
        return result.stdout

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
