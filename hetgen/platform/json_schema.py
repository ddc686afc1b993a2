"""The platform file format as JSON Schema (draft 2020-12), generated from the kinds' schemas.

Editors with a YAML language server complete and check platform files with it. It mirrors the
loader's closed schemas: one `if kind == X then X's attributes` branch per kind, and
`unevaluatedProperties: false` so a misspelt key is flagged. Rules the loader checks across nodes
(roles, links on the root, expressions) stay the loader's; the schema is a convenience, not the
authority.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hetgen.platform.banks import BANK_CONTENTS
from hetgen.platform.device_model import PARAMETERS
from hetgen.platform.kind_parts import (
    ALL_FIGURE_KEYS,
    ATTRIBUTE_KEYS,
    ENERGY_MEMORIES,
    KIND_KEYS,
    MAX_ENERGY_FIGURE,
    MEMORY_KEYS,
    PATTERN_KEYS,
    ROLES,
    TOOLCHAIN_KEYS,
    TOOLCHAIN_LISTS,
)
from hetgen.platform.kinds import builtin_kinds
from hetgen.platform.loader import OBJECTIVES, PLACEMENTS
from hetgen.platform.model import AttrSpec, Kind, Role
from hetgen.platform.schema import ATTRIBUTE_TYPES
from hetgen.platform.targets import LINK_ENERGY_KEY, LINK_KEYS, MAX_THREADS, RUNTIMES
from hetgen.platform.units import NAMED_UNITS

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_IDENTIFIER = "^[A-Za-z_][A-Za-z0-9_]*$"
_JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def json_schema(extra: Iterable[Kind] = ()) -> dict[str, Any]:
    """The schema of a platform file whose targets use the built-in kinds and `extra` ones."""
    kinds = {**builtin_kinds(), **{kind.name: kind for kind in extra}}
    names = sorted(kinds)
    return {
        "$schema": DRAFT,
        "$id": "urn:hetgen:platform",
        "title": "hetgen platform",
        "description": "A heterogeneous platform: a tree of targets, each of a kind with its own attributes.",
        "type": "object",
        "required": ["name", "target"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": _IDENTIFIER, "description": "A C identifier; names the output."},
            "target": {"$ref": "#/$defs/node", "description": "The controller that drives the computation."},
            "kinds": {"type": "object", "additionalProperties": {"$ref": "#/$defs/kind_definition"}},
            "options": _options_schema(),
        },
        "$defs": {
            "kind_name": {"enum": names},
            "node": {"anyOf": [{"$ref": "#/$defs/kind_name"}, {"$ref": "#/$defs/node_object"}]},
            "node_object": _node_schema(kinds),
            "link": _closed(
                {key: {"type": "number", "minimum": 0} for key in (*LINK_KEYS, LINK_ENERGY_KEY)}, required=LINK_KEYS
            ),
            "toolchain": _closed({key: _toolchain_field(key) for key in TOOLCHAIN_KEYS}),
            "kind_definition": _kind_definition_schema(),
        },
    }


def _closed(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def _toolchain_field(key: str) -> dict[str, Any]:
    if key in TOOLCHAIN_LISTS:
        return {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    return {"type": "string"}


def _node_schema(kinds: dict[str, Kind]) -> dict[str, Any]:
    """Common keys, then one branch per kind adding its attributes; anything else is unevaluated."""
    return {
        "type": "object",
        "required": ["kind"],
        "properties": {
            "kind": {"$ref": "#/$defs/kind_name"},
            "runtime": {"enum": list(RUNTIMES), "description": "Controllers only: vm, graph or aot."},
            "threads": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_THREADS,
                "description": "Controllers only: its program's worker pool (default: options.threads where it"
                " runs on an OS; 1 on bare metal, which refuses more).",
            },
            "devices": {
                "type": "object",
                "propertyNames": {"pattern": _IDENTIFIER},
                "additionalProperties": {"$ref": "#/$defs/node"},
            },
            "host": {"$ref": "#/$defs/node", "description": "Composites only: the controller driving its devices."},
            "link": {"$ref": "#/$defs/link"},
            "toolchain": {"$ref": "#/$defs/toolchain"},
            "figures": _closed({key: {"type": "number", "minimum": 0} for key in ALL_FIGURE_KEYS}),
            "memories": {
                "type": "object",
                "description": "The root controller only: its memory banks (docs/platform-language.md, Memory banks).",
                "propertyNames": {"pattern": _IDENTIFIER},
                "additionalProperties": _bank_schema(),
            },
        },
        "allOf": [_kind_branch(kind) for _, kind in sorted(kinds.items())],
        "unevaluatedProperties": False,
    }


def _bank_schema() -> dict[str, Any]:
    number = {"type": "number", "minimum": 0}
    return _closed(
        {
            "kib": {"type": "number", "exclusiveMinimum": 0},
            "origin": {"type": "integer", "minimum": 0},
            "bandwidth_gbps": {"type": "number", "exclusiveMinimum": 0},
            "latency_ns": number,
            "latency_cycles": number,
            "read_only": {"type": "boolean"},
            "shared": {"type": "boolean"},
            "holds": {"type": "array", "items": {"enum": list(BANK_CONTENTS)}},
        },
        required=("kib", "bandwidth_gbps"),
    )


def _kind_branch(kind: Kind) -> dict[str, Any]:
    then: dict[str, Any] = {"properties": {spec.name: _attribute_schema(spec) for spec in kind.attributes}}
    required = [spec.name for spec in kind.attributes if spec.required]
    if required:
        then["required"] = required
    if kind.role is Role.ACCELERATOR:
        then["not"] = {
            "anyOf": [
                {"required": ["runtime"]},
                {"required": ["threads"]},
                {"required": ["devices"]},
                {"required": ["host"]},
                {"required": ["memories"]},
            ]
        }
    return {"if": {"properties": {"kind": {"const": kind.name}}, "required": ["kind"]}, "then": then}


def _attribute_schema(spec: AttrSpec) -> dict[str, Any]:
    if spec.type == "list[str]":
        schema: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
    else:
        schema = {"type": _JSON_TYPES[spec.type]}
    if spec.doc:
        schema["description"] = spec.doc
    if not spec.required:
        schema["default"] = list(spec.default) if isinstance(spec.default, tuple) else spec.default
    if spec.choices:
        schema["enum"] = list(spec.choices)
    if spec.minimum is not None:
        schema["minimum"] = spec.minimum
    return schema


def _options_schema() -> dict[str, Any]:
    return _closed(
        {
            "placement": {"enum": list(PLACEMENTS)},
            "objective": {
                "enum": list(OBJECTIVES),
                "description": "What the placement minimises (--objective overrides it): one frame's latency (default), the energy per inference, or the period of frames pipelined across devices.",
            },
            "pins": {"type": "object", "additionalProperties": {"type": "string"}},
            "threads": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_THREADS,
                "description": "The worker pool of every controller on an OS that sets no 'threads' of its own.",
            },
            "tuning": _closed({key: {"type": "integer", "minimum": 1} for key in ("mc", "kc", "nc")}),
            "memory": {"enum": ["lean", "fast"]},
            "layout": {"enum": ["nchw", "nchwc", "nchw4c", "nchw8c", "nchw16c"]},
            "cascade": {
                "type": "boolean",
                "description": "Whether consecutive layers on a tiled accelerator may run as cascades (default: true).",
            },
        }
    )


def _parameter_doc(spec) -> str:
    default = spec.derived if spec.default is None else f"{spec.default:g}"
    kind = "an integer count" if spec.count else "a positive rate"
    return f"{spec.doc}: {kind}, a number or an expression over the kind's attributes (default: {default})"


def _kind_definition_schema() -> dict[str, Any]:
    formula = {"anyOf": [{"type": "number"}, {"type": "string"}]}
    attribute = {key: {} for key in ATTRIBUTE_KEYS}
    attribute.update(
        type={"enum": list(ATTRIBUTE_TYPES)},
        required={"type": "boolean"},
        doc={"type": "string"},
        choices={"type": "array"},
        minimum={"type": "number"},
    )
    pattern = {key: {} for key in PATTERN_KEYS}
    pattern.update(
        label={"type": "string"},
        chain={"type": "array", "minItems": 1, "items": {"type": "string"}},
        unit={"enum": sorted(NAMED_UNITS)},
        where={"type": "object"},
        efficiency={"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        withdrawn={"const": True},
    )
    properties = {key: {} for key in KIND_KEYS}
    properties.update(
        role={"enum": list(ROLES)},
        refines={"type": "string"},
        doc={"type": "string"},
        attributes={"type": "object", "additionalProperties": _closed(attribute)},
        figures=_closed({key: formula for key in ALL_FIGURE_KEYS}),
        memory=_closed({key: {"anyOf": [formula, {"type": "null"}]} for key in MEMORY_KEYS}),
        device=_closed({name: {**formula, "description": _parameter_doc(spec)} for name, spec in PARAMETERS.items()}),
        toolchain={"$ref": "#/$defs/toolchain"},
        templates={"type": "string"},
        energy=_closed(
            {
                "pj_per_mac": {"type": "number", "minimum": 0, "maximum": MAX_ENERGY_FIGURE},
                "pj_per_byte": _closed(
                    {m: {"type": "number", "minimum": 0, "maximum": MAX_ENERGY_FIGURE} for m in ENERGY_MEMORIES}
                ),
                "static_mw": {"type": "number", "minimum": 0, "maximum": MAX_ENERGY_FIGURE},
                "source": {"type": "string"},
            }
        ),
        patterns={
            "type": "array",
            "items": {
                **_closed(pattern, required=("label",)),
                "oneOf": [{"required": ["chain"]}, {"required": ["unit"]}],
            },
        },
    )
    return _closed(properties)
