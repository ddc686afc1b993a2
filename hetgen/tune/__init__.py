"""`hetgen tune PLATFORM [--target PATH] [--out FILE]`: block sizes and cost figures measured here.

1. The GEMM's cache blocks: benchmark products compiled with candidate blocks (search.py,
   measure.py), the fastest kept, written as `options: {tuning: {mc, kc, nc}}`: the generated
   runtime/hg_gemm_config.h and every kernel's workspace follow them.
2. The cost model's figures of the CPU: generated convolution and matmul kernels timed with those
   blocks, a copy's bandwidth (calibrate.py), written as the target's `figures:` so `hetgen explain`
   prices it with measured numbers.

`hetgen tune PLATFORM --on HOST:PORT --built DIR` times on the target instead: the board's device
server of the generated project DIR runs its own programs and reports its own clock's times
(remote.py), and the served co-processor's figures are written back.

Only a CPU this machine runs natively can be tuned here: timing a cross target under qemu-user measures
the emulator, not the core, so such a target is refused (tune it by running `hetgen tune` on the
board, with the board's core as a `native` target). Entry point: `tune(...) -> TuneResult`.
"""

from __future__ import annotations

import platform as host
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hetgen.codegen.manifest import read_manifest
from hetgen.errors import HetgenError
from hetgen.ops._gemm_plan import GemmBlocks
from hetgen.platform.loader import load_platform_text, read_platform_text
from hetgen.platform.model import Platform, Role, Target
from hetgen.platform.search_path import find_platform
from hetgen.platform.tuning import memory_mode
from hetgen.tune import calibrate, overlay, remote, search
from hetgen.tune.measure import Bench

# a toolchain triple's first word, as platform.machine() names the same architecture
MACHINES = {"x86_64": ("x86_64", "amd64"), "aarch64": ("aarch64", "arm64"), "riscv64": ("riscv64",)}


@dataclass(frozen=True)
class TuneResult:
    target: str  # the tuned CPU's path
    blocks: GemmBlocks
    trials: tuple[search.Trial, ...]
    fma_gflops: float  # the core's peak, for reference
    calibration: calibrate.Calibration
    text: str  # the tuned platform file


def tune(
    spec: str | Path,
    target_path: str | None = None,
    out: Path | None = None,
    quick: bool = False,
    search_path: Sequence[str] = (),
    progress: Callable[[str], None] = lambda line: None,
) -> TuneResult:
    source = find_platform(spec, search_path)
    text = read_platform_text(source)
    platform = load_platform_text(text, file=str(source))
    target = tuned_target(platform, target_path)
    plan = search.QUICK if quick else search.FULL
    with tempfile.TemporaryDirectory(prefix="hetgen-tune-") as tmp:
        benches: dict[GemmBlocks, Bench] = {}

        def score(blocks: GemmBlocks) -> float:
            if blocks not in benches:
                benches[blocks] = Bench(target, blocks, Path(tmp))
            seconds = sum(benches[blocks].gemm_seconds(shape, plan.repeats) for shape in plan.shapes)
            flops = sum(shape.flops for shape in plan.shapes)
            progress(f"  mc {blocks.mc:4d} kc {blocks.kc:4d} nc {blocks.nc:4d}: {flops / seconds / 1e9:6.1f} GFLOP/s")
            return seconds

        progress(
            f"{target.path_str}: GEMM cache blocks ({len(plan.shapes)} products, best of {plan.repeats} runs,"
            f" {plan.rounds} rounds)"
        )
        blocks, trials = search.search(plan, score)
        bench = benches[blocks]
        fma = bench.peak_gflops(runs=20 if quick else 200)
        copy = bench.copy_gbps(nbytes=(8 if quick else 64) << 20, repeats=3 if quick else 7)
    progress(f"{target.path_str}: FMA peak {fma:.1f} GFLOP/s, copy {copy:.1f} GB/s; timing generated kernels")
    measured = calibrate.calibrate(target, blocks, memory_mode(platform), copy, quick)
    destination = out if out is not None else source.with_name(f"{source.stem}-tuned.yaml")
    document = overlay.tuned_document(text, source, destination, target.path, blocks, measured.figures)
    header = [
        f"{platform.name}, tuned by `hetgen tune` on {host.machine()} for {target.path_str}:",
        f"  GEMM cache blocks mc {blocks.mc}, kc {blocks.kc}, nc {blocks.nc} (fastest of {len(trials)} measured)",
        "  generated kernels: "
        + ", ".join(f"{name} {rate:.1f} GFLOP/s" for name, rate in measured.rates)
        + f"; FMA peak {fma:.1f} GFLOP/s; copy {copy:.1f} GB/s",
        f"  figures: peak_gflops = {measured.measured_gflops:.1f} GFLOP/s measured / pattern efficiency "
        f"{measured.efficiency:g}; bandwidth_gbps = the copy's",
    ]
    tuned = overlay.tuned_text(document, header)
    load_platform_text(tuned, file=str(destination), base_dir=destination.parent)  # what we write loads
    return TuneResult(target.path_str, blocks, trials, fma, measured, tuned)


@dataclass(frozen=True)
class RemoteTuneResult:
    timing: remote.RemoteTiming
    estimate_s: float  # what the cost model estimated for the programs timed
    figures: dict[str, float]  # written on timing.target
    text: str  # the tuned platform file


def tune_on(
    spec: str | Path,
    address: str,
    built: Path,
    key_file: Path | None = None,
    out: Path | None = None,
    repeats: int = 20,
    search_path: Sequence[str] = (),
) -> RemoteTuneResult:
    """Time the co-processor's programs on the device server at `address` (built from the generated
    project `built`, key: `key_file`, else the board build's board/transport.key) and write its
    figures back into the platform `spec`."""
    remote.parse_address(address)
    source = find_platform(spec, search_path)
    text = read_platform_text(source)
    platform = load_platform_text(text, file=str(source))
    manifest = read_manifest(built)
    if not manifest.remote_devices:
        raise HetgenError(f"{built}: this generated project has no co-processor behind a device server to tune")
    if len(manifest.remote_devices) > 1:
        raise HetgenError(f"{built}: tuning on the target takes a project with one co-processor")
    (device,) = manifest.remote_devices
    targets = {t.path_str: t for t in platform.targets()}
    if device.target not in targets:
        raise HetgenError(f"{built}: its co-processor {device.target} is not a target of {source}")
    key_path = key_file if key_file is not None else built / "board" / "transport.key"
    try:
        key = key_path.read_bytes()
    except OSError as error:
        raise HetgenError(f"the transport key {key_path}: {error.strerror}; pass --key FILE") from None
    timing = remote.time_remote(address, key, bytes.fromhex(device.plan_hash), device.name, device.target, repeats)
    folder = device.target.rsplit("/", 1)[0] + "/"
    estimate = 1e-6 * sum(e.estimate_us for e in manifest.estimates if e.target.startswith(folder))
    if estimate <= 0 or timing.total <= 0:
        raise HetgenError(f"{built}: no estimate or no measured time for {device.target}'s programs")
    target = targets[device.target]
    figures = {"peak_gflops": float(f"{target.figures.peak_gflops * estimate / timing.total:.4g}")}
    destination = out if out is not None else source.with_name(f"{source.stem}-tuned.yaml")
    document = overlay.tuned_document(text, source, destination, target.path, None, figures)
    runs = ", ".join(f"program {i}: {s * 1e6:.1f} us" for i, s in enumerate(timing.seconds))
    header = [
        f"{platform.name}, tuned by `hetgen tune --on {address}` for {device.target} (device {device.name}):",
        f"  measured by the device server's clock, fastest of {repeats} runs: {runs}",
        f"  estimated {estimate * 1e6:.1f} us, measured {timing.total * 1e6:.1f} us: peak_gflops "
        f"{target.figures.peak_gflops:g} -> {figures['peak_gflops']:g}",
    ]
    tuned = overlay.tuned_text(document, header)
    load_platform_text(tuned, file=str(destination), base_dir=destination.parent)  # what we write loads
    return RemoteTuneResult(timing, estimate, figures, tuned)


def refuse_emulated(platform_spec: str | Path, search_path: Sequence[str] = ()) -> None:
    """`hetgen tune --emulate`: always refused, naming the emulator that would run the board's code."""
    source = find_platform(platform_spec, search_path)
    platform = load_platform_text(read_platform_text(source), file=str(source))
    emulators = sorted(
        {
            f"{t.path_str} under {t.toolchain.emulator[0]}"
            for t in platform.targets()
            if t.role is Role.CONTROLLER and t.toolchain.emulator
        }
    )
    under = f" ({'; '.join(emulators)})" if emulators else ""
    raise HetgenError(
        f"hetgen tune --emulate: the board build would run under an emulator{under}, and emulated time is "
        "not the board's. Start the device server on the board (SERVER --key FILE --listen ADDR:PORT "
        "--allow-remote) and run `hetgen tune PLATFORM --on ADDR:PORT --built DIR`"
    )


def tuned_target(platform: Platform, path: str | None) -> Target:
    """The CPU to tune: `path` (the root's name may be left out), else the root's controller;
    refused unless this machine runs it natively."""
    controllers = {t.path_str: t for t in platform.targets() if t.role is Role.CONTROLLER}
    if path is None:
        target = platform.root.controller()
    else:
        full = path if path in controllers else f"{platform.root.name}/{path}"
        if full not in controllers:
            raise HetgenError(
                f"{platform.file}: --target {path} is not a CPU of this platform; CPUs: {', '.join(controllers)}"
            )
        target = controllers[full]
    triple = target.toolchain.triple
    machine = host.machine().lower()
    if triple and machine not in MACHINES.get(triple.split("-")[0], (triple.split("-")[0],)):
        raise HetgenError(
            f"{platform.file}: {target.path_str} is a {target.kind.name} target ({triple}) and this machine is "
            f"{machine}: timing it under qemu-user would measure the emulator, not the core. Run `hetgen tune` on "
            "the board itself, with its core as a `native` target, and copy the `tuning:` and `figures:` it writes"
        )
    return target
