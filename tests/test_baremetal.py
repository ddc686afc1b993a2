"""Bare metal: Cortex-M kinds, the MPS2-AN386 platform, an ELF with no heap, no stdio and no OS calls
that runs under qemu-system-arm with semihosting and matches onnxruntime, and a model too large for
the board refused with the numbers before anything is built."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

import hetgen
from hetgen.build.baremetal import image_sizes
from hetgen.models import mlp, tiny_cnn
from hetgen.platform.kinds import builtin_kinds
from hetgen.platform.loader import load_platform, load_platform_text
from hetgen.runtime.emulate import EmulatedModel, board_report, semihosting_command
from hetgen.runtime.verify import verify

REPO = Path(__file__).resolve().parent.parent
TOOLS = ("arm-none-eabi-gcc", "arm-none-eabi-nm", "qemu-system-arm")
FAST = {"opt": ("-O2",), "native_tuning": False}
EM_ARM = 40
KINDS = {  # kind: (-mcpu, -mfpu or None, -mfloat-abi)
    "cortex-m": ("cortex-m3", None, "soft"),
    "cortex-m4": ("cortex-m4", "fpv4-sp-d16", "hard"),
    "cortex-m7": ("cortex-m7", "fpv5-d16", "hard"),
    "cortex-m55": ("cortex-m55", None, "hard"),
}
# What a bare-metal image must not contain: the heap, stdio, files and the OS calls beneath them.
FORBIDDEN = re.compile(
    r"^(_?malloc|_?free|calloc|realloc|_malloc_r|_free_r|printf|fprintf|sprintf|puts|fopen|fread|fwrite|fclose|"
    r"_sbrk|_write|_read|_open|_close|_exit|_kill|_getpid|_fstat|_isatty|_lseek|abort|exit|__sfp|_impure_ptr)$"
)

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS),
    reason="needs gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm (the README's set-up installs them)",
)


def kind_platform(kind: str, tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / f"{kind}.yaml"
    path.write_text(f"name: mcu\ntarget: {{kind: {kind}, runtime: aot{extra}}}\n")
    return path


def symbols(elf: Path) -> dict[str, tuple[str, int]]:
    """Every symbol of the linked ELF: name -> (nm type letter, address)."""
    listing = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 3:
            found[parts[2]] = (parts[1], int(parts[0], 16))
        elif len(parts) == 2:  # undefined: no address
            found[parts[1]] = (parts[0], -1)
    return found


def elf_of(out: Path) -> Path:
    (program,) = json.loads((out / "hetgen.json").read_text())["board"]["programs"]
    return out / program["path"]


def assert_bare_metal_image(elf: Path) -> dict[str, tuple[str, int]]:
    assert elf.read_bytes()[:4] == b"\x7fELF" and struct.unpack("<H", elf.read_bytes()[18:20])[0] == EM_ARM
    found = symbols(elf)
    undefined = sorted(name for name, (kind, _) in found.items() if kind in "Uw" and not name.startswith("_"))
    assert undefined == [], undefined  # a static image resolves everything
    assert sorted(name for name in found if FORBIDDEN.match(name)) == []
    return found


def test_cortex_m_kinds_carry_their_flags_figures_and_memory(tmp_path):
    figures = {}
    for kind, (cpu, fpu, abi) in KINDS.items():
        target = load_platform(str(kind_platform(kind, tmp_path))).root
        flags = target.toolchain.cflags
        assert target.toolchain.cc == "arm-none-eabi-gcc" and target.toolchain.triple == "arm-none-eabi"
        assert f"-mcpu={cpu}" in flags and f"-mfloat-abi={abi}" in flags and "-mthumb" in flags
        assert (f"-mfpu={fpu}" in flags) if fpu else not any(f.startswith("-mfpu") for f in flags)
        assert target.runtime.value == "aot"
        assert {"flash_kib", "ram_kib", "flash_origin", "ram_origin", "stack_kib"} <= set(target.attrs)
        assert target.toolchain.emulator[0] == "qemu-system-arm"
        figures[kind] = target.figures.peak_gflops / target.attrs["clock_mhz"]
    # per clock: the M55's Helium lanes beat the M7's dual issue, which beats the M4
    assert figures["cortex-m55"] > figures["cortex-m7"] > figures["cortex-m4"]
    refines = load_platform_text("name: x\ntarget: {kind: cortex-m7, runtime: aot}\n").root.kind.parent
    assert refines == "cortex-m"
    # float multiply-adds contract to VFMA on every Cortex-M kind, the board catalogue's cores too:
    # under -std=c11 GCC leaves them apart otherwise (the cortex-m33 build had no VFMA at all)
    cortex_m = [k.name for k in builtin_kinds().values() if "cortex-m" in (k.name, k.parent)]
    assert {"cortex-m33", "cortex-m85"} <= set(cortex_m)
    assert [k for k in cortex_m if "-ffp-contract=fast" not in builtin_kinds()[k].toolchain.cflags] == []


def test_shipped_mcu_platform_is_the_mps2_an386():
    platform = load_platform(str(REPO / "platforms/mcu.yaml"))
    target = platform.root
    assert target.kind.name == "cortex-m4" and target.runtime.value == "aot"
    # qemu's mps2-an386 (`info mtree`): 4 MiB SSRAM1 at 0 for code, 4 MiB SSRAM2/3 at 0x20000000
    assert (target.attrs["flash_origin"], target.attrs["flash_kib"]) == (0, 4096)
    assert (target.attrs["ram_origin"], target.attrs["ram_kib"]) == (0x20000000, 4096)
    assert target.toolchain.emulator == ("qemu-system-arm", "-M", "mps2-an386")


@pytest.mark.external
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_builds_warning_free_with_no_heap_or_os_and_matches_onnxruntime(tmp_path, kind):
    """-Wall -Wextra -Werror for every Cortex-M kind; the ELF runs under its kind's qemu board."""
    out = hetgen.compile(kind_platform(kind, tmp_path), mlp(seed=3), out=tmp_path / "out", werror=True, **FAST)
    cpu = KINDS[kind][0]
    board = [c for c in json.loads((out / "compile_commands.json").read_text()) if c["output"].startswith("board/")]
    assert board and all(
        c["arguments"][0] == "arm-none-eabi-gcc"
        and {"-Wall", "-Wextra", "-Werror", f"-mcpu={cpu}"} <= set(c["arguments"])
        for c in board
    )
    assert_bare_metal_image(elf_of(out))
    errors = verify(out, seed=4, emulate=True)
    assert errors and all(e.ok for e in errors), errors


@pytest.fixture(scope="module")
def resnet_mcu(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mcu") / "resnet"
    result = subprocess.run(
        [sys.executable, "-m", "hetgen", "platforms/mcu.yaml", "examples/resnet_tiny.onnx", "-o", str(out), "--werror"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    (out / "cli.txt").write_text(result.stdout)
    return out


@pytest.mark.external
def test_mcu_image_keeps_weights_in_flash_and_the_arena_in_ram(resnet_mcu):
    elf = resnet_mcu / "board/bin/hg_mcu_main.elf"
    found = assert_bare_metal_image(elf)
    flash, ram = range(0, 4 << 20), range(0x20000000, 0x20000000 + (4 << 20))
    kind, address = found["hg_mcu_weights"]
    assert kind in "Rr" and address in flash  # const, read-only data, in flash
    kind, address = found["hg_mcu_static_workspace"]
    assert kind in "Bb" and address in ram  # one static buffer, zeroed at reset
    assert found["Reset_Handler"][1] in flash and found["_estack"][1] in ram
    script = (resnet_mcu / "mcu/link.ld").read_text()
    assert "ORIGIN = 0x00000000, LENGTH = 4194304" in script and "ORIGIN = 0x20000000, LENGTH = 4194304" in script
    assert (resnet_mcu / "board/bin/hg_mcu_main.map").is_file()
    # hetgen reports the image after the build: text/data/bss, flash and the peak RAM
    sizes = image_sizes(elf)
    nm_size = subprocess.run(["arm-none-eabi-size", str(elf)], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(word) for word in nm_size.splitlines()[1].split()[:3])
    assert (sizes.text, sizes.data, sizes.bss + sizes.stack) == (text, data, bss)
    manifest = json.loads((resnet_mcu / "hetgen.json").read_text())
    arena = manifest["targets"][0]["arena_size"]
    assert sizes.bss >= manifest["workspace_size"] >= arena > 0
    report = (resnet_mcu / "cli.txt").read_text()
    assert f"text {sizes.text} B, data {sizes.data} B, bss {sizes.bss} B" in report
    assert f"peak RAM {sizes.peak_ram} of 4194304 B" in report and f"the arena {arena}" in report


@pytest.mark.external
def test_mcu_resnet_under_qemu_matches_onnxruntime_and_reports_ticks(resnet_mcu):
    model = EmulatedModel(resnet_mcu)
    errors = verify(resnet_mcu, seed=1, emulate=True)
    assert errors and all(e.ok for e in errors), errors
    rng = np.random.default_rng(0)
    model.run({info.name: rng.standard_normal(info.shape).astype(info.dtype) for info in model.inputs}, runs=2)
    report = model.board_report
    assert report["runs"] == 2 and report["ticks"] > 0 and 0 < report["stack"] < 16 * 1024


@pytest.mark.external
@pytest.mark.parametrize("name", ["transformer_tiny", "tiny_cnn"])
def test_more_models_on_the_mcu_match_onnxruntime(tmp_path, name):
    model = REPO / "examples/transformer_tiny.onnx" if name == "transformer_tiny" else tiny_cnn(seed=2)
    out = hetgen.compile(REPO / "platforms/mcu.yaml", model, out=tmp_path / "out", werror=True, **FAST)
    assert_bare_metal_image(elf_of(out))
    errors = verify(out, seed=2, emulate=True)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.external
def test_libm_stays_small(tmp_path):
    """The transformer's softmax, layer norm and GELU: exp is inline (hg_expf), sqrt is the FPU's
    instruction; what newlib's libm still gives (erff) is a few KiB, not the whole library."""
    out = hetgen.compile(
        REPO / "platforms/mcu.yaml", REPO / "examples/transformer_tiny.onnx", out=tmp_path / "o", **FAST
    )
    map_text = (out / "board/bin/hg_mcu_main.map").read_text()
    libm = [
        int(size, 16)
        for size, member in re.findall(r"^ \.text\S*\s+0x[0-9a-f]+\s+(0x[0-9a-f]+) \S*libm\.a\((\S+)\)", map_text, re.M)
    ]
    assert sum(libm) < 4096, libm
    assert not re.search(r"libm\.a\(lib_a-(w_|e_|s_)?(sqrt|exp)f?\.o\)", map_text)  # inline or an instruction


def test_model_too_large_for_the_board_is_refused_before_anything_is_built(tmp_path, cli):
    platform = kind_platform("cortex-m4", tmp_path, ", ram_kib: 64, flash_kib: 256")
    out = tmp_path / "out"
    result = cli(platform, "examples/resnet_tiny.onnx", "-o", out)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    message = result.stderr
    assert message.count("\n") == 1 and message.startswith(f"hetgen: error: {platform}: model 'resnet' does not fit")
    needed = re.search(r"RAM: (\d+) bytes needed \(workspace (\d+): arena (\d+)", message)
    assert needed and int(needed[1]) > 65536 and int(needed[1]) >= int(needed[2]) >= int(needed[3]) > 0, message
    assert "but the board has 65536 (ram_kib 64)" in message
    weights = re.search(
        r"flash: the weights alone take (\d+) bytes but the board has 262144 \(flash_kib 256\)", message
    )
    assert weights and int(weights[1]) >= 310848, message  # at least the model's own weights
    assert not out.exists() and not Path(f"{out}.hetgen-failed").exists()


@pytest.mark.external
def test_board_program_refuses_bad_input_files(tmp_path, resnet_mcu):
    model = EmulatedModel(resnet_mcu)
    (tmp_path / "short.bin").write_bytes(b"\0" * 10)

    def run(*arguments):
        command = semihosting_command(model.command, "hg_mcu_main.elf", list(arguments))
        return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)

    short = run("short.bin", "o.bin")
    assert short.returncode == 3 and "the input file must hold every input" in short.stdout + short.stderr
    missing = run("none.bin", "o.bin")
    assert missing.returncode == 3 and "cannot open for reading: none.bin" in missing.stdout + missing.stderr
    assert not (tmp_path / "o.bin").exists()
    usage = run("a", "b", "c", "d", "e")
    assert usage.returncode == 2 and "usage" in usage.stdout + usage.stderr
    plain = run()  # no command line beyond the program's name: zero inputs, a checksum
    assert plain.returncode == 0 and "gemm: checksum" in plain.stdout


@pytest.mark.cc
def test_missing_arm_toolchain_is_refused_and_native_only_verifies_natively(tmp_path):
    hidden = tmp_path / "bin"
    hidden.mkdir()
    for tool in ("cc", "ar", "gcc", "as", "ld"):
        if shutil.which(tool):
            (hidden / tool).symlink_to(shutil.which(tool))
    env = {**os.environ, "PATH": str(hidden)}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "hetgen", "platforms/mcu.yaml", "examples/resnet_tiny.onnx", "-o", str(out)]
    refused = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    assert refused.returncode == 1 and "compiler arm-none-eabi-gcc of mcu is not installed" in refused.stderr
    assert not out.exists()
    # --native-only builds only the simulation (this machine's compiler), which verify runs.
    built = subprocess.run([*command, "--native-only", "-O1"], capture_output=True, text=True, cwd=REPO)
    assert built.returncode == 0, built.stderr
    errors = verify(out, seed=3)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.external
def test_mcu_drives_a_simulated_npu_in_process(tmp_path):
    """platforms/mcu-npu.yaml: the NPU's device model is linked into the ELF; under qemu it counts the
    same cycles as the native simulation of the same run, and the outputs match onnxruntime."""
    out = hetgen.compile(
        REPO / "platforms/mcu-npu.yaml", REPO / "examples/resnet_tiny.onnx", out=tmp_path / "o", werror=True, **FAST
    )
    manifest = json.loads((out / "hetgen.json").read_text())
    assert [t["path"] for t in manifest["targets"]] == ["mcu_npu", "mcu_npu/npu0"]
    assert manifest["targets"][1]["kernels"] > 0  # the NPU has work
    found = assert_bare_metal_image(elf_of(out))
    assert any(name.startswith("hg_sim_") for name in found)
    errors = verify(out, seed=6, emulate=True)
    assert errors and all(e.ok for e in errors), errors
    emulated, native = EmulatedModel(out), hetgen.load(out)
    rng = np.random.default_rng(1)
    feeds = {info.name: rng.standard_normal(info.shape).astype(info.dtype) for info in emulated.inputs}
    emulated.run(feeds)
    native.run(feeds)
    (device,) = emulated.board_report["devices"]
    assert device["invocations"] > 0
    assert {key: device[key] for key in native.device_stats(0)} == native.device_stats(0)


COMPOSITE = """
name: mm
target:
  kind: cortex-m7
  runtime: aot
  devices:
    vdevice0:
      kind: accelerator-with-coprocessor
      link: {bandwidth_gbps: 1, latency_us: 5}
      host: {kind: cortex-m4, runtime: graph}
      devices:
        npu0: {kind: npu, sram_kib: 128, macs_per_cycle: 64, clock_mhz: 400}
"""


@pytest.mark.external
def test_cortex_m_as_the_host_of_an_accelerator_with_coprocessor(tmp_path):
    """A Cortex-M7 root whose accelerator has a Cortex-M4 co-processor: no OS means no transport, so
    the co-processor's library links into the root's ELF (same ISA) and the whole runs under qemu."""
    platform = tmp_path / "mm.yaml"
    platform.write_text(COMPOSITE)
    out = hetgen.compile(platform, REPO / "examples/resnet_tiny.onnx", out=tmp_path / "o", werror=True, **FAST)
    manifest = json.loads((out / "hetgen.json").read_text())
    assert {t["path"] for t in manifest["targets"]} == {"mm", "mm/vdevice0/host", "mm/vdevice0/npu0"}
    assert manifest["remote_devices"] == []
    (program,) = manifest["board"]["programs"]
    assert program["name"] == "hg_mm_main.elf" and program["emulator"][:3] == ["qemu-system-arm", "-M", "mps2-an500"]
    link = next(
        line
        for line in (out / "build.ninja").read_text().replace("$\n", "").splitlines()
        if "build board/bin/hg_mm_main.elf" in line
    )
    assert "board/lib/libhg_mm_vdevice0_host.a" in link and "hg_transport" not in link
    assert_bare_metal_image(out / program["path"])
    errors = verify(out, seed=7, emulate=True)
    assert errors and all(e.ok for e in errors), errors


def test_bare_metal_toolchain_without_a_memory_map_is_refused(tmp_path, cli):
    """A kind built for no OS (its triple says so) needs a memory map for its linker script."""
    platform = tmp_path / "bare.yaml"
    platform.write_text(
        "name: bare\ntarget:\n  kind: cpu\n  runtime: aot\n"
        "  toolchain: {cc: arm-none-eabi-gcc, ar: arm-none-eabi-ar, triple: arm-none-eabi}\n"
    )
    out = tmp_path / "out"
    result = cli(platform, "examples/resnet_tiny.onnx", "-o", out)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "is built for no operating system (arm-none-eabi) but its kind has no memory map" in result.stderr
    assert "flash_origin, flash_kib, ram_origin, ram_kib, stack_kib" in result.stderr and not out.exists()


LOOP = r"""
#include "hg_board.h"
int main(void)
{
    char number[24];
    uint32_t count = 10000000u;
    hg_board_ticks_start();
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(count)); /* two instructions a turn */
    hg_board_print("hg_board: ticks=");
    hg_board_print(hg_board_decimal(hg_board_ticks(), number));
    hg_board_print("\n");
    return 0;
}
"""


@pytest.mark.external
def test_systick_under_icount_counts_one_tick_per_40_instructions(tmp_path, resnet_mcu):
    """What benchmarks/bench_mcu.py relies on: under -icount shift=0 SysTick (the board's 25 MHz)
    advances once per 40 instructions, so a loop of 20 million instructions reads 500,000 ticks."""
    source = tmp_path / "loop.c"
    source.write_text(LOOP)
    elf = tmp_path / "loop.elf"
    flags = ["-mthumb", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard", "-O2", "-nostartfiles"]
    subprocess.run(
        ["arm-none-eabi-gcc", *flags, "-I", str(resnet_mcu / "runtime"), "-T", str(resnet_mcu / "mcu/link.ld")]
        + [str(source), str(resnet_mcu / "runtime/hg_board.c"), "-o", str(elf)],
        check=True,
    )
    command = semihosting_command(("qemu-system-arm", "-M", "mps2-an386", "-icount", "shift=0", str(elf)), "loop", [])
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert abs(board_report(result.stdout)["ticks"] * 40 - 20_000_000) <= 200


@pytest.mark.cc
def test_flash_holds_the_models_weights_not_a_larger_packed_copy(tmp_path):
    """On a host with `memory: fast`, 3x3 layers take Winograd-transformed weights (16/9 of the
    model's); a board's flash gets the model's own weights (or GEMM panels that only pad them)."""
    from hetgen.partition.prepack import BARE_METAL_GROWTH

    model = REPO / "examples/resnet_tiny.onnx"
    weights = sum(onnx.numpy_helper.to_array(t).nbytes for t in onnx.load(str(model)).graph.initializer)
    mcu = hetgen.compile(REPO / "platforms/mcu.yaml", model, out=tmp_path / "mcu", native_only=True, **FAST)
    fast = tmp_path / "fast.yaml"
    fast.write_text("name: host\ntarget: {kind: native, runtime: aot}\noptions: {memory: fast}\n")
    host = hetgen.compile(fast, model, out=tmp_path / "host", native_only=True, **FAST)
    blob = {out: sum(p.stat().st_size for p in out.rglob("*weights*.bin")) for out in (mcu, host)}
    assert 0 < blob[mcu] <= weights * BARE_METAL_GROWTH
    assert blob[host] > blob[mcu]  # the host did take the larger, faster layout for some layers
