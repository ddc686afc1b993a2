"""The values a simulated accelerator's device model may take, checked where the platform says them.

An accelerator's device model (hetgen/platform/device_model.py: its kind's `device:` block, the
attributes named like its parameters, the defaults) becomes the simulator's parameters
(`hg_sim_params` in templates/runtime/hg_sim.h: uint32_t counts, doubles for rates). A kind file is
input from anyone, so each is checked here: a string `clock_mhz` would crash lowering, a
`vector_lanes` of 0 divides by zero in the simulator, and a count past 2**32 - 1 does not fit its
C field. Each problem is reported where the value was written, with what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hetgen.platform.device_model import DEFAULT_CLOCK_MHZ, PARAMETERS, UINT32_MAX, parameter_sources
from hetgen.platform.model import SourcePos
from hetgen.platform.schema import Problems

__all__ = ["DEFAULT_CLOCK_MHZ", "UINT32_MAX", "check_device_attribute_types", "check_device_parameters"]

MIN_BYTES_PER_CYCLE = 1e-6  # 2**40 bytes at this rate is 1.1e18 cycles: within a uint64_t counter


def check_device_attribute_types(kind: str, types: Mapping[str, tuple[str, SourcePos]], problems: Problems) -> None:
    """An accelerator kind's attributes named like its device parameters are those parameters, so
    they must be numbers. `types`: name -> (type, where)."""
    for name, (type_name, pos) in types.items():
        if name in PARAMETERS and type_name not in ("int", "float"):
            spec = PARAMETERS[name]
            problems.add(
                pos,
                f"attribute '{name}' of accelerator kind '{kind}' is read by its simulated device as "
                f"{'an integer count' if spec.count else 'a positive rate'} ({spec.doc}); declare it int or float, "
                f"not {type_name}",
            )


def check_device_parameters(
    what: str,
    values: Mapping[str, Any],
    kind_device: Mapping[str, Any],
    attrs: Mapping[str, Any],
    positions: Mapping[str, SourcePos],
    pos: SourcePos,
    problems: Problems,
    launch_us: float = 0.0,
) -> bool:
    """The device model's values for one target fit the simulator; False when one does not.
    `positions`: where the target gave each attribute (else `pos`, the target)."""
    ok = True
    sources = parameter_sources(kind_device, attrs)
    for name, spec in PARAMETERS.items():
        value = values[name]
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # refused by its attribute's type check
        if sources[name] == "default" and spec.default is None:
            continue  # derived from the figures: checked below, saying so
        if spec.count:
            fits = spec.minimum <= int(value) <= UINT32_MAX
            accepted = f"an integer from {spec.minimum} to {UINT32_MAX}"
        elif spec.zero:
            fits = value >= 0
            accepted = "a number, 0 or more"
        else:
            fits = value > 0
            accepted = "a positive number"
        if not fits:
            shown = value if isinstance(value, int) else f"{value:g}"
            where = f"'{name}'" if sources[name] != "device" else f"device parameter '{name}' ({kind_device[name]})"
            problems.add(
                positions.get(name, pos) if sources[name] == "attribute" else pos,
                f"{where} of {what} is {shown}; its simulated device needs {accepted} ({spec.doc})",
            )
            ok = False
    if not ok:
        return False
    clock = float(values["clock_mhz"])
    if sources["invoke_cycles"] == "default" and values["invoke_cycles"] > UINT32_MAX:
        problems.add(
            pos,
            f"{what}: launch_us {launch_us:g} at {clock:g} MHz is {values['invoke_cycles']} cycles an invocation, past the "
            f"{UINT32_MAX} its simulated device counts; lower launch_us or clock_mhz",
        )
        ok = False
    rates = {"DMA": float(values["dma_gbps"]) * 1e3 / clock, "SRAM": float(values["sram_bytes_per_cycle"])}
    for name, rate in rates.items():
        if rate < MIN_BYTES_PER_CYCLE:
            problems.add(
                pos,
                f"{what}: its {name} moves {rate:g} bytes a cycle at {clock:g} MHz; its simulated device "
                f"counts at least {MIN_BYTES_PER_CYCLE:g} (a terabyte's cycles must fit 64 bits)",
            )
            ok = False
    return ok
