"""The canonical form of a platform: the full tree, every value resolved, as YAML.

`hetgen check` prints it so a reviewer sees what a terse file (shorthands, defaults, inherited
kinds) really means. It is deterministic, and loading it gives an equal `Platform`: kinds the file
declared are written out resolved, each target lists every attribute, its runtime, link and
toolchain, and figures appear only where they differ from what the kind computes (the computed
ones are shown in a comment, so editing an attribute never leaves a stale figure behind).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from hetgen.platform.banks import bank_document
from hetgen.platform.baremetal import MEMORY_MAP_ATTRIBUTES
from hetgen.platform.device_model import device_model
from hetgen.platform.model import Kind, Platform, Role, Target, Toolchain
from hetgen.platform.targets import kind_figures

_WIDTH = 100  # a mapping whose one-line form would be wider is written as a block


class Comment(str):
    """A mapping key that is written as a `# comment` line instead of an entry."""


def canonical_yaml(platform: Platform) -> str:
    document: dict[str, Any] = {"name": platform.name}
    if platform.declared_kinds:
        document["kinds"] = {kind.name: kind_document(kind) for kind in platform.declared_kinds}
    document["target"] = _target_document(platform.root)
    document["options"] = _plain(platform.options)
    header = f"# canonical form of platform '{platform.name}' (hetgen check): every value resolved\n"
    return header + "\n".join(_block(document, 0)) + "\n"


def kind_document(kind: Kind) -> dict[str, Any]:
    """A resolved kind, written the way a `kinds:` block declares one."""
    document: dict[str, Any] = {"role": kind.role.value}
    if kind.parent:
        document["refines"] = kind.parent
    if kind.doc:
        document["doc"] = kind.doc
    if kind.attributes:
        document["attributes"] = {spec.name: _attribute_document(spec) for spec in kind.attributes}
    if kind.role is not Role.COMPOSITE:
        document["figures"] = dict(kind.figures)
        document["memory"] = dict(kind.memory)
    if kind.device:
        document["device"] = dict(kind.device)
        if kind.toolchain != Toolchain():
            document["toolchain"] = _toolchain_document(kind.toolchain)
    if kind.templates:
        document["templates"] = kind.templates
    if kind.energy:
        document["energy"] = {key: dict(value) if key == "pj_per_byte" else value for key, value in kind.energy.items()}
    if kind.patterns:
        document["patterns"] = [
            {
                "label": pattern.label,
                **(
                    {"unit": pattern.unit}
                    if pattern.unit is not None
                    else {"chain": ["|".join(step.ops) + ("?" if step.optional else "") for step in pattern.chain]}
                ),
                "where": _plain(pattern.where),
                "efficiency": pattern.efficiency,
            }
            for pattern in kind.patterns
        ]
    return document


def _attribute_document(spec) -> dict[str, Any]:
    document: dict[str, Any] = {"type": spec.type}
    if spec.required:
        document["required"] = True
    else:
        document["default"] = _plain(spec.default)
    if spec.choices:
        document["choices"] = _plain(spec.choices)
    if spec.minimum is not None:
        document["minimum"] = spec.minimum
    if spec.doc:
        document["doc"] = spec.doc
    return document


def _target_document(target: Target) -> dict[str, Any]:
    document: dict[str, Any] = {Comment(_figures_comment(target)): None, "kind": target.kind.name}
    if target.runtime is not None:
        document["runtime"] = target.runtime.value
    if target.threads is not None:  # its own worker pool; absent: options.threads (hetgen.platform.threads)
        document["threads"] = target.threads
    for spec in target.kind.attributes:
        if target.memories and spec.name in MEMORY_MAP_ATTRIBUTES:
            continue  # its banks replace the kind's one map
        document[spec.name] = _plain(target.attrs[spec.name])
    if target.memories:
        document["memories"] = {bank.name: bank_document(bank) for bank in target.memories}
    if target.link is not None:
        document["link"] = {"bandwidth_gbps": target.link.bandwidth_gbps, "latency_us": target.link.latency_us}
        if target.link.pj_per_byte is not None:
            document["link"]["pj_per_byte"] = target.link.pj_per_byte
    if target.role is not Role.COMPOSITE:
        computed = kind_figures(target.kind, target.attrs)
        if target.role is Role.ACCELERATOR:  # the rates its device model gives, unless the kind says
            computed = {**device_model(target).cost_figures(), **computed}
        computed.setdefault("command_us", 0.0)  # an optional figure: absent means 0
        computed.setdefault("output_us", 0.0)  # a device model's output stage: absent means 0
        computed.setdefault("weight_gbps", None)  # weights at their own DMA rate: absent means none
        computed.setdefault("weight_setup_us", 0.0)
        computed.setdefault("weight_hidden_us", 0.0)
        computed.setdefault("dma_hidden_us", 0.0)  # a device model's DMA setup hidden: absent means 0
        computed.setdefault("mac_depth_block", 0.0)  # a device model's channel blocks: absent means 0
        computed.setdefault("int8_mac_depth", 0.0)  # a device model's int8 dot products: absent means 0
        computed.setdefault("dma_brick_channels", 0.0)  # a device model's DMA bricks: absent means 0
        computed.setdefault("linear_burst_bytes", 0.0)  # the controller's tensors' bursts: absent means 0
        computed.setdefault("linear_write_bytes", 0.0)
        overrides = {k: v for k, v in vars(target.figures).items() if computed.get(k) != v}
        if overrides:
            document["figures"] = overrides
        document["toolchain"] = _toolchain_document(target.toolchain)
    if target.host is not None:
        document["host"] = _target_document(target.host)
    if target.devices:
        document["devices"] = {device.name: _target_document(device) for device in target.devices}
    return document


def _figures_comment(target: Target) -> str:
    figures = target.figures
    memory = "unbounded" if target.memory_bytes is None else f"{target.memory_bytes} bytes"
    owner = " (its host's)" if target.role is Role.COMPOSITE else ""
    int8 = f" ({figures.peak_int8_gops:g} int8 GOP/s)" if figures.peak_int8_gops else ""
    return (
        f"{target.path_str}: {target.role.value}; peak {figures.peak_gflops:g} GFLOP/s{int8}, "
        f"bandwidth {figures.bandwidth_gbps:g} GB/s, launch {figures.launch_us:g} us{owner}; memory {memory}"
    )


def _toolchain_document(toolchain: Toolchain) -> dict[str, Any]:
    return {name: _plain(value) for name, value in vars(toolchain).items()}


def _plain(value: Any) -> Any:
    """Tuples and read-only mappings as the lists and dicts YAML writes."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


def _flow(value: Any) -> str:
    """One value on one line; PyYAML does the quoting, so `yes`, `1e3` or `a, b` stay strings."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True, sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...")


def _nested(mapping: Mapping[str, Any]) -> bool:
    return any(
        isinstance(v, Mapping) or (isinstance(v, list) and any(isinstance(i, Mapping) for i in v))
        for v in mapping.values()
    )


def _block(mapping: Mapping[str, Any], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for key, value in mapping.items():
        if isinstance(key, Comment):
            lines.append(f"{pad}# {key}")
        elif isinstance(value, Mapping) and value and (_nested(value) or len(_flow(value)) + indent > _WIDTH):
            lines.append(f"{pad}{_flow(key)}:")
            lines.extend(_block(value, indent + 2))
        elif isinstance(value, list) and any(isinstance(item, Mapping) for item in value):
            lines.append(f"{pad}{_flow(key)}:")
            for item in value:
                item_lines = _block(item, indent + 4)
                item_lines[0] = f"{pad}  - {item_lines[0].lstrip()}"
                lines.extend(item_lines)
        else:
            lines.append(f"{pad}{_flow(key)}: {_flow(value)}")
    return lines
