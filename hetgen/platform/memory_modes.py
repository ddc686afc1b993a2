"""The attribute values a memory mode sets on the Ethos-U kinds (hetgen/platform/kinds/ethos-u.yaml).

A kind's attribute defaults are its default memory mode's figures (the U55's Sram_Only, the U65's
Dedicated_Sram). A target naming another mode its kind accepts (`memory_mode`'s choices) gets that
mode's figures below for every attribute it does not set itself; a platform file's own value wins.
Each figure is Vela's (ethos-u-vela 5.2.0): its config_files/Arm/vela.ini section and key, and
ethosu/vela/architecture_features.py; tests/test_ethos_u.py reads the installed files and checks them.

Shared_Sram ([Memory_Mode.Shared_Sram]: const_mem_area=Axi1, arena_mem_area=Axi0,
cache_mem_area=Axi0): the tensor arena in the SRAM on AXI0, shared with the CPU; the weights on AXI1
(the U55 High_End_Embedded system's OffChipFlash, the U65 High_End's DRAM). So the npu DMAs its
activations at AXI0's SRAM rate and latency (dma_gbps, dma_setup_cycles) and its weights at AXI1's
(weight_dma_gbps, weight_dma_setup_cycles): the device model's two DMA rates
(hetgen/platform/device_model.py), which the cost model prices per DMA (`Rates.dma_us`). The npu's
local SRAM is its SHRAM, as in Sram_Only: there is no arena cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (kind, memory_mode) -> attribute values. The kinds' own defaults are their default modes'.
MODES: Mapping[tuple[str, str], Mapping[str, Any]] = {
    ("ethos-u55", "Shared_Sram"): {
        # [System_Config.Ethos_U55_High_End_Embedded] axi1_port=OffChipFlash: U55 AXI port 8 bytes a
        # cycle x OffChipFlash_clock_scale=0.125 x core_clock 500 MHz = 0.5 GB/s; OffChipFlash_read_latency=64
        "weight_dma_gbps": 0.5,
        "weight_dma_setup_cycles": 64,
        # the arena on AXI0 as in Sram_Only: 8 B/cycle x Sram_clock_scale=1.0 x 500 MHz, Sram_read_latency=32
        "dma_gbps": 4.0,
        "dma_setup_cycles": 32,
    },
    ("ethos-u65", "Shared_Sram"): {
        # [System_Config.Ethos_U65_High_End] axi0_port=Sram: U65 AXI port 16 bytes a cycle x
        # Sram_clock_scale=1.0 x core_clock 1 GHz = 16 GB/s; Sram_read_latency=32
        "dma_gbps": 16.0,
        "dma_setup_cycles": 32,
        # axi1_port=Dram: 16 B/cycle x Dram_clock_scale=0.234375 x 1 GHz = 3.75 GB/s; Dram_read_latency=500
        "weight_dma_gbps": 3.75,
        "weight_dma_setup_cycles": 500,
        # no arena cache: the local SRAM is the SHRAM (architecture_features.py Ethos_U65_256
        # shram_banks=48 of 1 KiB), which the engines read at the npu's rate, as the U55's
        "sram_kib": 48,
        "sram_bytes_per_cycle": 64.0,
        # the controller's tensors in the arena, in the SRAM: priced as the other feature maps
        # (their linear layout's SRAM bursts are not modelled)
        "linear_burst_bytes": 0,
    },
}


def mode_attributes(lineage: tuple[str, ...], attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The values the target's memory mode sets: `lineage` is its kind and the kinds it refines,
    nearest first (a kind refining ethos-u55 takes its modes); {} where it names its kind's default
    mode or has no memory_mode."""
    mode = attrs.get("memory_mode")
    for kind in lineage:
        values = MODES.get((kind, mode))
        if values is not None:
            return values
    return {}


# The memory modes that keep the npu's tensor arena in the system SRAM on AXI0 (Vela's
# arena_mem_area=Axi0=Sram), which a bare-metal controller (the Corstone-300's Cortex-M55) also uses
# as its RAM: Sram_Only and Shared_Sram. Dedicated_Sram keeps it in DRAM on AXI1.
ARENA_IN_SYSTEM_SRAM = ("Sram_Only", "Shared_Sram")


def arena_in_system_sram(target) -> bool:
    """Whether `target`'s memory mode keeps its tensor arena in the system SRAM (no memory_mode: no)."""
    return target.attrs.get("memory_mode") in ARENA_IN_SYSTEM_SRAM


# Dedicated_Sram with the feature maps in the arena cache (Vela's scheduler.py
# use_fast_storage_for_feature_maps: the feature maps that fit live in the cache, which the NPU reads
# into its SHRAM at the SRAM's rate; the weights stream from DRAM, double-buffered). The npu's model
# then is Shared_Sram's memory system bounded by the cache: its local memory the SHRAM (shram_kib,
# read by the engines at the npu's 64 bytes a cycle, as memory_modes' Shared_Sram), its arena DMAs at
# the cache's rate, latency and reads in flight (cache_gbps, cache_setup_cycles,
# cache_outstanding_bytes), its weight DMAs at the DRAM's (the mode's dma_gbps, dma_setup_cycles,
# weight_dma_outstanding_bytes). The kind's attributes carry each figure with its vela.ini source
# (hetgen/platform/kinds/ethos-u.yaml); hetgen/lower/feature_maps.py decides, per network, whether the
# npu's arena goes there (it must fit the cache: the Dedicated_Sram sram_kib).
FEATURE_MAPS_IN_CACHE = ("auto",)
SHRAM_BYTES_PER_CYCLE = 64.0  # the SHRAM's rate is not in Vela's configuration: the npu's, as Shared_Sram's


def feature_map_cache_attributes(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The attributes of a Dedicated_Sram npu with its feature maps in its cache, from its own ones
    (its DRAM figures become its weights'); None where its kind has no such choice or it says dram.
    Its feature_maps is "cache", which no platform file may write (not one of the choices): the
    configuration is only ever chosen (hetgen/lower/feature_maps.py), never reloaded as attributes."""
    if attrs.get("feature_maps") not in FEATURE_MAPS_IN_CACHE or attrs.get("memory_mode") != "Dedicated_Sram":
        return None
    return {
        **attrs,
        "feature_maps": "cache",
        "sram_kib": attrs["shram_kib"],
        "sram_bytes_per_cycle": SHRAM_BYTES_PER_CYCLE,
        "dma_gbps": attrs["cache_gbps"],
        "dma_setup_cycles": attrs["cache_setup_cycles"],
        "dma_outstanding_bytes": attrs["cache_outstanding_bytes"],
        "weight_dma_gbps": attrs["dma_gbps"],
        "weight_dma_setup_cycles": attrs["dma_setup_cycles"],
    }
