"""Reading one `kinds:` block (a built-in kind file or a platform file's) into unmerged drafts.

A draft holds exactly what its YAML said; `kinds.py` merges it onto the kind it refines. Keeping
the two apart lets a child override one field of an inherited attribute (`sram_kib: {default: 1024}`)
without repeating the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from hetgen.ops.registry import OPS
from hetgen.platform.device_model import PARAMETERS
from hetgen.platform.kind_templates import check_templates_folder
from hetgen.platform.model import FrozenMap, Pattern, PatternStep, Role, SourcePos
from hetgen.platform.predicates import PREDICATE_VALIDATORS
from hetgen.platform.schema import (
    ATTRIBUTE_TYPES,
    Problems,
    check_keys,
    close_match,
    expect_map,
    expect_seq,
    listing,
    read_bool,
    read_number,
    read_str,
    read_str_list,
)
from hetgen.platform.units import NAMED_UNITS, accepted_units, chain_problem, chain_text
from hetgen.platform.yaml_positions import YMap, YNode, YScalar, YSeq, describe

KIND_KEYS = (
    "role", "refines", "doc", "attributes", "figures", "memory", "device", "toolchain", "templates", "patterns",
    "energy",
)  # fmt: skip
LEGACY_KIND_KEYS = {"extends": "refines"}  # one spelling for one idea; `extends` gets pointed here
ATTRIBUTE_KEYS = ("type", "default", "required", "doc", "choices", "minimum")
FIGURE_KEYS = ("peak_gflops", "bandwidth_gbps", "launch_us")
# Figures a kind may declare: local_gbps, an accelerator's local memory as its engines stream it
# (only accelerators with local memory); command_us, the overhead of each command of a tiled
# accelerator; peak_int8_gops, integer-kernel throughput (QLinearConv, QLinearMatMul, ...) where
# the kind has an int8 datapath; vector_gops, the billions of elements a second a tiled
# accelerator's vector unit adds after its MAC array (a fused residual Add); mac_rows, mac_cols and
# int8_mac_cols, the shape of a MAC array (a tile's compute priced at the share of it the tile keeps busy).
OPTIONAL_FIGURE_KEYS = ("local_gbps", "command_us", "peak_int8_gops", "vector_gops")
MAC_FIGURES = ("mac_rows", "mac_cols", "int8_mac_cols")
OPTIONAL_FIGURE_KEYS += MAC_FIGURES
ALL_FIGURE_KEYS = FIGURE_KEYS + OPTIONAL_FIGURE_KEYS
# energy: the figures the energy objective prices a placement with (hetgen/partition/energy.py):
# pJ per multiply-accumulate, pJ per byte moved per memory (local: an accelerator's local SRAM;
# main: the memory a controller's kernels and every DMA read and write), static power in mW while the inference
# runs, and `source`, where the figures come from (a citation, or "assumption: ...").
ENERGY_KEYS = ("pj_per_mac", "pj_per_byte", "static_mw", "source")
ENERGY_MEMORIES = ("local", "main")
MAX_ENERGY_FIGURE = 1e6  # pJ a MAC or a byte, mW: a million is far beyond any device
# local_bytes: a device's own memory (a group's tensors must fit); address_bytes: the most one
# tensor may span (the pointer width); static_bytes: the most static data (arena + weights) one
# program can link. null: no bound.
MEMORY_KEYS = ("local_bytes", "address_bytes", "static_bytes")
TOOLCHAIN_KEYS = ("cc", "cflags", "ldflags", "ar", "launcher", "sysroot", "triple", "emulator")
TOOLCHAIN_LISTS = ("cflags", "ldflags", "launcher", "emulator")
PATTERN_KEYS = ("label", "chain", "unit", "where", "efficiency", "withdrawn")
# The keys a target node gives itself; attributes sit beside them, so no attribute may use one.
NODE_KEYS = ("kind", "runtime", "threads", "devices", "host", "link", "toolchain", "figures", "memories")
ROLES = tuple(role.value for role in Role)

_KIND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")
_OP_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


@dataclass
class AttrDraft:
    """The fields one kind file gives for one attribute; `type` may be inherited."""

    pos: SourcePos
    fields: dict[str, Any] = field(default_factory=dict)  # `default` and `choices` stay YAML nodes
    positions: dict[str, SourcePos] = field(default_factory=dict)


@dataclass
class KindDraft:
    name: str
    pos: SourcePos
    builtin: bool
    role: Role | None = None
    parent: str | None = None
    doc: str | None = None
    attributes: dict[str, AttrDraft] = field(default_factory=dict)
    figures: dict[str, float | str] = field(default_factory=dict)
    memory: dict[str, float | str | None] = field(default_factory=dict)
    toolchain: dict[str, Any] = field(default_factory=dict)
    templates: str | None = None
    patterns: list[Pattern] = field(default_factory=list)
    energy: dict[str, Any] = field(default_factory=dict)  # what its `energy:` gave (merged per key)
    key_pos: dict[str, SourcePos] = field(default_factory=dict)  # where each key was written
    formula_pos: dict[str, SourcePos] = field(default_factory=dict)  # where each figure/memory value was
    device: dict[str, float | str] = field(default_factory=dict)  # the device model's parameters given
    device_pos: dict[str, SourcePos] = field(default_factory=dict)  # where each was written


def parse_kind_block(node: YNode, problems: Problems, templates_base: Path, builtin: bool) -> dict[str, KindDraft]:
    """Drafts for every kind in a `kinds:` mapping, in file order."""
    block = expect_map(node, "'kinds'", problems, node.pos)
    drafts: dict[str, KindDraft] = {}
    for key, value in block.entries if block else ():
        if not _KIND_NAME.match(key.value):
            problems.add(key.pos, f"kind name '{key.value}' must start with a letter and use letters, digits, '_', '-'")
            continue
        draft = _parse_kind(key, value, problems, templates_base, builtin)
        if draft is not None:
            drafts[key.value] = draft
    return drafts


def _parse_kind(key: YScalar, node: YNode, problems: Problems, base: Path, builtin: bool) -> KindDraft | None:
    what = f"kind '{key.value}'"
    body = expect_map(node, what, problems, key.pos)
    if body is None:
        return None
    check_keys(body, KIND_KEYS, what, problems, LEGACY_KIND_KEYS)
    draft = KindDraft(key.value, key.pos, builtin)
    for name, value in body.entries:
        draft.key_pos[name.value] = name.pos
        field_what = f"'{name.value}' of {what}"
        if name.value == "role":
            role = read_str(value, field_what, problems, ROLES)
            draft.role = Role(role) if role else None
        elif name.value in ("refines", "extends"):  # parse a legacy key too, so later checks still run
            if draft.parent is None:
                draft.parent = read_str(value, field_what, problems)
                draft.key_pos["refines"] = value.pos
        elif name.value == "doc":
            draft.doc = read_str(value, field_what, problems)
        elif name.value == "attributes":
            draft.attributes = _parse_attributes(value, what, problems)
        elif name.value == "figures":
            draft.figures = _parse_formulas(value, ALL_FIGURE_KEYS, field_what, problems, draft.formula_pos)
        elif name.value == "memory":
            draft.memory = _parse_formulas(value, MEMORY_KEYS, field_what, problems, draft.formula_pos)
        elif name.value == "device":
            draft.device = _parse_formulas(value, tuple(PARAMETERS), field_what, problems, draft.device_pos)
        elif name.value == "toolchain":
            draft.toolchain = parse_toolchain(value, field_what, problems)
        elif name.value == "templates":
            folder = read_str(value, field_what, problems)
            draft.templates = check_templates_folder(base, folder, value.pos, field_what, problems) if folder else None
        elif name.value == "patterns":
            draft.patterns = _parse_patterns(value, what, problems)
        elif name.value == "energy":
            draft.energy = parse_energy(value, field_what, problems)
    return draft


def parse_energy(node: YNode, what: str, problems: Problems) -> dict[str, Any]:
    """A kind's `energy:` block: numbers in pJ and mW (no expressions), each at least 0 and at most
    MAX_ENERGY_FIGURE, `pj_per_byte` a mapping of ENERGY_MEMORIES, `source` a text."""
    body = expect_map(node, what, problems, node.pos)
    if body is None:
        return {}
    check_keys(body, ENERGY_KEYS, what, problems)
    energy: dict[str, Any] = {}
    units = {"pj_per_mac": "pJ per multiply-accumulate", "static_mw": "mW"}
    for key, value in body.entries:
        if key.value in units:
            number = _energy_number(value, f"'{key.value}' of {what} ({units[key.value]})", problems)
            if number is not None:
                energy[key.value] = number
        elif key.value == "source":
            text = read_str(value, f"'source' of {what}", problems)
            if text is not None:
                energy["source"] = text
        elif key.value == "pj_per_byte":
            memories = expect_map(value, f"'pj_per_byte' of {what}", problems, value.pos)
            if memories is None:
                continue
            check_keys(memories, ENERGY_MEMORIES, f"'pj_per_byte' of {what}", problems)
            per_byte = {}
            for memory, figure in memories.entries:
                if memory.value in ENERGY_MEMORIES:
                    number = _energy_number(
                        figure, f"'{memory.value}' of 'pj_per_byte' of {what} (pJ per byte)", problems
                    )
                    if number is not None:
                        per_byte[memory.value] = number
            energy["pj_per_byte"] = per_byte
    return energy


def _energy_number(node: YNode, what: str, problems: Problems) -> float | None:
    number = read_number(node, what, problems, minimum=0)
    if number is not None and number > MAX_ENERGY_FIGURE:
        problems.add(node.pos, f"{what} must be at most {MAX_ENERGY_FIGURE:g}, not {number:g}")
        return None
    return number


def _parse_attributes(node: YNode, what: str, problems: Problems) -> dict[str, AttrDraft]:
    body = expect_map(node, f"'attributes' of {what}", problems, node.pos)
    drafts: dict[str, AttrDraft] = {}
    for key, value in body.entries if body else ():
        spec_what = f"attribute '{key.value}' of {what}"
        spec = expect_map(value, spec_what, problems, key.pos)
        if spec is None:
            continue
        check_keys(spec, ATTRIBUTE_KEYS, spec_what, problems)
        draft = AttrDraft(key.pos)
        for name, item in spec.entries:
            field_what = f"'{name.value}' of {spec_what}"
            if name.value == "type":
                parsed = read_str(item, field_what, problems, ATTRIBUTE_TYPES)
            elif name.value == "required":
                parsed = read_bool(item, field_what, problems)
            elif name.value == "doc":
                parsed = read_str(item, field_what, problems)
            elif name.value == "minimum":
                parsed = read_number(item, field_what, problems)
            elif name.value == "choices":
                parsed = expect_seq(item, field_what, problems)  # typed when merged
            elif name.value == "default":
                parsed = item  # checked against the (possibly inherited) type when merged
            else:
                continue
            if parsed is not None:
                draft.fields[name.value] = parsed
                draft.positions[name.value] = item.pos
        drafts[key.value] = draft
    return drafts


def _parse_formulas(
    node: YNode, keys: tuple[str, ...], what: str, problems: Problems, positions: dict[str, SourcePos]
) -> dict[str, float | str | None]:
    """Figures and memory sizes: each a number or an expression string (checked when merged)."""
    body = expect_map(node, what, problems, node.pos)
    if body is None:
        return {}
    check_keys(body, keys, what, problems)
    formulas: dict[str, float | str | None] = {}
    for key, value in body.entries:
        if key.value not in keys:
            continue
        nullable = keys == MEMORY_KEYS  # a memory size may be null: unbounded, like host DRAM
        ok = isinstance(value, YScalar) and (
            isinstance(value.value, (int, float, str)) or (nullable and value.value is None)
        )
        if not ok or isinstance(value.value, bool):
            accepted = "a number, an expression over attributes" + (" or null (unbounded)" if nullable else "")
            problems.add(value.pos, f"'{key.value}' of {what} must be {accepted}, not {describe(value)}")
            continue
        formulas[key.value] = value.value
        positions[key.value] = value.pos
    return formulas


def parse_toolchain(node: YNode, what: str, problems: Problems) -> dict[str, Any]:
    """The toolchain fields given (each replaces the inherited one); lists may be written as strings."""
    body = expect_map(node, what, problems, node.pos)
    if body is None:
        return {}
    check_keys(body, TOOLCHAIN_KEYS, what, problems)
    fields: dict[str, Any] = {}
    for key, value in body.entries:
        if key.value in TOOLCHAIN_LISTS:
            parsed = read_str_list(value, f"'{key.value}' of {what}", problems)
        elif key.value in TOOLCHAIN_KEYS:
            is_empty = isinstance(value, YScalar) and value.value is None and key.value in ("triple", "sysroot")
            parsed = "" if is_empty else read_str(value, f"'{key.value}' of {what}", problems)
        else:
            continue
        if parsed is not None:
            fields[key.value] = parsed
    return fields


def _parse_patterns(node: YNode, what: str, problems: Problems) -> list[Pattern]:
    seq = expect_seq(node, f"'patterns' of {what}", problems)
    patterns: list[Pattern] = []
    labels: dict[str, SourcePos] = {}
    for item in seq.items if seq else ():
        pattern = _parse_pattern(item, what, problems)
        if pattern is None:
            continue
        if pattern.label in labels:
            problems.add(item.pos, f"pattern label '{pattern.label}' is used twice in {what}; labels name patterns")
            continue
        labels[pattern.label] = item.pos
        patterns.append(pattern)
    return patterns


def _withdrawn_pattern(body, label_node: YNode | None, what: str, problems: Problems) -> Pattern | None:
    """`{label: X, withdrawn: true}`: the refinement removes its parent's pattern X (kinds.py)."""
    others = [key for key in body.keys() if key not in ("label", "withdrawn")]
    if label_node is None or others or body.get("withdrawn").value is not True:
        problems.add(body.pos, f"{what} that withdraws an inherited pattern is {{label: ..., withdrawn: true}} alone")
        return None
    label = read_str(label_node, f"the label of {what}", problems)
    return None if label is None else Pattern(label, (), withdrawn=True)


def _parse_pattern(node: YNode, what: str, problems: Problems) -> Pattern | None:
    entry_what = f"a pattern of {what}"
    body = expect_map(node, entry_what, problems, node.pos)
    if body is None:
        return None
    check_keys(body, PATTERN_KEYS, entry_what, problems)
    label_node, chain_node, unit_node = body.get("label"), body.get("chain"), body.get("unit")
    if body.get("withdrawn") is not None:
        return _withdrawn_pattern(body, label_node, entry_what, problems)
    if label_node is None or (chain_node is None and unit_node is None):
        missing = " and ".join(
            k for k, v in (("label", label_node), ("a chain or a unit", chain_node or unit_node)) if v is None
        )
        problems.add(body.pos, f"{entry_what} needs {missing}; accepted keys: {', '.join(PATTERN_KEYS)}")
        return None
    label = read_str(label_node, f"the label of {entry_what}", problems)
    unit, chain = None, ()
    if unit_node is not None:
        unit = _parse_unit(unit_node, f"the unit of pattern '{label}' of {what}", problems)
    if chain_node is not None and (unit_node is None or unit is not None):
        chain = _parse_chain(chain_node, f"the chain of pattern '{label}' of {what}", problems, unit)
    where = _parse_where(body.get("where"), f"'where' of pattern '{label}' of {what}", problems)
    efficiency = 1.0
    if body.get("efficiency") is not None:
        efficiency = read_number(body.get("efficiency"), f"'efficiency' of pattern '{label}'", problems, minimum=0)
        if efficiency is not None and not 0 < efficiency <= 1:
            problems.add(body.get("efficiency").pos, f"'efficiency' of pattern '{label}' must be in (0, 1]")
            efficiency = None
    if (
        label is None
        or chain is None
        or (unit_node is not None and unit is None)
        or where is None
        or efficiency is None
    ):
        return None
    return Pattern(label, chain, where, efficiency, unit)


def _parse_unit(node: YNode, what: str, problems: Problems) -> str | None:
    name = read_str(node, what, problems)
    if name is None or name in NAMED_UNITS:
        return name
    problems.add(
        node.pos,
        f"{what}: the kernel table has no unit '{name}'{close_match(name, NAMED_UNITS)}; accepted: {', '.join(sorted(NAMED_UNITS))}",
    )
    return None


def _parse_chain(node: YNode, what: str, problems: Problems, unit: str | None = None) -> tuple[PatternStep, ...] | None:
    seq = expect_seq(node, what, problems)
    if seq is None:
        return None
    if not seq.items:
        problems.add(seq.pos, f"{what} is empty; list at least one operator")
        return None
    steps = [_parse_step(item, what, problems) for item in seq.items]
    if None in steps:
        return None
    if all(step.optional for step in steps):
        problems.add(seq.pos, f"{what} has only optional steps; at least one step must be required")
        return None
    problem = chain_problem(steps, unit)
    if problem is not None:
        problems.add(
            seq.pos,
            f"{what}, {chain_text(steps)}, is not a unit the kernel table forms: {problem}; accepted: {accepted_units()}",
        )
        return None
    return tuple(steps)


def _parse_step(node: YNode, what: str, problems: Problems) -> PatternStep | None:
    text = read_str(node, f"a step of {what}", problems)
    if text is None:
        return None
    optional = text.endswith("?")
    ops = tuple(op.strip() for op in text.removesuffix("?").split("|"))
    if ops != ("*",) and not all(_OP_NAME.match(op) for op in ops):
        problems.add(
            node.pos,
            f"step '{text}' of {what} is not accepted; write an operator name ('Conv'), alternatives "
            "('Relu|Clip'), either with a trailing '?' if optional, or '*' for any supported operator",
        )
        return None
    unknown = [op for op in ops if op != "*" and op not in _graph_ops()]
    for op in unknown:
        problems.add(node.pos, f"step '{text}' of {what}: {_unknown_op(op)}")
    return None if unknown else PatternStep(ops, optional)


def _unknown_op(op: str) -> str:
    """Why a pattern naming `op` could never match, and the near miss."""
    hint = close_match(op, _graph_ops())
    if op in _onnx_ops():
        return (
            f"hetgen's graphs never hold '{op}' (it is not compiled, or is compiled as its ONNX function body), "
            f"so the pattern could never match{hint}"
        )
    return (
        f"'{op}' is not an ONNX operator hetgen compiles{hint}; a step names an operator as in the model (Conv, MatMul)"
    )


@lru_cache(maxsize=1)
def _graph_ops() -> frozenset[str]:
    """The operators a graph can hold after import: those hetgen lowers."""
    return frozenset(OPS)


@lru_cache(maxsize=1)
def _onnx_ops() -> frozenset[str]:
    import onnx

    return frozenset(schema.name for schema in onnx.defs.get_all_schemas_with_history())


def _parse_where(node: YNode | None, what: str, problems: Problems) -> FrozenMap | None:
    """Predicates stay declarative data here; `hetgen.partition.predicates` gives them meaning.

    Their names and values are still checked now, against the partition stage's own validators,
    so a typo in a kind file gets a file position before any model is seen.
    """
    if node is None:
        return FrozenMap()
    body = expect_map(node, what, problems, node.pos)
    if body is None:
        return None
    validators = _predicate_validators()
    predicates = {}
    for key, value in body.entries:
        data = _predicate_value(value)
        if data is None:
            problems.add(
                value.pos,
                f"predicate '{key.value}' in {what} must be a scalar, a list of scalars or a mapping of them",
            )
            continue
        if key.value not in validators:
            hint = close_match(key.value, validators)
            if key.value == "residual":  # the kernel table decides which Conv and Add form one unit
                hint = " (the kernel table decides which Conv and Add are a residual unit: name it with 'unit: conv_residual')"
            problems.add(key.pos, f"unknown predicate '{key.value}' in {what}{hint}; accepted: {listing(validators)}")
            continue
        message = validators[key.value](data)
        if message:
            problems.add(value.pos, f"{what}: {message}")
            continue
        predicates[key.value] = data
    return FrozenMap(predicates) if len(predicates) == len(body.entries) else None


def _predicate_value(node: YNode):
    """A scalar, a tuple of scalars, or a FrozenMap of those (hashable, like the rest of a Kind)."""
    if isinstance(node, YScalar):
        return node.value
    if isinstance(node, YSeq):
        items = [_predicate_value(item) if isinstance(item, YScalar) else None for item in node.items]
        return tuple(items) if items and None not in items else None
    values = {key.value: _predicate_value(value) for key, value in node.entries if not isinstance(value, YMap)}
    return FrozenMap(values) if len(values) == len(node.entries) and None not in values.values() else None


def _predicate_validators() -> dict:
    """name -> validator(value) -> problem or None (hetgen/platform/predicates.py)."""
    return PREDICATE_VALIDATORS
