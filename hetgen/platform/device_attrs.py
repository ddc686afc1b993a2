"""Attributes a simulated accelerator's device model reads, and the values the simulator can take.

An accelerator kind may declare any attributes; those named here are also read by lowering
(`hetgen/lower/resolve.py: device_model`) into the simulator's parameters (`hg_sim_params` in
templates/runtime/hg_sim.h: uint32_t counts, doubles for rates). A kind file is input from anyone,
so each is checked here, where the kind is: a string `clock_mhz` would crash lowering, a
`vector_lanes` of 0 divides by zero in the simulator, and a count past 2**32 - 1 does not fit
its C field. Each problem is reported at the attribute, with what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hetgen.platform.model import SourcePos
from hetgen.platform.schema import Problems

UINT32_MAX = 2**32 - 1
DEFAULT_CLOCK_MHZ = 1000.0  # a kind without `clock_mhz` counts cycles at 1 GHz
MIN_BYTES_PER_CYCLE = 1e-6  # 2**40 bytes at this rate is 1.1e18 cycles: within a uint64_t counter


def clock_mhz(attrs: Mapping[str, Any]) -> float:
    return float(attrs.get("clock_mhz", DEFAULT_CLOCK_MHZ))


def invoke_cycles(attrs: Mapping[str, Any], launch_us: float) -> int:
    """Cycles of each invocation: the attribute, or the launch_us figure at the device's clock (one event)."""
    return int(attrs.get("invoke_cycles", round(launch_us * clock_mhz(attrs))))


@dataclass(frozen=True)
class DeviceAttr:
    count: bool  # read with int() into a uint32_t; else a positive rate read with float()
    minimum: int  # for counts: the least value int() may give (rates must be > 0)
    doc: str


DEVICE_ATTRIBUTES: Mapping[str, DeviceAttr] = {
    "clock_mhz": DeviceAttr(False, 0, "the device clock, converting cost figures to cycles"),
    "dma_gbps": DeviceAttr(False, 0, "the DMA engine's bandwidth"),
    "sram_bytes_per_cycle": DeviceAttr(False, 0, "local memory bandwidth the engines see"),
    "macs_per_cycle": DeviceAttr(True, 1, "the MAC array's multipliers"),
    "int8_macs_per_cycle": DeviceAttr(True, 1, "the MAC array's int8 multipliers"),
    "mac_rows": DeviceAttr(True, 1, "the MAC array's rows"),
    "vector_lanes": DeviceAttr(True, 1, "elements the vector unit processes per cycle"),
    "dma_setup_cycles": DeviceAttr(True, 0, "cycles before a DMA's first byte moves"),
    "command_cycles": DeviceAttr(True, 0, "cycles to decode and start one command"),
    "invoke_cycles": DeviceAttr(True, 0, "cycles of each invocation"),
}


def check_device_attribute_types(kind: str, types: Mapping[str, tuple[str, SourcePos]], problems: Problems) -> None:
    """An accelerator kind's simulator attributes must be numbers. `types`: name -> (type, where)."""
    for name, (type_name, pos) in types.items():
        if name in DEVICE_ATTRIBUTES and type_name not in ("int", "float"):
            spec = DEVICE_ATTRIBUTES[name]
            problems.add(
                pos,
                f"attribute '{name}' of accelerator kind '{kind}' is read by its simulated device as "
                f"{'an integer count' if spec.count else 'a positive rate'} ({spec.doc}); declare it int or float, "
                f"not {type_name}",
            )


def check_device_attribute_values(
    what: str, attrs: Mapping[str, Any], positions: Mapping[str, SourcePos], problems: Problems
) -> bool:
    """The values a target gives (or defaults to) fit the simulator; False when one does not."""
    ok = True
    for name, spec in DEVICE_ATTRIBUTES.items():
        value = attrs.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # not declared by this kind (or refused by its type check)
        if spec.count:
            fits = spec.minimum <= int(value) <= UINT32_MAX
            accepted = f"an integer from {spec.minimum} to {UINT32_MAX}"
        else:
            fits = value > 0
            accepted = "a positive number"
        if not fits:
            shown = value if isinstance(value, int) else f"{value:g}"
            problems.add(
                positions[name], f"'{name}' of {what} is {shown}; its simulated device needs {accepted} ({spec.doc})"
            )
            ok = False
    return ok


def dma_bytes_per_cycle(attrs: Mapping[str, Any], bandwidth_gbps: float) -> float:
    """The DMA engine's bytes a cycle: `dma_gbps` (else the kind's bandwidth figure) at its clock."""
    return float(attrs.get("dma_gbps", bandwidth_gbps or 1.0)) * 1e3 / clock_mhz(attrs)


def check_device_rates(
    what: str, attrs: Mapping[str, Any], launch_us: float, bandwidth_gbps: float, pos: SourcePos, problems: Problems
) -> None:
    """What the simulator derives from the figures must fit it: an invocation's cycles its
    uint32_t, and a transfer's cycles (bytes / bytes a cycle) its uint64_t counters."""
    cycles = invoke_cycles(attrs, launch_us)
    if "invoke_cycles" not in attrs and cycles > UINT32_MAX:
        problems.add(
            pos,
            f"{what}: launch_us {launch_us:g} at {clock_mhz(attrs):g} MHz is {cycles} cycles an invocation, past the "
            f"{UINT32_MAX} its simulated device counts; lower launch_us or clock_mhz",
        )
    rates = {"DMA": dma_bytes_per_cycle(attrs, bandwidth_gbps), "SRAM": attrs.get("sram_bytes_per_cycle")}
    for name, rate in rates.items():
        if rate is not None and rate < MIN_BYTES_PER_CYCLE:
            problems.add(
                pos,
                f"{what}: its {name} moves {rate:g} bytes a cycle at {clock_mhz(attrs):g} MHz; its simulated device "
                f"counts at least {MIN_BYTES_PER_CYCLE:g} (a terabyte's cycles must fit 64 bits)",
            )
