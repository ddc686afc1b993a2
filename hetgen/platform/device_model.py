"""A simulated accelerator's machine model: declared once by its kind, read by codegen and the cost model.

Every accelerator runs on the C device model (templates/runtime/hg_sim.c, docs/simulator.md). Its
parameters are `PARAMETERS` below, each with its default. A kind declares its device model as
data, under `device:` in its kind file (each parameter a number or an expression over the kind's
attributes, checked where it is written, like a figure); a parameter the block does not give is
the kind's attribute of the same name where it has one (the npu's `clock_mhz`, `mac_rows`, ...),
else its default. A refinement inherits the block, parameter by parameter.

`device_model(target)` is the one function that turns that into a `DeviceModel`, from which
both the simulator's C configuration (`hg_sim_params`, rendered by codegen) and the cost model's
rates for the device's micro-architecture (`DeviceModel.cost_figures`: the local memory's rate,
the overhead of each command, the vector unit's rate, the MAC array's shape and its output stage, which the
platform's targets carry in their figures unless the kind declares one itself) are derived.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hetgen.platform.expressions import evaluate
from hetgen.platform.model import Link, Role

UINT32_MAX = 2**32 - 1
DEFAULT_CLOCK_MHZ = 1000.0  # a device (or a co-processor counting its link) without a clock: 1 GHz


@dataclass(frozen=True)
class Parameter:
    count: bool  # an integer count (a uint32_t in hg_sim_params); else a positive rate
    minimum: int  # for counts: the least value (rates must be > 0)
    default: float | None  # None: derived, as `derived` says
    doc: str
    derived: str = ""  # how a parameter without a default gets its value
    zero: bool = False  # a rate that may be 0: not modelled


PARAMETERS: Mapping[str, Parameter] = {
    "clock_mhz": Parameter(False, 0, DEFAULT_CLOCK_MHZ, "the device clock, converting cycles to time"),
    "dma_gbps": Parameter(False, 0, None, "the DMA engine's bandwidth, GB/s", "the kind's bandwidth_gbps figure"),
    "sram_bytes_per_cycle": Parameter(False, 0, 64.0, "local memory bandwidth the engines see"),
    "macs_per_cycle": Parameter(True, 1, 256, "the MAC array's multipliers"),
    "int8_macs_per_cycle": Parameter(True, 1, None, "the MAC array's int8 multipliers", "macs_per_cycle"),
    "mac_rows": Parameter(True, 1, 16, "the MAC array's rows (columns: macs_per_cycle / mac_rows)"),
    # How the array reaches its int8_macs_per_cycle: each multiplier a dot-product unit summing this
    # many int8 products along the reduction (Arm's SDOT: 4), so an int8 product of depth k takes
    # ceil(k / it) steps and the array keeps int8_macs_per_cycle / (mac_rows x it) columns; 1: one
    # product a multiplier, the int8 MACs all spread across columns.
    "int8_mac_depth": Parameter(
        True,
        1,
        1,
        "int8 products each multiplier of the MAC array sums along the reduction (a dot-product unit): an int8 "
        "product of depth k takes ceil(k / it) steps on int8_macs_per_cycle / (mac_rows x it) columns",
    ),
    "vector_lanes": Parameter(True, 1, 16, "elements the vector unit processes per cycle"),
    "dma_setup_cycles": Parameter(True, 0, 32, "cycles before a DMA's first byte moves"),
    # Weights in a memory apart from the arena's (Vela's Shared_Sram: the arena in SRAM, the weights
    # in flash): their DMA's own rate and latency. Derived: the DMA's, weights beside the arena.
    "weight_dma_gbps": Parameter(False, 0, None, "the DMA's bandwidth for weights, GB/s", "dma_gbps"),
    "weight_dma_setup_cycles": Parameter(
        True, 0, None, "cycles before a weight DMA's first byte moves", "dma_setup_cycles"
    ),
    "command_cycles": Parameter(True, 0, 64, "cycles to decode and start one command"),
    "dma_outstanding_bytes": Parameter(
        True,
        0,
        0,
        "bytes of DMA reads the engine keeps in flight: a DMA queued behind another hides up to this many "
        "bytes' worth of its setup (0: every DMA waits its dma_setup_cycles)",
    ),
    # The same for the weights' memory where it is apart (Vela's max_reads x burst_length of that
    # memory): a weight DMA queued behind another hides up to this many bytes' worth of its own setup.
    "weight_dma_outstanding_bytes": Parameter(
        True,
        0,
        None,
        "bytes of weight reads kept in flight where weights come from a memory of their own",
        "dma_outstanding_bytes",
    ),
    "invoke_cycles": Parameter(True, 0, None, "cycles of each invocation", "launch_us * clock_mhz"),
    "mac_depth_block": Parameter(
        True,
        0,
        0,
        "input channels the MAC array takes in one step of a kernel tap: a dense convolution's channels "
        "are rounded up to a multiple of it (0: not modelled, any number of channels at full use)",
    ),
    "dma_brick_channels": Parameter(
        True,
        0,
        0,
        "channels of a pixel the DMA fetches as one brick: a feature-map DMA of C channels moves "
        "ceil(C / it) x it / C of its bytes (0: not modelled, its bytes as they are)",
    ),
    # Tensors the controller writes or reads stay in DRAM in its linear (NHWC) layout (Vela: network
    # inputs and CPU-shared tensors linear and out of the fast storage); the device's DMA of one
    # takes a whole burst for each pixel's channels (hetgen/spec/work.py linear_bytes).
    "linear_burst_bytes": Parameter(
        True,
        0,
        0,
        "bytes of one burst of the memory that holds the tensors the controller writes and reads: a DMA of "
        "one moves a pixel's channels an access, each access a whole burst (0: not modelled, as other tensors)",
    ),
    "linear_write_bytes": Parameter(
        True, 0, 0, "the most bytes one write access of such a tensor carries (0: a pixel's channels)"
    ),
    "output_cycles_per_element": Parameter(
        False, 0, 0.0, "cycles the MAC array's output stage takes per output element (0: not modelled)", zero=True
    ),
}


@dataclass(frozen=True)
class DeviceModel:
    """A simulated accelerator's own parameters (docs/simulator.md), as `hg_sim_params` holds them."""

    clock_mhz: float
    dma_bytes_per_cycle: float
    capacity: int | None  # local memory bytes; None: unbounded (lowering gives it what it planned)
    mac_rows: int  # the MAC array is mac_rows x mac_cols multipliers
    mac_cols: int
    int8_mac_cols: int  # columns of the MAC array when it multiplies int8 operands
    vector_lanes: int  # elements the vector unit processes per cycle
    sram_bytes_per_cycle: float  # local memory bandwidth seen by the engines
    dma_setup_cycles: int  # before a DMA's first byte moves
    command_cycles: int  # decoding and starting one kernel command
    invoke_cycles: int  # each invocation: driver call, doorbell, completion interrupt
    link_latency_cycles: float = 0.0  # the link from its controller (none: 0 bytes per cycle)
    link_bytes_per_cycle: float = 0.0
    # The MAC array's output stage (scaling, activation, write-back): a MAC command takes at least
    # this many cycles per output element, overlapped with the array's steps; 0: not modelled.
    output_cycles_per_element: float = 0.0
    # Weights DMA'd from a memory of their own (weight_dma_gbps, weight_dma_setup_cycles); 0: the DMA's
    weight_dma_bytes_per_cycle: float = 0.0
    weight_dma_setup_cycles: int = 0
    # The MAC array takes a dense convolution's input channels this many at a time per kernel tap
    # (a 1- or 3-channel stem rounds up to it); 0: not modelled.
    mac_depth_block: int = 0
    # The DMA fetches a feature map's pixels in bricks of this many channels (a 3-channel input
    # moves 16 a pixel); 0: not modelled.
    dma_brick_channels: int = 0
    # The controller's tensors in DRAM, linear: a burst per access of a pixel's channels (reads), at
    # most linear_write_bytes an access (writes); 0: not modelled.
    linear_burst_bytes: int = 0
    linear_write_bytes: int = 0
    # int8 products each multiplier sums along the reduction (a dot-product unit): an int8 product's
    # depth takes ceil(k / it) steps of int8_mac_cols columns; 1: one product a multiplier.
    int8_mac_depth: int = 1

    @property
    def weights_apart(self) -> bool:
        """Whether weights come at another rate or latency than the arena's tensors."""
        return bool(self.weight_dma_bytes_per_cycle) and (
            self.weight_dma_bytes_per_cycle != self.dma_bytes_per_cycle
            or self.weight_dma_setup_cycles != self.dma_setup_cycles
        )

    # A DMA queued behind another (its engine still busy when it could start) issues its reads while
    # the previous one's data streams: with dma_outstanding_bytes of reads in flight, that hides
    # min(dma_setup_cycles, outstanding / dma_bytes_per_cycle) cycles of its setup; 0: none hidden.
    dma_hidden_cycles: int = 0
    # The same for a weight DMA where the weights are apart (weight_dma_outstanding_bytes at their rate).
    weight_dma_hidden_cycles: int = 0

    def cost_figures(self) -> dict[str, float]:
        """The cost model's rates for what the simulator counts beyond the kind's peak and DMA
        figures: the engines' local memory (local_gbps), each tile command's overhead (command_us:
        a kernel's and a DMA's, averaged), the vector unit (vector_gops) and the MAC array's shape."""
        return {
            "local_gbps": self.sram_bytes_per_cycle * self.clock_mhz / 1000,
            "command_us": (self.command_cycles + self.dma_setup_cycles) / 2 / self.clock_mhz,
            "vector_gops": self.vector_lanes * self.clock_mhz / 1000,
            "mac_rows": float(self.mac_rows),
            "mac_cols": float(self.mac_cols),
            "int8_mac_cols": float(self.int8_mac_cols),
            "int8_mac_depth": float(self.int8_mac_depth),
            "output_us": self.output_cycles_per_element / self.clock_mhz,
            "mac_depth_block": float(self.mac_depth_block),
            "dma_brick_channels": float(self.dma_brick_channels),
            "linear_burst_bytes": float(self.linear_burst_bytes),
            "linear_write_bytes": float(self.linear_write_bytes),
            # weights at their own rate, and each weight DMA's extra latency (only where apart)
            **(
                {
                    "weight_gbps": self.weight_dma_bytes_per_cycle * self.clock_mhz / 1000,
                    "weight_setup_us": (self.weight_dma_setup_cycles - self.dma_setup_cycles) / self.clock_mhz,
                    # what a queued weight DMA hides beyond what any queued DMA does
                    "weight_hidden_us": (
                        min(self.weight_dma_hidden_cycles, self.weight_dma_setup_cycles)
                        - min(self.dma_hidden_cycles, self.dma_setup_cycles)
                    )
                    / self.clock_mhz,
                }
                if self.weights_apart
                else {}
            ),
            "dma_hidden_us": self.dma_hidden_cycles / self.clock_mhz,
        }

    def with_capacity(self, planned_bytes: int) -> DeviceModel:
        """A device of unbounded local memory has exactly the bytes its work needs."""
        return self if self.capacity is not None else dataclasses.replace(self, capacity=planned_bytes)


def parameter_sources(kind_device: Mapping[str, Any], attrs: Mapping[str, Any]) -> dict[str, str]:
    """Where each parameter comes from: 'device' (the kind's block), 'attribute' or 'default'."""
    return {
        name: "device" if name in kind_device else "attribute" if name in attrs else "default" for name in PARAMETERS
    }


def parameters(kind_device: Mapping[str, Any], attrs: Mapping[str, Any], figures: Mapping[str, Any]) -> dict:
    """Every parameter's value for a target: the kind's `device:` entry evaluated over the target's
    attributes, else the attribute of its name, else its default (the derived ones from the target's
    bandwidth_gbps and launch_us figures). Raises ExpressionError for a formula that fails."""
    numeric = {k: v for k, v in attrs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    values: dict[str, Any] = {}
    for name, spec in PARAMETERS.items():
        if name in kind_device:
            values[name] = evaluate(kind_device[name], numeric)
        elif name in attrs:
            values[name] = attrs[name]
        else:
            values[name] = spec.default
    clock = float(values["clock_mhz"])
    if values["dma_gbps"] is None:
        values["dma_gbps"] = figures.get("bandwidth_gbps") or 1.0
    if values["weight_dma_gbps"] is None:
        values["weight_dma_gbps"] = values["dma_gbps"]
    if values["weight_dma_setup_cycles"] is None:
        values["weight_dma_setup_cycles"] = values["dma_setup_cycles"]
    if values["weight_dma_outstanding_bytes"] is None:
        values["weight_dma_outstanding_bytes"] = values["dma_outstanding_bytes"]
    if values["int8_macs_per_cycle"] is None:
        values["int8_macs_per_cycle"] = values["macs_per_cycle"]
    if values["invoke_cycles"] is None:
        values["invoke_cycles"] = round(float(figures.get("launch_us") or 0.0) * clock)
    return values


def build_model(values: Mapping[str, Any], capacity: int | None, link: Link | None) -> DeviceModel:
    clock = float(values["clock_mhz"])
    macs = int(values["macs_per_cycle"])
    rows = max(1, min(int(values["mac_rows"]), macs))
    int8_depth = int(values["int8_mac_depth"])
    dma_bytes_per_cycle = float(values["dma_gbps"]) * 1e3 / clock
    setup = int(values["dma_setup_cycles"])
    return DeviceModel(
        clock_mhz=clock,
        dma_bytes_per_cycle=dma_bytes_per_cycle,
        capacity=capacity,
        mac_rows=rows,
        mac_cols=max(1, macs // rows),
        int8_mac_cols=max(1, int(values["int8_macs_per_cycle"]) // (rows * int8_depth)),
        int8_mac_depth=int8_depth,
        vector_lanes=int(values["vector_lanes"]),
        sram_bytes_per_cycle=float(values["sram_bytes_per_cycle"]),
        dma_setup_cycles=setup,
        command_cycles=int(values["command_cycles"]),
        invoke_cycles=int(values["invoke_cycles"]),
        link_latency_cycles=link.latency_us * clock if link is not None else 0.0,
        link_bytes_per_cycle=link.bandwidth_gbps * 1e3 / clock if link is not None else 0.0,
        output_cycles_per_element=float(values["output_cycles_per_element"]),
        weight_dma_bytes_per_cycle=float(values["weight_dma_gbps"]) * 1e3 / clock,
        weight_dma_setup_cycles=int(values["weight_dma_setup_cycles"]),
        mac_depth_block=int(values["mac_depth_block"]),
        dma_brick_channels=int(values["dma_brick_channels"]),
        linear_burst_bytes=int(values["linear_burst_bytes"]),
        linear_write_bytes=int(values["linear_write_bytes"]),
        dma_hidden_cycles=hidden_setup_cycles(setup, int(values["dma_outstanding_bytes"]), dma_bytes_per_cycle),
        weight_dma_hidden_cycles=hidden_setup_cycles(
            int(values["weight_dma_setup_cycles"]),
            int(values["weight_dma_outstanding_bytes"]),
            float(values["weight_dma_gbps"]) * 1e3 / clock,
        ),
    )


def hidden_setup_cycles(setup: int, outstanding_bytes: int, bytes_per_cycle: float) -> int:
    """The setup cycles a DMA queued behind another hides: the reads in flight cover
    outstanding_bytes / bytes_per_cycle cycles of the previous transfer's data (whole cycles), at
    most its whole setup. An Ethos-U65 in Dedicated_Sram: 24 reads of 128-byte bursts = 3072 bytes
    at 3.75 bytes a cycle cover 819 cycles, so all 500 of the DRAM's latency."""
    if outstanding_bytes <= 0 or not bytes_per_cycle > 0:
        return 0
    return min(setup, int(outstanding_bytes / bytes_per_cycle))


def device_model(target) -> DeviceModel:
    """The simulated device's model of an accelerator `target` (a `Target`): the one source of the
    simulator's configuration and of the cost model's rates for its micro-architecture."""
    figures = dataclasses.asdict(target.figures)
    values = parameters(target.kind.device, target.attrs, figures)
    return build_model(values, target.memory_bytes, target.link)


def clock_mhz(target) -> float:
    """A target's clock: an accelerator's device model's; another's `clock_mhz` attribute, else 1 GHz."""
    if target.role is Role.ACCELERATOR:
        return device_model(target).clock_mhz
    return float(target.attrs.get("clock_mhz", DEFAULT_CLOCK_MHZ))
