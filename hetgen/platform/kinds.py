"""Target kinds: the built-in ones (data in `kinds/*.yaml`) and those a platform file declares.

A kind refines at most one parent and inherits its attributes, figures, memory, toolchain and
patterns; what the child writes overrides field by field (patterns by label). Resolution is a
depth-first walk, so a cycle through `refines` is reported once, naming every kind in it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from hetgen.errors import InternalError, PlatformError
from hetgen.platform.device_attrs import check_device_attribute_types
from hetgen.platform.expressions import ExpressionError, evaluate, expression_names
from hetgen.platform.kind_parts import (
    FIGURE_KEYS,
    NODE_KEYS,
    OPTIONAL_FIGURE_KEYS,
    AttrDraft,
    KindDraft,
    parse_kind_block,
)
from hetgen.platform.model import AttrSpec, FrozenMap, Kind, Role, SourcePos, Toolchain
from hetgen.platform.schema import Problems, check_keys, close_match, is_c_identifier, listing, read_typed
from hetgen.platform.units import CONTROLLER_UNITS, NAMED_UNITS
from hetgen.platform.yaml_positions import YMap, YNode, YSeq, parse_yaml
from hetgen.templates_dir import templates_dir

NUMERIC_TYPES = ("int", "float")


def kinds_dir() -> Path:
    return Path(__file__).resolve().parent / "kinds"


@lru_cache(maxsize=1)
def builtin_kinds() -> Mapping[str, Kind]:
    """Every kind shipped with hetgen, by name. Cached: the files are part of the package."""
    problems = Problems()
    drafts: dict[str, KindDraft] = {}
    for path in sorted(kinds_dir().glob("*.yaml")):
        tree = parse_yaml(path.read_text(encoding="utf-8"), str(path))
        # Built-in templates live in hetgen's templates folder, which moves when installed as a wheel.
        for name, draft in kind_file_drafts(tree, str(path), problems, templates_dir(), builtin=True).items():
            if name in drafts:
                problems.add(draft.pos, f"kind '{name}' is defined twice (also at {drafts[name].pos.file})")
            drafts[name] = draft
    resolved, _ = resolve_kinds(drafts, {}, problems)
    try:
        problems.raise_if_any()
    except PlatformError as exc:
        raise InternalError(f"a built-in kind file is broken: {exc}") from None
    return FrozenMap(resolved)


def kind_file_drafts(tree: YNode | None, file: str, problems: Problems, base: Path, builtin: bool) -> dict:
    """The drafts of a kind file, whose only top-level key is `kinds:`."""
    if not isinstance(tree, YMap):
        problems.add(SourcePos(file, 1, 1), "a kind file must be a mapping with one key, 'kinds'")
        return {}
    check_keys(tree, ("kinds",), "a kind file", problems)
    block = tree.get("kinds")
    return parse_kind_block(block, problems, base, builtin) if block is not None else {}


def resolve_kinds(
    drafts: Mapping[str, KindDraft], known: Mapping[str, Kind], problems: Problems
) -> tuple[dict[str, Kind], set[str]]:
    """Merge each draft onto its parent (from `drafts` or `known`).

    Returns the resolved drafts by name and the names that could not be resolved (their problems
    are already recorded), so targets of a broken kind are not reported a second time.
    """
    resolved: dict[str, Kind] = {}
    broken: set[str] = set()
    for name, draft in drafts.items():
        if name in known:
            problems.add(draft.pos, f"kind '{name}' already exists (built in); refine it under a new name")
            broken.add(name)
    for name in drafts:
        _resolve(name, drafts, known, resolved, broken, [], problems)
    return resolved, broken


def _resolve(name, drafts, known, resolved, broken, stack, problems) -> Kind | None:
    if name in resolved or name in known:
        return resolved.get(name) or known[name]
    if name in broken:
        return None
    if name in stack:
        _report_cycle(stack[stack.index(name) :], drafts, broken, problems)
        return None
    draft = drafts[name]
    parent = None
    if draft.parent is not None:
        if draft.parent not in drafts and draft.parent not in known:
            names = set(drafts) | set(known)
            problems.add(
                draft.key_pos["refines"],
                f"kind '{name}' refines unknown kind '{draft.parent}'{close_match(draft.parent, names)}; "
                f"known kinds: {listing(names)}",
            )
            broken.add(name)
            return None
        parent = _resolve(draft.parent, drafts, known, resolved, broken, [*stack, name], problems)
        if parent is None:
            broken.add(name)
            return None
    kind = _merge(draft, parent, problems)
    if kind is None:
        broken.add(name)
    else:
        resolved[name] = kind
    return kind


def _report_cycle(members: list[str], drafts, broken: set[str], problems: Problems) -> None:
    first = min(members, key=lambda n: (drafts[n].pos.line, drafts[n].pos.column))
    start = members.index(first)
    cycle = members[start:] + members[:start] + [first]
    problems.add(
        drafts[first].key_pos["refines"],
        f"kinds refine each other in a cycle: {' -> '.join(cycle)}; a chain of refines must end at a kind without one",
    )
    broken.update(members)


def _merge(draft: KindDraft, parent: Kind | None, problems: Problems) -> Kind | None:
    before = len(problems)
    what = f"kind '{draft.name}'"
    role = draft.role or (parent.role if parent else None)
    if parent and draft.role and draft.role != parent.role:
        problems.add(draft.key_pos["role"], f"{what} cannot change role from {parent.role.value} (of '{parent.name}')")
    if role is None:
        problems.add(draft.pos, f"{what} needs 'role' (controller, accelerator or composite) or 'refines'")
        return None
    attributes = _merge_attributes(draft, parent, problems)
    if role is Role.ACCELERATOR:
        declared = {
            name: (attributes[name].type, draft.attributes[name].pos) for name in draft.attributes if name in attributes
        }
        check_device_attribute_types(draft.name, declared, problems)
    figures = {**(parent.figures if parent else {}), **draft.figures}
    memory = {**(parent.memory if parent else {}), **draft.memory}
    device = {**(parent.device if parent else {}), **draft.device}  # parameter by parameter
    patterns = {p.label: p for p in (parent.patterns if parent else ())}
    patterns.update({p.label: p for p in draft.patterns})  # same label: the refinement replaces it
    inherited = [p.label for p in parent.patterns] if parent else []
    for pattern in draft.patterns:
        if pattern.withdrawn and pattern.label not in inherited:
            problems.add(
                draft.key_pos["patterns"],
                f"{what} withdraws pattern '{pattern.label}', which it does not inherit"
                f"{close_match(pattern.label, inherited)}; inherited: {', '.join(inherited) or 'none'}",
            )
    patterns = {label: p for label, p in patterns.items() if not p.withdrawn}
    energy = _merge_energy(parent.energy if parent else {}, draft.energy)
    base_toolchain = parent.toolchain if parent else Toolchain()
    toolchain = dataclasses.replace(base_toolchain, **draft.toolchain)
    _check_role_rules(draft, role, figures, patterns, problems)
    _check_formulas(draft, figures | memory, attributes, problems, draft.formula_pos)
    _check_formulas(draft, device, attributes, problems, draft.device_pos, "device parameter")
    if len(problems) != before:
        return None
    return Kind(
        name=draft.name,
        role=role,
        parent=parent.name if parent else None,
        doc=draft.doc if draft.doc is not None else (parent.doc if parent else ""),
        attributes=tuple(attributes.values()),
        figures=FrozenMap(figures),
        memory=FrozenMap(memory),
        device=FrozenMap(device),
        patterns=tuple(patterns.values()),
        toolchain=toolchain,
        templates=draft.templates if draft.templates is not None else (parent.templates if parent else ""),
        energy=energy,
        source=draft.pos,
    )


def _merge_energy(parent: Mapping, own: Mapping) -> FrozenMap:
    """A refinement's energy figures over its parent's, key by key (`pj_per_byte` memory by memory)."""
    merged = {**parent, **own}
    if "pj_per_byte" in parent or "pj_per_byte" in own:
        merged["pj_per_byte"] = FrozenMap({**parent.get("pj_per_byte", {}), **own.get("pj_per_byte", {})})
    return FrozenMap(merged)


def _check_role_rules(draft: KindDraft, role: Role, figures, patterns, problems: Problems) -> None:
    what = f"kind '{draft.name}'"
    if role is not Role.ACCELERATOR and "device" in draft.key_pos:
        problems.add(
            draft.key_pos["device"],
            f"'device' is not accepted on {role.value} {what}: it is the model of a simulated accelerator "
            "(docs/simulator.md); only accelerator kinds declare one",
        )
    if role is Role.COMPOSITE:
        for key in ("figures", "memory", "patterns", "toolchain"):
            if key in draft.key_pos:
                problems.add(
                    draft.key_pos[key],
                    f"'{key}' is not accepted on composite {what}: it runs nothing itself; its host and "
                    "devices carry figures, memory, patterns and toolchains",
                )
        return
    missing = [key for key in FIGURE_KEYS if key not in figures and key not in OPTIONAL_FIGURE_KEYS]
    if missing:
        problems.add(draft.pos, f"{what} has no figures {', '.join(missing)}; declare them or refine a kind that does")
    if role is Role.ACCELERATOR and not patterns and "patterns" not in draft.key_pos:  # else: its entries failed
        problems.add(draft.pos, f"accelerator {what} has no patterns, so nothing could run on it; add 'patterns'")
    for pattern in patterns.values() if role is Role.ACCELERATOR else ():
        if pattern.unit in CONTROLLER_UNITS:
            tiled = sorted(set(NAMED_UNITS) - set(CONTROLLER_UNITS))
            problems.add(
                draft.key_pos.get("patterns", draft.pos),
                f"pattern '{pattern.label}' of accelerator {what} names unit {pattern.unit}, which has no tiling "
                f"(controllers run it); accepted on accelerators: {', '.join(tiled)}",
            )


def _check_formulas(
    draft: KindDraft,
    formulas,
    attributes: Mapping[str, AttrSpec],
    problems: Problems,
    positions: Mapping[str, SourcePos],
    what: str = "",
) -> None:
    numeric = sorted(name for name, spec in attributes.items() if spec.type in NUMERIC_TYPES)
    defaults = {name: attributes[name].default for name in numeric if attributes[name].default is not None}
    for key, value in formulas.items():
        if value is None or key not in positions:
            continue  # inherited formulas were checked on the parent, whose attributes we keep
        label = f"{what} '{key}'" if what else f"'{key}'"
        try:
            unknown = sorted(expression_names(value) - set(numeric)) if isinstance(value, str) else []
            if not unknown and (not isinstance(value, str) or expression_names(value) <= set(defaults)):
                # A bomb or an overflow is refused here, at its own position, not at each target.
                evaluate(value, defaults)
        except ExpressionError as exc:
            problems.add(positions[key], f"{label} of kind '{draft.name}': {exc}")
            continue
        if unknown:
            problems.add(
                positions[key],
                f"{label} of kind '{draft.name}' uses {', '.join(unknown)}, which "
                f"{'is not a numeric attribute' if len(unknown) == 1 else 'are not numeric attributes'}; "
                f"numeric attributes: {listing(numeric)}",
            )


def _merge_attributes(draft: KindDraft, parent: Kind | None, problems: Problems) -> dict[str, AttrSpec]:
    specs = {spec.name: spec for spec in (parent.attributes if parent else ())}
    for name, attr in draft.attributes.items():
        spec = _merge_attribute(draft.name, name, attr, specs.get(name), parent, problems)
        if spec is not None:
            specs[name] = spec
    return specs


def _merge_attribute(
    kind: str, name: str, attr: AttrDraft, base: AttrSpec | None, parent: Kind | None, problems: Problems
) -> AttrSpec | None:
    what = f"attribute '{name}' of kind '{kind}'"
    fields = dict(attr.fields)
    if not is_c_identifier(name) or name in NODE_KEYS:
        reason = f"'{name}' is a target key" if name in NODE_KEYS else "it must be a C identifier"
        problems.add(attr.pos, f"{what} cannot be named so: {reason}")
        return None
    if base is None and "type" not in fields:
        problems.add(attr.pos, f"{what} needs a 'type'; accepted: int, float, str, bool, list[str]")
        return None
    if base is not None and fields.get("type", base.type) != base.type:
        problems.add(
            attr.positions["type"],
            f"{what} is inherited from '{parent.name}' as {base.type}; a refinement may change its default, "
            "doc, choices or minimum, not its type",
        )
        return None
    spec = base or AttrSpec(name, fields["type"])
    spec = dataclasses.replace(spec, type=fields.get("type", spec.type))
    if fields.get("required") and "default" not in fields:
        spec = dataclasses.replace(spec, default=None)  # a child may make an inherited default required
    if "default" in fields:
        spec = dataclasses.replace(spec, required=False)
    for key in ("doc", "minimum", "required"):
        if key in fields:
            spec = dataclasses.replace(spec, **{key: fields[key]})
    if spec.type == "int" and spec.minimum is not None and float(spec.minimum).is_integer():
        spec = dataclasses.replace(spec, minimum=int(spec.minimum))  # `minimum: 1` stays 1, not 1.0
    if "minimum" in fields and spec.type not in NUMERIC_TYPES:
        problems.add(attr.positions["minimum"], f"'minimum' of {what} needs a numeric type, not {spec.type}")
    if "choices" in fields:
        seq: YSeq = fields["choices"]
        choices = tuple(read_typed(item, spec.type, f"a choice of {what}", problems) for item in seq.items)
        spec = dataclasses.replace(spec, choices=choices)
    if "default" in fields:
        node = fields["default"]
        default = read_typed(node, spec.type, f"the default of {what}", problems, spec.minimum)
        if default is not None and spec.choices and default not in spec.choices:
            problems.add(node.pos, f"the default of {what} must be one of its choices: {spec.choices}")
        spec = dataclasses.replace(spec, default=default)
    if spec.required and "default" in fields:
        problems.add(attr.positions["required"], f"{what} gives both 'required: true' and a default; give one")
    if not spec.required and spec.default is None:
        problems.add(attr.pos, f"{what} needs a 'default', or 'required: true'")
    return spec
