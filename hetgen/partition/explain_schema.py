"""The JSON Schema of `hetgen explain --format json` (printed by `hetgen schema --explain`; prose in
docs/explain-json.md). Every field of the document is listed with what it means; a test validates
real outputs against it, so a field added to `render_json` without a line here fails.

Times are microseconds rounded to 0.001 us (`hetgen.partition.explain.US_DECIMALS`); sums
(`group_us`, `launch_us`, `transfer_us`, a group's `transfer_us` and `copies.us`) are taken over the
rounded parts, so the printed parts add up to the printed sum exactly (to that rounding).
"""

from __future__ import annotations

US = {"type": "number", "minimum": 0}
SIGNED_US = {"type": "number"}
BYTES = {"type": "integer", "minimum": 0}
TEXT = {"type": "string"}
NAMES = {"type": "array", "items": TEXT}


def _object(properties: dict, optional: tuple[str, ...] = (), description: str = "") -> dict:
    schema = {
        "type": "object",
        "properties": properties,
        "required": sorted(k for k in properties if k not in optional),
        "additionalProperties": False,
    }
    if description:
        schema["description"] = description
    return schema


def _d(schema: dict, description: str) -> dict:
    return {**schema, "description": description}


REFUSAL = _object(
    {
        "node": _d(TEXT, "the operator refused"),
        "target": _d(TEXT, "the target that refused it"),
        "label": _d(TEXT, "the refusing pattern; empty when no pattern of the target matches the operator"),
        "reason": _d(TEXT, "the predicate's reason, with its numbers"),
        "text": _d(TEXT, "the refusal as one sentence (what the text output prints)"),
    }
)

TRANSFER = _object(
    {
        "tensor": _d(TEXT, "the tensor copied"),
        "src": _d(TEXT, "the place it is copied from (a target path)"),
        "dst": _d(TEXT, "the place it is copied to"),
        "bytes": BYTES,
        "cost_us": _d(US, "the copy's price: each link's latency plus bytes over its bandwidth, and each DMA's time"),
        "links": {
            "type": "array",
            "items": _object(
                {
                    "below": _d(TEXT, "the target whose link to its parent is crossed"),
                    "bandwidth_gbps": {"type": "number"},
                    "latency_us": US,
                }
            ),
        },
        "dma": {
            "type": "array",
            "items": _object(
                {"target": _d(TEXT, "the accelerator whose DMA engine moves it"), "bandwidth_gbps": {"type": "number"}}
            ),
        },
        "route": _d(TEXT, "the links and DMA engines as text"),
    }
)

TILING = _object(
    {
        "unit": _d(TEXT, "the unit's head node"),
        "split": _d(TEXT, 'how it is cut: "whole", "rows", "channels", "rows x channels", ...'),
        "tile_shape": {"type": "array", "items": {"type": "integer"}, "description": "a full tile's output block"},
        "count": _d({"type": "integer", "minimum": 1}, "tiles"),
        "load_bytes": _d(BYTES, "DMA into SRAM: inputs with their halos, weights with their re-loads"),
        "store_bytes": _d(BYTES, "DMA out of SRAM"),
        "double_buffered": {"type": "boolean"},
        "sram_bytes": _d(BYTES, "the tile buffers"),
        "residual_bytes": _d(BYTES, "of load_bytes, a fused residual Add's blocks (only on such a unit)"),
        "dma_bytes": _d(BYTES, "load_bytes + store_bytes"),
    },
    optional=("residual_bytes",),
    description="an accelerator group's tile plan",
)

CASCADE = _object(
    {
        "target": TEXT,
        "groups": _d(NAMES, "the groups run as one cascade, producer first"),
        "units": _d(NAMES, "their kernel units' head nodes"),
        "stripe": _d({"type": "integer"}, "output rows of the last layer a stripe"),
        "stripes": {"type": "integer"},
        "rows": {"type": "array", "items": {"type": "integer"}, "description": "per layer: rows it produces a stripe"},
        "buffer_rows": {"type": "array", "items": {"type": "integer"}, "description": "per layer: input buffer rows"},
        "sram_bytes": BYTES,
        "dma_bytes": BYTES,
        "move_bytes": _d(BYTES, "SRAM to SRAM moves"),
        "cost_us": _d(US, "one invocation: its launch and its stripes (the price of the cascade's first group)"),
        "layer_sram_bytes": BYTES,
        "layer_dma_bytes": BYTES,
        "layer_us": _d(US, "the same groups run layer by layer"),
        "saved_bytes": _d(BYTES, "layer_dma_bytes - dma_bytes"),
    },
    description="layers run stripe by stripe in local memory, chosen by price over layer by layer",
)

ALTERNATIVE = _object(
    {
        "target": _d(TEXT, "where the group's operators could run instead"),
        "label": _d(TEXT, "the patterns that would run them there"),
        "cost_us": _d(US, "the group's operators there plus the copies of their inputs and outputs that this causes"),
        "delta_us": _d(SIGNED_US, "cost_us - the group's compared_us: how much dearer this option is"),
        "why": _d(TEXT, "what makes the difference (copies, compute)"),
    },
    description="another way to run exactly this group's operators, everything else as placed",
)

GROUP = _object(
    {
        "name": _d(TEXT, "g0, g1, ... in program order"),
        "target": _d(TEXT, "the target path that runs it"),
        "ops": _d(NAMES, "its operators (IR node names)"),
        "op_types": _d(NAMES, "their ONNX op types, in the same order"),
        "cost_us": _d(US, "its time: launch, weight loads and kernels (a cascade's later groups: 0, in its first)"),
        "launch_us": _d(US, "of cost_us, the launch"),
        "variants": _d(NAMES, "the kernels chosen after placement"),
        "searched_us": _d({"type": ["number", "null"]}, "its price in the search, where the chosen kernels differ"),
        "bank_us": {
            "type": "object",
            "additionalProperties": US,
            "description": "a banked root: its traffic time per memory bank",
        },
        "label": _d(TEXT, "the pattern(s) that run it"),
        "reason": _d(TEXT, "why it runs there"),
        "compared_us": _d(
            {"type": ["number", "null"]},
            "the chosen option priced the way its alternatives are (its operators at the search's prices plus the "
            "copies of their inputs and outputs); every alternative's cost_us = compared_us + delta_us. Null when "
            "there is no alternative",
        ),
        "alternatives": {"type": "array", "items": ALTERNATIVE, "description": "cheapest first: the runner-up first"},
        "refused": {"type": "array", "items": REFUSAL, "description": "targets that refused its operators"},
        "transfers": {"type": "array", "items": TRANSFER, "description": "the copies charged to it"},
        "transfer_us": _d(US, "the sum of its transfers' cost_us"),
        "weight_loads": _object({"bytes": BYTES, "us": _d(US, "of cost_us")}, description="weights loaded by DMA"),
        "copies": _object(
            {"count": {"type": "integer", "minimum": 0}, "bytes": BYTES, "us": _d(US, "= transfer_us")},
            description="its transfers in sum",
        ),
        "tiling": {"type": "array", "items": TILING},
    }
)

UNCLAIMED = _object(
    {
        "node": TEXT,
        "op": _d(TEXT, "its ONNX op type"),
        "reason": _d(TEXT, "why no accelerator took it, as one sentence"),
        "refusals": {"type": "array", "items": REFUSAL},
    }
)

UJ = {"type": "number", "minimum": 0}

DEVICE_ENERGY = _object(
    {
        "path": _d(TEXT, "the device (every target but composites: each is powered for the whole inference)"),
        "total_uj": _d(UJ, "compute_uj + copy_uj + static_uj (each rounded to 0.0001 uJ)"),
        "compute_uj": _d(UJ, "its groups: MACs x pj_per_mac + bytes moved in each memory x its pj_per_byte"),
        "copy_uj": _d(UJ, "its DMA's main-memory bytes of the copies into and out of its local memory"),
        "static_uj": _d(UJ, "static_mw x the makespan (total_us)"),
        "macs": _d({"type": "integer", "minimum": 0}, "its groups' multiply-accumulates (flops / 2)"),
        "local_bytes": _d(BYTES, "bytes its tiles' kernels read and write in local SRAM"),
        "main_bytes": _d(BYTES, "bytes its kernels (a controller) or its DMA (an accelerator) move in main memory"),
    }
)

ENERGY = _object(
    {
        "total_uj": _d(UJ, "energy per inference: the devices' total_uj + link_uj"),
        "static_uj": _d(UJ, "the devices' static_uj"),
        "link_uj": _d(UJ, "bytes over each link x its pj_per_byte"),
        "devices": {"type": "array", "items": DEVICE_ENERGY},
        "groups": {
            "type": "object",
            "additionalProperties": UJ,
            "description": "each group's dynamic energy (its part of its device's compute_uj)",
        },
    },
    description="energy per inference from the kinds' and links' energy figures (hetgen/partition/energy.py)",
)

PIPELINE = _object(
    {
        "period_us": _d(US, "the busiest resource's work per frame: the objective"),
        "frames_period_us": _d(US, "the period the generated _run_frames order reaches, at the estimates"),
        "fps": _d(US, "frames per second at frames_period_us"),
        "latency_us": _d(US, "one frame alone (the makespan)"),
        "frames_latency_us": _d(US, "one frame from start to finish inside the pipeline"),
        "depth": _d({"type": "integer", "minimum": 1}, "frames in flight: the root program's stages"),
        "bottleneck": _d(TEXT, "the busiest resource"),
        "bound_us": _d(
            US, "at the search's prices no placement's period is below this; 0 where not computed (a beam-cut search)"
        ),
        "searched_us": _d(US, "the placement's period at the search's prices (what bound_us bounds)"),
        "latency_period_us": _d(US, "the latency objective's placement's period, priced the same way"),
        "resources": {
            "type": "array",
            "items": _object(
                {
                    "path": _d(TEXT, "the root, or one of its devices (its whole subtree)"),
                    "busy_us": _d(US, "its work per frame: the root's kernels and copies; a device's invocations"),
                    "groups": _d(NAMES, "the groups it runs"),
                }
            ),
        },
    }
)

EXPLAIN_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "hetgen explain --format json",
    "description": (
        "Where each part of a model runs and why. Times are microseconds rounded to 0.001 us; sums are taken "
        "over the rounded parts. total_us is the makespan (devices run concurrently with their controllers), "
        "at most group_us + transfer_us (everything one at a time)."
    ),
    **_object(
        {
            "graph": _d(TEXT, "the model's graph name"),
            "mode": _d({"enum": ["cost", "greedy"]}, "the placement search"),
            "quality": _d(
                TEXT,
                '"exact", "within X % of the lower bound ...", "heuristic" or "not judged"; under the energy'
                ' objective "exact: the least energy" or "least energy not proven"; then notes',
            ),
            "groups": {"type": "array", "items": GROUP},
            "transfers": {"type": "array", "items": TRANSFER, "description": "every copy; each is in one group's"},
            "cascades": {"type": "array", "items": CASCADE},
            "total_us": _d(US, "the program's estimated time, devices concurrent (what the page's timeline ends at)"),
            "objective": _d({"enum": ["latency", "energy", "throughput"]}, "what the placement search minimised"),
            "energy": _d(
                {"anyOf": [ENERGY, {"type": "null"}]}, "energy per inference; null where the platform lacks figures"
            ),
            "group_us": _d(US, "the sum of the groups' cost_us"),
            "launch_us": _d(US, "the sum of the groups' launch_us"),
            "transfer_us": _d(US, "the sum of the transfers' cost_us"),
            "unclaimed": {
                "type": "array",
                "items": UNCLAIMED,
                "description": "operators no accelerator could take, and why",
            },
            "banks": {
                "type": "array",
                "items": {"type": "object"},
                "description": "a banked root only: its plan per memory bank (hetgen/lower/banks.py)",
            },
            "feature_maps": {
                "type": "array",
                "items": {"type": "object"},
                "description": "an npu that may keep its feature maps in its arena cache: where they live, "
                "both estimates, its arena and the cache's bytes, the tensors in the cache (hetgen/lower/feature_maps.py)",
            },
            "pipeline": _d(
                PIPELINE, "objective throughput only: frames pipelined across devices (hetgen/partition/throughput.py)"
            ),
        },
        optional=("banks", "feature_maps", "pipeline"),
    ),
}
