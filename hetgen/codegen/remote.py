"""The board build's out-of-process transport: the root reaches each co-processor over a byte stream.

For the root, `remote_devices.c` defines each co-processor child's `<prefix>_device` and
`<prefix>_device_reset` as a remote device (templates/runtime/hg_remote.c), so the root's model.c is
the same file in the native build (where those come from the child's in-process library) and the
board build. For each such co-processor, `server_main.c` is its device server, a board program that
runs the co-processor's runtime (and the simulated devices under it) behind the transport.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from hetgen.codegen import coproc
from hetgen.codegen.coproc import server_elf
from hetgen.codegen.render import render
from hetgen.lower.program import Lowered, Program, ProgramRole
from hetgen.names import c_comment, c_string
from hetgen.platform.baremetal import is_bare_metal

# The runtime sources each side of the transport needs, compiled only in the board build.
CLIENT_RUNTIME = ("runtime/hg_transport.c", "runtime/hg_auth.c", "runtime/hg_remote.c")
SERVER_RUNTIME = ("runtime/hg_transport.c", "runtime/hg_auth.c", "runtime/hg_server.c")
RUNTIME_SOURCES = ("hg_auth.c", "hg_remote.c", "hg_server.c", "hg_transport.c")


def plan_hash(files: Iterable[tuple[str, bytes]]) -> bytes:
    """SHA-256 of the generated project the two ends of the transport are built from: every file's
    path and bytes, in path order, each length-prefixed (so no two projects hash alike by moving
    bytes from one file to the next). The hello checks it; a server of another generation is refused."""
    digest = hashlib.sha256(b"hetgen plan hash 1\0")
    for name, content in sorted(files):
        path = name.encode()
        digest.update(len(path).to_bytes(8, "little") + path + len(content).to_bytes(8, "little"))
        digest.update(content)
    return digest.digest()


def c_bytes(data: bytes) -> str:
    """An initializer list of `data` for a C unsigned char array."""
    return ", ".join(f"0x{byte:02x}" for byte in data)


@dataclass(frozen=True)
class RemoteDevice:
    """A co-processor the root reaches over the transport."""

    program: str  # the co-processor program's target path, e.g. "soc/vdevice0/host"
    name: str  # its name for users (--device NAME=..., HG_DEVICE_<NAME>), e.g. "vdevice0"
    env_name: str
    prefix: str
    server: str  # the server program's file name
    memory_size: int
    num_programs: int
    # A bare-metal co-processor (a Cortex-M beside a hosted root): its server is an ELF serving the
    # transport on the board's UART (hetgen/codegen/coproc.py).
    bare_metal: bool = False


def device_env_name(name: str) -> str:
    """HG_DEVICE_<NAME>: the name upper-cased, every character but a letter or digit as '_'."""
    return "HG_DEVICE_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def server_name(prefix: str) -> str:
    return f"{prefix}_server"


def remote_devices(lowered: Lowered, prefixes: dict[str, str]) -> tuple[RemoteDevice, ...]:
    """The root's co-processor children, in the order of its devices."""
    root = lowered.root
    by_path = {program.target.path_str: program for program in lowered.programs}
    found = []
    for device_path, block in zip(root.devices, root.workspace.children, strict=True):
        child: Program = by_path[block.path]
        if child.role is not ProgramRole.COPROCESSOR:
            continue  # an accelerator under the root is simulated inside the root's own program
        if is_bare_metal(root.target):
            continue  # no OS, so no pipe or socket: a bare-metal root links its co-processor in-process or not at all
        bare_metal = is_bare_metal(child.target)  # served on its UART (hetgen/codegen/coproc.py)
        name = device_path.removeprefix(root.target.path_str + "/").replace("/", ".")
        prefix = prefixes[block.path]
        found.append(
            RemoteDevice(
                program=block.path,
                name=name,
                env_name=device_env_name(name),
                prefix=prefix,
                server=server_elf(prefix) if bare_metal else server_name(prefix),
                memory_size=child.memory.arena_size,
                num_programs=len(child.entries),
                bare_metal=bare_metal,
            )
        )
    return tuple(found)


def remote_devices_source(
    lowered: Lowered, remote: tuple[RemoteDevice, ...], prefixes: dict[str, str], project_hash: bytes
) -> str:
    """The root's remote_devices.c."""
    below = tuple(f"{device.program.rsplit('/', 1)[0]}/" for device in remote)
    remote_simulated = [
        {"path": c_comment(sim.path), "prefix": prefixes[sim.path]}
        for sim in lowered.simulated
        if any(sim.path.startswith(prefix) for prefix in below)
    ]
    return render(
        "model/remote_devices.c.j2",
        prefix=prefixes[lowered.root.target.path_str],
        PREFIX=prefixes[lowered.root.target.path_str].upper(),
        model_name=c_comment(lowered.model_name),
        target_path=c_comment(lowered.root.target.path_str),
        remote=[
            {
                "path": c_comment(device.program),
                "name": c_string(device.name),
                "env_name": device.env_name,
                "prefix": device.prefix,
                "header": f"{device.prefix}_device.h",
                "server": device.server,
                "memory_size": device.memory_size,
                "num_programs": device.num_programs,
            }
            for device in remote
        ],
        remote_simulated=remote_simulated,
        plan_hash=c_bytes(project_hash),
    )


def server_source(lowered: Lowered, device: RemoteDevice, project_hash: bytes) -> str:
    """A co-processor's server_main.c (a bare-metal one's: hetgen/codegen/coproc.py)."""
    if device.bare_metal:
        target = next(p.target for p in lowered.programs if p.target.path_str == device.program)
        return coproc.server_source(target, device, lowered.model_name, c_bytes(project_hash))
    return render(
        "model/server_main.c.j2",
        prefix=device.prefix,
        PREFIX=device.prefix.upper(),
        header=f"{device.prefix}_device.h",
        model_name=c_comment(lowered.model_name),
        target_path=c_comment(device.program),
        name=c_string(device.program),
        device_name=c_string(device.name),
        memory_size=device.memory_size,
        num_programs=device.num_programs,
        plan_hash=c_bytes(project_hash),
    )
