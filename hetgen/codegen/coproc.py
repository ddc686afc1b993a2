"""A bare-metal co-processor of a hosted root (a Cortex-M beside a Linux core): its device server is a
bare-metal ELF that serves the transport on the board's UART.

The root reaches it as it reaches any co-processor (hetgen/codegen/remote.py: `remote_devices.c`, the
same frames, handshake and session rules); what differs is the server's side:

- `server_main.c` (templates/baremetal/server_main.c.j2): parses its command line from semihosting
  (`--key FILE [--timeout-ms N] [--emulated]`), reads the key through semihosting, starts the UART and
  SysTick, and serves session after session (`hg_serve_forever`). The device's state block and the
  largest request (a copy_in of the whole device memory, `memory_size + 16` bytes) are static
  buffers sized here: no heap.
- the transport's runtime compiled for the UART (`hg_transport_uart.c`, `hg_auth_uart.c`,
  `hg_server_uart.c` include the hosted files with HG_TRANSPORT_UART set) and its backend
  (`hg_uart.c`: the CMSDK APB UART, polled; SysTick deadlines; nonces and the key by semihosting);
- the board support of bare-metal roots (`hg_board.c`: vectors, reset, SysTick, semihosting) and a
  linker script from the co-processor's memory map.

Which UART: the first CMSDK APB UART of the board the kind's emulator names (`qemu-system-arm -M
BOARD`); qemu connects it to `-serial`. BAUDDIV is the UART's minimum, 16 (baud = PCLK / 16): the
fastest the board's UART goes, which a platform's link figures should reflect (platforms/linux-mcu.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.codegen.render import render
from hetgen.errors import HetgenError
from hetgen.names import c_comment, c_string
from hetgen.platform.baremetal import memory_map
from hetgen.platform.model import Target
from hetgen.templates_dir import templates_dir


@dataclass(frozen=True)
class Uart:
    board: str  # the emulator's machine, e.g. "mps2-an500"
    base: int
    what: str


# The first CMSDK APB UART of each board: Arm AN385/AN386/AN500/AN511 ("Memory map": UART0 at
# 0x40004000), as qemu's hw/arm/mps2.c maps it (`info mtree` under `qemu-system-arm -M BOARD -S`
# shows uart at 0x40004000-0x40004fff); qemu connects UART0 to the first -serial.
MPS2_UART0 = 0x40004000
UARTS = {
    board: Uart(board, MPS2_UART0, f"CMSDK APB UART0 of the Arm MPS2 {board.removeprefix('mps2-').upper()}")
    for board in ("mps2-an385", "mps2-an386", "mps2-an500", "mps2-an511")
}
UART_DIVIDER = 16  # the CMSDK UART's smallest BAUDDIV: baud = PCLK / 16
UART_RUNTIME = ("hg_uart.c", "hg_uart.h", "hg_transport_uart.c", "hg_auth_uart.c", "hg_server_uart.c")
BOARD_SUPPORT = ("hg_board.c", "hg_board.h")
SERVER_SOURCES = tuple(
    f"runtime/{name}"
    for name in ("hg_transport_uart.c", "hg_auth_uart.c", "hg_server_uart.c", "hg_uart.c", "hg_board.c")
)


def server_elf(prefix: str) -> str:
    return f"{prefix}_server.elf"


def machine(target: Target) -> str:
    """The board the target's emulator names (`-M BOARD`), or ""."""
    emulator = target.toolchain.emulator
    for flag, value in zip(emulator, emulator[1:]):
        if flag in ("-M", "-machine"):
            return value.split(",")[0]
    return ""


def uart_of(target: Target) -> Uart:
    """The UART a bare-metal co-processor serves the transport on; refused where hetgen knows none."""
    board = machine(target)
    if board not in UARTS:
        raise HetgenError(
            f"{target.source.file}:{target.source.line}: target {target.path_str} (kind {target.kind.name}) is a "
            f"bare-metal co-processor of a hosted root, so its device server serves the transport on the board's "
            f"UART; hetgen knows the UART of {', '.join(sorted(UARTS))} (qemu-system-arm -M), not of "
            f"{board or 'a board its kind does not name'}; use cortex-m3, cortex-m4 or cortex-m7 (MPS2 boards)"
        )
    return UARTS[board]


def clock_hz(target: Target) -> int:
    """SysTick's clock: the core clock (`clock_mhz`)."""
    return int(float(target.attrs["clock_mhz"]) * 1_000_000)


def server_source(target: Target, device, lowered_model_name: str, plan_hash_c: str) -> str:
    """The bare-metal server_main.c of `device` (a hetgen.codegen.remote.RemoteDevice)."""
    uart = uart_of(target)
    return render(
        "baremetal/server_main.c.j2",
        prefix=device.prefix,
        PREFIX=device.prefix.upper(),
        header=f"{device.prefix}_device.h",
        model_name=c_comment(lowered_model_name),
        target_path=c_comment(device.program),
        name=c_string(device.program),
        device_name=c_string(device.name),
        memory_size=device.memory_size,
        num_programs=device.num_programs,
        plan_hash=plan_hash_c,
        uart_base=f"0x{uart.base:08x}",
        uart_what=c_comment(uart.what),
        uart_divider=UART_DIVIDER,
        clock_hz=clock_hz(target),
    )


def linker_script(target: Target, prefix: str, lowered_model_name: str) -> str:
    layout = memory_map(target)
    return render(
        "baremetal/link.ld.j2",
        model_name=c_comment(lowered_model_name),
        target_path=c_comment(target.path_str),
        kind=c_comment(target.kind.name),
        prefix=prefix,
        PREFIX=prefix.upper(),
        flash_origin=f"0x{layout.flash_origin:08x}",
        flash_bytes=layout.flash_bytes,
        ram_origin=f"0x{layout.ram_origin:08x}",
        ram_bytes=layout.ram_bytes,
        stack_bytes=layout.stack_bytes,
    )


def support_files() -> list[tuple[str, bytes]]:
    """runtime/ files every bare-metal server needs: the UART backend and the board support."""
    folder = templates_dir() / "baremetal"
    return [(f"runtime/{name}", (folder / name).read_bytes()) for name in (*UART_RUNTIME, *BOARD_SUPPORT)]
