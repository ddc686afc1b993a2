"""`hetgen targets`: every kind, what it refines, its attributes, figures and patterns, as text."""

from __future__ import annotations

from collections.abc import Iterable

from hetgen.platform.device_model import PARAMETERS
from hetgen.platform.kind_parts import MEMORY_KEYS
from hetgen.platform.kinds import builtin_kinds
from hetgen.platform.model import AttrSpec, Kind, Pattern, Role, Toolchain


def kinds_table(extra: Iterable[Kind] = ()) -> str:
    """The built-in kinds, then `extra` ones (e.g. a platform's `declared_kinds`), one block each."""
    kinds = [*builtin_kinds().values(), *extra]
    blocks = [_kind_block(kind) for kind in sorted(kinds, key=_family_order(kinds))]
    return "\n\n".join(blocks) + "\n"


def _family_order(kinds: list[Kind]):
    """Parents before children, siblings by name: the table reads as a refinement tree."""
    by_name = {kind.name: kind for kind in kinds}

    def lineage(kind: Kind) -> tuple[str, ...]:
        names = [kind.name]
        while by_name.get(names[-1]) and by_name[names[-1]].parent in by_name and len(names) < len(kinds):
            names.append(by_name[names[-1]].parent)
        return tuple(reversed(names))

    return lineage


def _kind_block(kind: Kind) -> str:
    refines = f", refines {kind.parent}" if kind.parent else ""
    lines = [f"{kind.name} ({kind.role.value}{refines})"]
    if kind.doc:
        lines.append(f"  {kind.doc}")
    if kind.attributes:
        lines.append("  attributes:")
        width = max(len(spec.name) for spec in kind.attributes)
        lines.extend(f"    {_attribute_line(spec, width)}" for spec in kind.attributes)
    if kind.role is not Role.COMPOSITE:
        figures = ", ".join(f"{key} = {value}" for key, value in kind.figures.items())
        lines.append(f"  figures: {figures}")
        local = kind.memory.get("local_bytes")
        limits = ", ".join(f"{key} = {kind.memory[key]}" for key in MEMORY_KEYS[1:] if kind.memory.get(key) is not None)
        limits = f" ({limits})" if limits else ""
        lines.append(f"  memory: {'unbounded' if local is None else f'local_bytes = {local}'}{limits}")
        if kind.role is Role.ACCELERATOR:
            lines.append(f"  device: {_device_line(kind)}")
        if kind.toolchain != Toolchain():
            lines.append(f"  toolchain: {_toolchain_line(kind.toolchain)}")
    if kind.templates:
        lines.append(f"  templates: {kind.templates}")
    if kind.patterns:
        lines.append("  patterns:")
        lines.extend(f"    {_pattern_line(pattern)}" for pattern in kind.patterns)
    return "\n".join(lines)


def _attribute_line(spec: AttrSpec, width: int) -> str:
    if spec.required:
        value = "required"
    else:
        value = f"default {spec.default}"
    extras = []
    if spec.minimum is not None:
        extras.append(f"min {spec.minimum}")
    if spec.choices:
        extras.append("one of " + "|".join(map(str, spec.choices)))
    extra = f" ({', '.join(extras)})" if extras else ""
    return f"{spec.name:<{width}}  {spec.type:<9} {value + extra:<24}  {spec.doc}".rstrip()


def _device_line(kind: Kind) -> str:
    """The simulated device's model: the kind's `device:` entries, then the parameters read from its
    attributes, then those left at their defaults (hetgen/platform/device_model.py)."""
    names = {spec.name for spec in kind.attributes}
    given = [f"{name} = {value}" for name, value in kind.device.items()]
    given += [f"{name} = {name}" for name in PARAMETERS if name not in kind.device and name in names]
    rest = [name for name in PARAMETERS if name not in kind.device and name not in names]
    defaults = [
        f"{n} {PARAMETERS[n].default:g}" if PARAMETERS[n].default is not None else f"{n} ({PARAMETERS[n].derived})"
        for n in rest
    ]
    return ", ".join(given) + (f"; defaults: {', '.join(defaults)}" if defaults else "")


def _toolchain_line(toolchain: Toolchain) -> str:
    parts = [f"triple {toolchain.triple or '(native)'}", f"cc {toolchain.cc}"]
    if toolchain.cflags:
        parts.append(f"cflags {' '.join(toolchain.cflags)}")
    if toolchain.emulator:
        parts.append(f"emulator {' '.join(toolchain.emulator)}")
    return ", ".join(parts)


def _pattern_line(pattern: Pattern) -> str:
    chain = " -> ".join("|".join(step.ops) + ("?" if step.optional else "") for step in pattern.chain)
    if pattern.unit is not None:  # one of the kernel table's multi-operator units, by kind
        chain = f"unit {pattern.unit}" + (f" ({chain})" if chain else "")
    where = ", ".join(f"{key}={value}" for key, value in pattern.where.items())
    where = f"  where {where}" if where else ""
    return f"{pattern.label}: {chain}{where}  (efficiency {pattern.efficiency:g})"
