"""Which compiler, flags and launcher build each target, in each of the two builds.

- The **native** build compiles every target with this machine's `cc`, whatever its kind, so the
  whole platform runs in one process (simulation, verify, bench, tests). Only it may get
  `-march=native`, and only it gets sanitizers (cross toolchains ship no static sanitizer runtimes).
- The **board** build compiles each target with its own toolchain (kind defaults, overridden per
  target in the platform file): `cc`, `ar`, `cflags`, `ldflags`, `sysroot` (→ `--sysroot=`),
  `launcher` (ccache, sccache or distcc, prefixed to every compile command).

`missing_tools` finds what the board build (or an emulated run) needs and this machine lacks, with
the Debian package that provides it, so the pipeline can refuse before generating anything.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from hetgen.build.vector_unit import vector_cflags, vector_emulator
from hetgen.errors import HetgenError
from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.model import Platform, Role, Target, Toolchain

WARNINGS = ("-Wall", "-Wextra")
COMMON_CFLAGS = ("-std=c11", "-fno-math-errno")
NATIVE_CC = "cc"
NATIVE_AR = "ar"
# Kind attributes that switch on an ISA extension the board compiler must target; the platform's
# own cflags come after, so a board's -mcpu still wins (hetgen/ops/_float16.py for fp16).
ATTRIBUTE_CFLAGS = {"fp16": ("-march=armv8.2-a+fp16",)}
# Board programs are linked statically: they run on a board (or under qemu-user) with no search for
# the target's shared C library, so the emulator needs no `-L SYSROOT`.
BOARD_PROGRAM_LDFLAGS = ("-static",)

# The Debian package that installs a tool a toolchain names. Tools outside this table are reported
# without a package.
DEBIAN_PACKAGES = {
    "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu",
    "aarch64-linux-gnu-ar": "binutils-aarch64-linux-gnu",
    "riscv64-linux-gnu-gcc": "gcc-riscv64-linux-gnu",
    "riscv64-linux-gnu-ar": "binutils-riscv64-linux-gnu",
    "arm-none-eabi-gcc": "gcc-arm-none-eabi",
    "arm-none-eabi-ar": "binutils-arm-none-eabi",
    "x86_64-linux-gnu-gcc": "gcc-x86-64-linux-gnu",
    "x86_64-linux-gnu-ar": "binutils-x86-64-linux-gnu",
    "qemu-aarch64": "qemu-user",
    "qemu-riscv64": "qemu-user",
    "qemu-arm": "qemu-user",
    "qemu-system-arm": "qemu-system-arm",
    "ccache": "ccache",
    "distcc": "distcc",
    "sccache": "sccache",
    "cc": "gcc",
    "gcc": "gcc",
    "clang": "clang",
    "ar": "binutils",
}


@dataclass(frozen=True)
class BuildOptions:
    opt: tuple[str, ...] = ("-O3",)
    native_tuning: bool = True  # -march=native for the native build (never for the board build)
    sanitize: tuple[str, ...] = ()  # e.g. ("address", "undefined"); native build only
    werror: bool = False
    launcher: tuple[str, ...] = ()  # overrides every target's launcher (ccache, distcc), both builds
    extra_cflags: tuple[str, ...] = ()  # both builds


def native_toolchain(target: Target, options: BuildOptions) -> Toolchain:
    """This machine's compiler for every target; the platform's launcher still applies (it is a
    cache or a distributor, not a compiler)."""
    flags = [*COMMON_CFLAGS, "-fPIC", *options.opt, *WARNINGS]
    if options.native_tuning:
        flags.append("-march=native")
    if options.werror:
        flags.append("-Werror")
    ldflags: list[str] = ["-pthread"]  # the GEMM's worker pool (templates/runtime/hg_threads.c)
    if options.sanitize:
        sanitize = f"-fsanitize={','.join(options.sanitize)}"
        flags += [sanitize, "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
        ldflags.append(sanitize)
    flags += options.extra_cflags
    return Toolchain(
        cc=NATIVE_CC,
        cflags=tuple(flags),
        ldflags=tuple(ldflags),
        ar=NATIVE_AR,
        launcher=options.launcher or target.toolchain.launcher,
    )


def board_toolchain(target: Target, options: BuildOptions) -> Toolchain:
    """The target's own toolchain with hetgen's portable flags: no -march=native, no sanitizers.
    The platform's cflags come after hetgen's, so a board's `-O2` or `-mcpu` wins; the kind's vector
    unit is made effective in them and in the emulator (vector_unit.py)."""
    own = target.toolchain
    sysroot = (f"--sysroot={own.sysroot}",) if own.sysroot else ()
    flags = [*COMMON_CFLAGS, *options.opt, *WARNINGS]
    if options.werror:
        flags.append("-Werror")
    flags += [flag for attr, extra in ATTRIBUTE_CFLAGS.items() if target.attrs.get(attr) is True for flag in extra]
    flags += [*sysroot, *vector_cflags(target, own.cflags), *options.extra_cflags]
    return Toolchain(
        cc=own.cc,
        cflags=tuple(flags),
        ldflags=(*sysroot, *own.ldflags, *(() if is_bare_metal(target) else ("-pthread",))),
        ar=own.ar,
        launcher=options.launcher or own.launcher,
        sysroot=own.sysroot,
        triple=own.triple,
        emulator=vector_emulator(target, own.emulator),
    )


@dataclass(frozen=True)
class MissingTool:
    role: str  # "compiler", "archiver", "launcher", "emulator"
    tool: str
    targets: tuple[str, ...]  # the paths of the targets that need it

    @property
    def package(self) -> str:
        return DEBIAN_PACKAGES.get(self.tool.rsplit("/", 1)[-1], "")

    def line(self) -> str:
        where = f" (Debian package {self.package})" if self.package else ""
        return f"{self.role} {self.tool} of {', '.join(self.targets)} is not installed{where}"


def _needed(target: Target, options: BuildOptions, emulate: bool) -> list[tuple[str, str]]:
    toolchain = board_toolchain(target, options)
    tools = [("compiler", toolchain.cc), ("archiver", toolchain.ar)]
    if toolchain.launcher:
        tools.append(("launcher", toolchain.launcher[0]))
    if emulate and target.role is Role.CONTROLLER and toolchain.emulator:
        tools.append(("emulator", toolchain.emulator[0]))
    return tools


def missing_tools(platform: Platform, options: BuildOptions, emulate: bool = False) -> tuple[MissingTool, ...]:
    """Every tool the board build of `platform` (and, with `emulate`, its run under the kinds'
    emulators) needs that is not on PATH, once each with the targets that need it, in tree order.
    A composite builds nothing itself (its host and devices do)."""
    needed: dict[tuple[str, str], list[str]] = {}
    for target in platform.targets():
        if target.role is Role.COMPOSITE:
            continue
        for key in _needed(target, options, emulate):
            needed.setdefault(key, []).append(target.path_str)
    return tuple(
        MissingTool(role, tool, tuple(targets))
        for (role, tool), targets in needed.items()
        if shutil.which(tool) is None
    )


def require_tools(platform: Platform, options: BuildOptions, emulate: bool = False) -> None:
    """Refuse, naming each target, tool and package, when the board build cannot run here."""
    missing = missing_tools(platform, options, emulate)
    if not missing:
        return
    packages = sorted({tool.package for tool in missing if tool.package})
    install = f"install them (apt-get install -y {' '.join(packages)})" if packages else "install them"
    fallback = "" if emulate else ", or pass --native-only to build only the native simulation"
    lines = "\n".join(f"  {tool.line()}" for tool in missing)
    raise HetgenError(
        f"{platform.file}: the board build of platform {platform.name} needs tools this machine lacks:\n"
        f"{lines}\n{install}{fallback}"
    )
