"""The `target:` tree of a platform file, checked against each node's kind.

Rules that follow from roles, in one place:
- a controller may have a `runtime` and `devices`; without a runtime it gets `vm` when it drives
  devices (a bytecode program can sequence copies and device calls) and `aot` when it is alone
  (straight-line C is smallest and fastest for a lone CPU);
- an accelerator has neither; its toolchain is the one of the controller that drives it, unless
  its kind declares one (a DSP with its own compiler);
- a composite has a `host` (a controller, path `<composite>/host`) that drives its `devices`; its
  figures and toolchain are its host's, since it runs nothing itself;
- every node but the root and a composite's host may have a `link` from its parent. A device
  without one shares its parent's memory (no transfer cost);
- a controller may set its own `threads` (its program's worker pool; `options.threads` is the
  default of the hosted controllers that do not); a bare-metal one, or one built into a bare-metal
  controller's image, has no OS threads and refuses more than 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hetgen.abi import MAX_DEVICES
from hetgen.names import MAX_IDENTIFIER
from hetgen.platform.banks import check_bare_metal_banks, check_hosted_banks, parse_memories
from hetgen.platform.baremetal import MEMORY_MAP_ATTRIBUTES, is_bare_metal_toolchain
from hetgen.platform.device_attrs import check_device_parameters
from hetgen.platform.device_model import build_model, parameters
from hetgen.platform.expressions import ExpressionError, evaluate
from hetgen.platform.kind_parts import ALL_FIGURE_KEYS, MAC_FIGURES, MEMORY_KEYS, NODE_KEYS, parse_toolchain
from hetgen.platform.memory_modes import feature_map_cache_attributes, mode_attributes
from hetgen.platform.model import CostFigures, FrozenMap, Kind, Link, Role, Runtime, Target, Toolchain
from hetgen.platform.schema import (
    Problems,
    check_keys,
    close_match,
    expect_map,
    is_c_identifier,
    listing,
    read_number,
    read_str,
    read_typed,
)
from hetgen.platform.yaml_positions import YMap, YNode, YScalar, describe

RUNTIMES = tuple(runtime.value for runtime in Runtime)
_ROLE_KEYS = {  # the node keys each role may use (besides `link`, on devices)
    Role.CONTROLLER: ("kind", "runtime", "threads", "devices", "toolchain", "figures", "memories"),
    Role.ACCELERATOR: ("kind", "toolchain", "figures"),
    Role.COMPOSITE: ("kind", "host", "devices"),
}
LINK_KEYS = ("bandwidth_gbps", "latency_us")
LINK_ENERGY_KEY = "pj_per_byte"  # optional: energy per byte moved over the link (the energy objective)
MAX_PJ_PER_BYTE = 1e6  # a microjoule a byte: far above any link or memory (DRAM is ~10-100 pJ/B)
HOST_NAME = "host"
MAX_THREADS = 64  # HG_THREADS_MAX in templates/runtime/hg_threads.h
MAX_MEMORY_BYTES = 2**64 - 1


@dataclasses.dataclass(frozen=True)
class _Place:
    """Where a node sits: decides which of `link`, `host`, role are allowed."""

    path: tuple[str, ...]
    context: str  # "root" | "device" | "host"
    driver: Toolchain | None  # toolchain of the controller that drives this node
    bare: str | None = None  # the bare-metal controller whose image holds this node's code, if any


def build_tree(
    node: YNode, name: str, kinds: Mapping[str, Kind], broken: set[str], problems: Problems
) -> Target | None:
    """The root target (path `(name,)`), or None when the tree has problems (all recorded)."""
    return _target(node, _Place((name,), "root", None), kinds, broken, problems)


def kind_figures(kind: Kind, attrs: Mapping[str, Any]) -> dict[str, float]:
    """A kind's figures for these attribute values; raises ExpressionError."""
    return {key: evaluate(kind.figures[key], attrs) for key in ALL_FIGURE_KEYS if key in kind.figures}


def _target(node: YNode, place: _Place, kinds, broken, problems: Problems) -> Target | None:
    what = f"target '{'/'.join(place.path)}'"
    body = _node_body(node, what, problems)
    if body is None:
        return None
    kind = _kind_of(body, what, kinds, broken, problems)
    if kind is None:
        _scan_children(body, place, kinds, broken, problems)  # still report problems further down
        return None
    what = f"{what} (kind {kind.name}, {kind.role.value})"
    attribute_names = tuple(spec.name for spec in kind.attributes)
    listed = _ROLE_KEYS[kind.role] + (() if place.context != "device" else ("link",)) + attribute_names
    check_keys(body, NODE_KEYS + attribute_names, what, problems, listed=listed)
    before = len(problems)
    _check_role(body, kind, place, what, problems)
    attrs = _attributes(body, kind, what, problems)
    if attrs is not None:  # a memory mode's figures (hetgen/platform/memory_modes.py), where the node sets none
        preset = mode_attributes(_lineage(kind, kinds), attrs)
        attrs.update({name: value for name, value in preset.items() if name in attrs and body.get(name) is None})
    link = _link(body.get("link"), what, problems) if body.get("link") is not None else None

    host = toolchain = None
    if kind.role is Role.COMPOSITE and body.get("host") is not None:
        host_place = _Place((*place.path, HOST_NAME), "host", None, place.bare)
        host = _target(body.get("host"), host_place, kinds, broken, problems)
        toolchain = host.toolchain if host is not None else None
    elif kind.role is Role.CONTROLLER:
        toolchain = _toolchain(body, kind.toolchain, what, problems)
    else:  # an accelerator's code is built by its driving controller unless its kind says otherwise
        inherit = kind.toolchain == Toolchain() and place.driver is not None
        toolchain = _toolchain(body, place.driver if inherit else kind.toolchain, what, problems)
    bare = place.bare
    if bare is None and kind.role is not Role.ACCELERATOR and toolchain is not None:
        bare = (
            "/".join(place.path if kind.role is Role.CONTROLLER else host.path)
            if is_bare_metal_toolchain(toolchain)
            else None
        )
    devices = _devices(body, kind, dataclasses.replace(place, bare=bare), toolchain, kinds, broken, problems)
    runtime = _runtime(body, kind, bool(devices) or place.context == "host", what, problems)
    threads = _threads(body.get("threads"), kind, bare, "/".join(place.path), problems)
    memories = _memories(body, place, attrs, bare, what, problems)
    if len(problems) != before or attrs is None or toolchain is None:
        return None
    if kind.role is Role.COMPOSITE:
        figures, memory = host.figures, {}
    else:
        memory = {key: _memory(kind, key, attrs, body, what, problems) for key in MEMORY_KEYS}
        figures = _figures(body, kind, attrs, what, problems, memory.get("local_bytes"), link)
    if len(problems) != before:
        return None
    cached = None
    cache_attrs = feature_map_cache_attributes(attrs) if kind.role is Role.ACCELERATOR else None
    if cache_attrs is not None:  # the same npu with its feature maps in its cache (memory_modes.py)
        cache_memory = {key: _memory(kind, key, cache_attrs, body, what, problems) for key in MEMORY_KEYS}
        cache_figures = _figures(body, kind, cache_attrs, what, problems, cache_memory.get("local_bytes"), link)
        if len(problems) != before:
            return None
        cached = dict(
            attrs=FrozenMap(cache_attrs),
            figures=cache_figures,
            memory_bytes=cache_memory.get("local_bytes"),
            address_bytes=cache_memory.get("address_bytes"),
            static_bytes=cache_memory.get("static_bytes"),
            cache_bytes=memory.get("local_bytes"),
        )
    target = Target(
        name=place.path[-1],
        path=place.path,
        kind=kind,
        attrs=FrozenMap(attrs),
        figures=figures,
        toolchain=toolchain,
        runtime=runtime,
        threads=threads,
        host=host,
        devices=devices,
        link=link,
        memory_bytes=memory.get("local_bytes"),
        address_bytes=memory.get("address_bytes"),
        static_bytes=memory.get("static_bytes"),
        memories=memories,
        source=body.pos,
    )
    if cached is None:
        return target
    # feature_maps: auto leaves the choice to lowering (hetgen/lower/feature_maps.py)
    return dataclasses.replace(target, in_cache=dataclasses.replace(target, **cached))


def _memories(body: YMap, place: _Place, attrs, bare: str | None, what: str, problems: Problems) -> tuple:
    """A controller's `memories:` (hetgen/platform/banks.py): the root's only, for now (the planner
    splits the root's arena); they replace a bare-metal kind's flash_*/ram_* map."""
    node = body.get("memories")
    if node is None:
        return ()
    key = body.key_node("memories")
    if place.context != "root":
        problems.add(key.pos, f"memories are only accepted on the root controller for now; {what} is not the root")
        return ()
    banks = parse_memories(node, attrs or {}, what, problems)
    clashing = [name for name in MEMORY_MAP_ATTRIBUTES if body.get(name) is not None]
    if clashing:
        problems.add(
            body.key_node(clashing[0]).pos,
            f"{what} declares memories, which replace {', '.join(clashing)}; remove them (give each bank its origin and kib)",
        )
    if bare is not None:
        check_bare_metal_banks(banks, node, what, problems)
    else:
        check_hosted_banks(banks, node, what, problems)
    return banks


def _node_body(node: YNode, what: str, problems: Problems) -> YMap | None:
    if isinstance(node, YScalar) and isinstance(node.value, str):  # `npu0: npu` means `{kind: npu}`
        return YMap(((YScalar("kind", node.pos), node),), node.pos)
    if isinstance(node, YMap):
        return node
    problems.add(node.pos, f"{what} must be a kind name or a mapping with 'kind', not {describe(node)}")
    return None


def _kind_of(body: YMap, what: str, kinds: Mapping[str, Kind], broken: set[str], problems: Problems) -> Kind | None:
    known = sorted(set(kinds) | broken)
    kind_node = body.get("kind")
    if kind_node is None:
        problems.add(body.pos, f"{what} needs 'kind'; known kinds: {listing(known)}")
        return None
    name = read_str(kind_node, f"the kind of {what}", problems)
    if name is None or name in broken:
        return None  # a broken kind's problems are already reported
    if name not in kinds:
        hint = close_match(name, known)
        problems.add(kind_node.pos, f"unknown kind '{name}' for {what}{hint}; known kinds: {listing(known)}")
        return None
    return kinds[name]


def _scan_children(body: YMap, place: _Place, kinds, broken, problems: Problems) -> None:
    host = body.get("host")
    if host is not None:
        _target(host, _Place((*place.path, HOST_NAME), "host", None), kinds, broken, problems)
    devices = body.get("devices")
    if isinstance(devices, YMap):
        for key, child in devices.entries:
            _target(child, _Place((*place.path, key.value), "device", None, place.bare), kinds, broken, problems)


def _check_role(body: YMap, kind: Kind, place: _Place, what: str, problems: Problems) -> None:
    role = kind.role
    key = body.key_node
    if place.context == "root" and role is not Role.CONTROLLER:
        problems.add(body.pos, f"{what} is the root, which drives the whole computation; use a controller kind")
    if place.context == "host" and role is not Role.CONTROLLER:
        problems.add(body.pos, f"{what} is a composite's host, which runs a runtime; use a controller kind")
    if key("threads") and role is not Role.CONTROLLER:
        extra = "; give its host threads instead" if role is Role.COMPOSITE else ""
        problems.add(key("threads").pos, f"threads is only valid on a controller (a CPU kind); {what} is not{extra}")
    if key("runtime") and role is not Role.CONTROLLER:
        extra = "; give its host a runtime instead" if role is Role.COMPOSITE else ""
        problems.add(key("runtime").pos, f"runtime is only valid on a controller (a CPU kind); {what} is not{extra}")
    if key("devices") and role is Role.ACCELERATOR:
        problems.add(key("devices").pos, f"devices are only valid on a controller or a composite; {what} is not")
    if key("devices") and place.context == "host":
        problems.add(key("devices").pos, f"{what} is a composite's host; declare the devices on the composite")
    if key("host") and role is not Role.COMPOSITE:
        problems.add(key("host").pos, f"host is only valid on a composite kind; {what} is not")
    if role is Role.COMPOSITE:
        for needed in ("host", "devices"):
            if not key(needed):
                problems.add(body.pos, f"{what} needs '{needed}' (its controller and the devices it drives)")
        for refused in ("toolchain", "figures"):
            if key(refused):
                problems.add(key(refused).pos, f"{refused} is not accepted on {what}; set it on its host or devices")
    if key("link") and place.context != "device":
        reason = "has no parent" if place.context == "root" else "shares its composite's link"
        problems.add(key("link").pos, f"link is not accepted on {what}: it {reason}")


def _lineage(kind: Kind, kinds: Mapping[str, Kind]) -> tuple[str, ...]:
    """The kind's name and those of the kinds it refines, nearest first."""
    names = [kind.name]
    while kinds.get(names[-1]) is not None and kinds[names[-1]].parent and len(names) < len(kinds) + 1:
        names.append(kinds[names[-1]].parent)
    return tuple(names)


def _attributes(body: YMap, kind: Kind, what: str, problems: Problems) -> dict[str, Any] | None:
    attrs: dict[str, Any] = {}
    ok = True
    for spec in kind.attributes:
        node = body.get(spec.name)
        if node is None:
            if spec.required:
                about = f"{spec.type}: {spec.doc}" if spec.doc else spec.type
                problems.add(body.pos, f"{what} needs attribute '{spec.name}' ({about})")
                ok = False
            attrs[spec.name] = spec.default
            continue
        value = read_typed(node, spec.type, f"'{spec.name}' of {what}", problems, spec.minimum)
        if value is not None and spec.choices and value not in spec.choices:
            problems.add(node.pos, f"'{spec.name}' of {what} must be one of: {', '.join(map(str, spec.choices))}")
            value = None
        ok = ok and value is not None
        attrs[spec.name] = value
    return attrs if ok else None


def _link(node: YNode, what: str, problems: Problems) -> Link | None:
    body = expect_map(node, f"the link of {what}", problems, node.pos)
    if body is None:
        return None
    check_keys(body, (*LINK_KEYS, LINK_ENERGY_KEY), f"the link of {what}", problems)
    values = {}
    for key in LINK_KEYS:
        if body.get(key) is None:
            problems.add(body.pos, f"the link of {what} needs '{key}'; a link gives {' and '.join(LINK_KEYS)}")
            continue
        minimum = 1e-9 if key == "bandwidth_gbps" else 0
        values[key] = read_number(body.get(key), f"'{key}' of the link of {what}", problems, minimum=minimum)
    if len(values) != len(LINK_KEYS) or None in values.values():
        return None
    if body.get(LINK_ENERGY_KEY) is not None:
        node_ = body.get(LINK_ENERGY_KEY)
        energy = read_number(node_, f"'{LINK_ENERGY_KEY}' of the link of {what} (pJ per byte)", problems, minimum=0)
        if energy is not None and energy > MAX_PJ_PER_BYTE:
            problems.add(node_.pos, f"'{LINK_ENERGY_KEY}' of the link of {what} must be at most {MAX_PJ_PER_BYTE:g} pJ")
            energy = None
        values[LINK_ENERGY_KEY] = energy
    return Link(**values)


def _devices(body: YMap, kind: Kind, place: _Place, driver: Toolchain | None, kinds, broken, problems) -> tuple:
    """The children, each driven by this node's controller (itself, or a composite's host)."""
    node = body.get("devices")
    if node is None or kind.role is Role.ACCELERATOR:
        return ()
    devices_map = expect_map(node, f"the devices of target '{'/'.join(place.path)}'", problems, node.pos)
    if devices_map is None:
        return ()
    if len(devices_map.entries) > MAX_DEVICES:
        problems.add(
            node.pos,
            f"target '{'/'.join(place.path)}' drives {len(devices_map.entries)} devices; a controller drives "
            f"at most {MAX_DEVICES} (group them under a composite)",
        )
        return ()
    devices = []
    for key, child in devices_map.entries:
        if not is_c_identifier(key.value):
            problems.add(
                key.pos,
                f"device name '{key.value}' is not a valid C identifier; use letters, digits and '_', "
                f"not starting with a digit, at most {MAX_IDENTIFIER} characters, and not a C keyword",
            )
            continue
        if kind.role is Role.COMPOSITE and key.value == HOST_NAME:
            problems.add(key.pos, f"a composite's device cannot be named '{HOST_NAME}'; that path is its host's")
            continue
        target = _target(child, _Place((*place.path, key.value), "device", driver, place.bare), kinds, broken, problems)
        if target is not None:
            devices.append(target)
    return tuple(devices)


def _toolchain(body: YMap, base: Toolchain, what: str, problems: Problems) -> Toolchain:
    node = body.get("toolchain")
    if node is None:
        return base
    return dataclasses.replace(base, **parse_toolchain(node, f"the toolchain of {what}", problems))


def _figures(
    body: YMap, kind: Kind, attrs: Mapping[str, Any], what: str, problems: Problems, capacity, link
) -> CostFigures | None:
    try:
        figures = kind_figures(kind, attrs)
    except ExpressionError as exc:
        problems.add(body.pos, f"the figures of kind '{kind.name}' cannot be computed for {what}: {exc}")
        return None
    node = body.get("figures")
    overrides = expect_map(node, f"the figures of {what}", problems, node.pos) if node is not None else None
    if overrides is not None:
        check_keys(overrides, ALL_FIGURE_KEYS, f"the figures of {what}", problems)
        for key, value in overrides.entries:
            if key.value in ALL_FIGURE_KEYS:
                figures[key.value] = read_number(value, f"figure '{key.value}' of {what}", problems, minimum=0)
    if kind.role is Role.ACCELERATOR:
        derived = _device_figures(body, kind, attrs, figures, what, problems, capacity, link)
        if derived is None:
            return None
        # The device model's rates, where neither the kind nor the target gives the figure itself.
        figures = {**derived, **figures}
    for key in (
        "peak_gflops",
        "bandwidth_gbps",
        "local_gbps",
        "peak_int8_gops",
        "vector_gops",
        "weight_gbps",
        *MAC_FIGURES,
    ):
        if figures.get(key) is not None and figures[key] <= 0:
            problems.add(body.pos, f"figure '{key}' of {what} is {figures[key]:g}; it must be positive")
            return None
    if figures.get("launch_us") is not None and figures["launch_us"] < 0:
        problems.add(body.pos, f"figure 'launch_us' of {what} is negative")
        return None
    return None if None in figures.values() else CostFigures(**figures)


def _device_figures(body: YMap, kind: Kind, attrs, figures, what: str, problems: Problems, capacity, link):
    """The cost model's rates from the target's device model (hetgen/platform/device_model.py), after
    checking every parameter fits the simulator; None when one does not (recorded)."""
    try:
        values = parameters(kind.device, attrs, figures)
    except ExpressionError as exc:
        problems.add(body.pos, f"the device model of kind '{kind.name}' cannot be computed for {what}: {exc}")
        return None
    where = {name: (body.get(name) or body).pos for name in attrs}  # a default: the node that took it
    launch_us = float(figures.get("launch_us") or 0.0)
    if not check_device_parameters(what, values, kind.device, attrs, where, body.pos, problems, launch_us):
        return None
    return build_model(values, capacity, link).cost_figures()


def _memory(kind: Kind, key: str, attrs: Mapping[str, Any], body: YMap, what: str, problems: Problems) -> int | None:
    formula = kind.memory.get(key)
    if formula is None:
        return None
    try:
        size = evaluate(formula, attrs)
    except ExpressionError as exc:
        problems.add(body.pos, f"the memory size '{key}' of kind '{kind.name}' cannot be computed for {what}: {exc}")
        return None
    if size <= 0:
        problems.add(body.pos, f"the memory size '{key}' of {what} is {size:g} bytes; it must be positive")
        return None
    if size > MAX_MEMORY_BYTES:  # the generated C holds sizes in uint64_t
        problems.add(body.pos, f"the memory size '{key}' of {what} is {size:g} bytes; at most 2**64 - 1")
        return None
    return int(size)


def _threads(node: YNode | None, kind: Kind, bare: str | None, path: str, problems: Problems) -> int | None:
    """A controller's `threads: N`: its program's worker pool (templates/runtime/hg_threads.c),
    compiled in as the default that HG_THREADS overrides at run time. None where it gives none."""
    if node is None or kind.role is not Role.CONTROLLER:  # on other roles, _check_role reports it
        return None
    what = f"'threads' of target '{path}'"
    threads = read_number(node, what, problems, integer=True, minimum=1)
    if threads is None:
        return None
    if threads > MAX_THREADS:
        problems.add(node.pos, f"{what} must be at most {MAX_THREADS}, not {threads}")
        return None
    if threads > 1 and bare is not None:
        where = "it is bare metal" if bare == path else f"it is built into bare-metal '{bare}'"
        problems.add(
            node.pos,
            f"'threads: {threads}' of target '{path}' needs OS threads, but {where} (no pthreads);"
            " remove 'threads' or set it to 1",
        )
        return None
    return threads


def _runtime(body: YMap, kind: Kind, drives_devices: bool, what: str, problems: Problems) -> Runtime | None:
    if kind.role is not Role.CONTROLLER:
        return None
    node = body.get("runtime")
    if node is None:
        return Runtime.VM if drives_devices else Runtime.AOT
    name = read_str(node, f"the runtime of {what}", problems, RUNTIMES)
    return Runtime(name) if name else None
