"""Build a generated project's root program and co-processor server for this machine, with the
sanitizers, the way the board build pairs them (the root reaches its co-processor over the
transport), so the transport's tests run in seconds without cross compilers or qemu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import hetgen
from hetgen.runtime.reference import ort_session, random_inputs

REPO = Path(__file__).resolve().parent.parent
PEER = Path(__file__).resolve().parent / "transport_peer.py"
CFLAGS = ["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
TRANSPORT_SOURCES = {"hg_transport.c", "hg_auth.c", "hg_remote.c", "hg_server.c"}
# The example program frees nothing on its error paths; the fault tests are about the transport.
RUN_ENV = {"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"}


@dataclass(frozen=True)
class Pair:
    project: Path
    root: Path  # the root's example program, its co-processor a remote device
    server: Path  # the co-processor's device server
    device: str  # the remote device's name, e.g. "vdevice0"
    memory_size: int
    num_programs: int
    key: Path  # the transport key both programs read (--key), mode 0600
    plan_hash: bytes  # what each hello names (hetgen.json's remote_devices)


def write_key(path: Path, key: bytes | None = None) -> Path:
    """A transport key file as the board build writes one: random bytes, mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(os.urandom(32) if key is None else key)
    os.chmod(path, 0o600)
    return path


def _target_sources(project: Path, folder: str) -> list[str]:
    own = sorted((project / folder).glob("kernels/*.c"))
    return [str(path) for path in own] + [str(project / folder / "model.c"), str(project / folder / "weights.S")]


def build_pair(platform: str, model, out: Path, server_defines: tuple[str, ...] = ()) -> Pair:
    """Generate `model` on `platform` into `out` and compile both programs with gcc and sanitizers
    (the server with `server_defines` too, e.g. -DHG_TIME_TEST_DELAY_NS=N)."""
    project = hetgen.compile(platform, model, out, build=False)
    manifest = json.loads((project / "hetgen.json").read_text())
    targets = manifest["targets"]
    root = targets[0]["path"]
    coprocessors = [t for t in targets if t["role"] == "coprocessor"]
    assert len(coprocessors) == 1, "these tests pair one root with one co-processor"
    host = coprocessors[0]["path"]
    device_folder = host.rsplit("/", 1)[0]
    runtime = [str(p) for p in sorted((project / "runtime").glob("*.c")) if p.name not in TRANSPORT_SOURCES]
    below_root = [t["path"] for t in targets[1:] if not t["path"].startswith(device_folder + "/")]
    below_host = [t["path"] for t in targets if t["path"].startswith(device_folder + "/")]
    includes = ["-I", str(project / "runtime")]
    bin_dir = out / "test-bin"
    bin_dir.mkdir(exist_ok=True)
    root_sources = [
        str(project / root / "main.c"),
        str(project / root / "remote_devices.c"),
        str(project / "runtime/hg_transport.c"),
        str(project / "runtime/hg_auth.c"),
        str(project / "runtime/hg_remote.c"),
    ]
    for folder in [root, *below_root]:
        root_sources += _target_sources(project, folder)
        includes += ["-I", str(project / folder)]
    server_sources = [
        str(project / host / "server_main.c"),
        str(project / "runtime/hg_transport.c"),
        str(project / "runtime/hg_auth.c"),
        str(project / "runtime/hg_server.c"),
    ]
    server_includes = ["-I", str(project / "runtime")]
    for folder in below_host:
        server_sources += _target_sources(project, folder)
        server_includes += ["-I", str(project / folder)]
    root_exe, server_exe = bin_dir / "root", bin_dir / "server"
    compiles = [
        ["gcc", *CFLAGS, *SANITIZE, *includes, "-I", str(project / host), "-o", str(root_exe), *root_sources]
        + runtime
        + ["-lm"],
        ["gcc", *CFLAGS, *SANITIZE, *server_defines, *server_includes, "-o", str(server_exe), *server_sources]
        + runtime
        + ["-lm"],
    ]
    jobs = [subprocess.Popen(c, cwd=project, stderr=subprocess.PIPE, text=True) for c in compiles]
    for job in jobs:
        _, errors = job.communicate()
        assert job.returncode == 0, errors
    remote = (project / root / "remote_devices.c").read_text()
    memory = int(remote.split(".memory_size = ")[1].split("u")[0])
    programs = int(remote.split(".num_programs = ")[1].split("u")[0])
    name = remote.split('.name = "')[1].split('"')[0]
    (entry,) = manifest["remote_devices"]
    key = write_key(out / "transport.key")
    return Pair(project, root_exe, server_exe, name, memory, programs, key, bytes.fromhex(entry["plan_hash"]))


_PAIRS: dict[tuple[str, str], Pair] = {}


def shared_pair(
    tmp_path_factory, platform: str = "platforms/soc.yaml", model: str = "examples/resnet_tiny.onnx"
) -> Pair:
    """One build per test session, shared by the transport's test modules."""
    key = (platform, model)
    if key not in _PAIRS:
        _PAIRS[key] = build_pair(platform, REPO / model, tmp_path_factory.mktemp("pair"))
    return _PAIRS[key]


def write_inputs(project: Path, path: Path, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs as the example program reads them (raw, concatenated in order), by name."""
    manifest = json.loads((project / "hetgen.json").read_text())

    class Info:
        def __init__(self, spec):
            self.name, self.shape, self.dtype = spec["name"], tuple(spec["shape"]), np.dtype(spec["dtype"])

    feeds = random_inputs([Info(spec) for spec in manifest["inputs"]], seed)
    path.write_bytes(b"".join(feeds[spec["name"]].tobytes() for spec in manifest["inputs"]))
    return feeds


def read_outputs(project: Path, path: Path) -> dict[str, np.ndarray]:
    manifest = json.loads((project / "hetgen.json").read_text())
    data, offset, outputs = path.read_bytes(), 0, {}
    for spec in manifest["outputs"]:
        count = int(np.prod(spec["shape"], dtype=np.int64))
        outputs[spec["name"]] = np.frombuffer(data, spec["dtype"], count, offset).reshape(spec["shape"])
        offset += count * np.dtype(spec["dtype"]).itemsize
    assert offset == len(data)
    return outputs


def reference(project: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort_session(str(project / "model.onnx"))
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def peer_command(*arguments: str) -> str:
    """An exec: command line that runs the fake peer with this Python."""
    return " ".join([sys.executable, str(PEER), *arguments])
