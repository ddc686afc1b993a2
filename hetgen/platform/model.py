"""The validated platform tree: the value the platform stage hands to every later stage.

No raw YAML travels past `hetgen.platform`; everything here is resolved (kinds refined, defaults
applied, figures computed from attributes) and immutable.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


class FrozenMap(Mapping):
    """A read-only, hashable mapping that keeps insertion order.

    Frozen dataclasses holding plain dicts cannot be hashed, so a `Target` could not key a dict;
    this keeps the tree a value. It compares equal to any mapping with the same items.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | Iterator[tuple[str, Any]] = ()):
        object.__setattr__(self, "_items", dict(items))

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other.items())

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"

    def __reduce__(self):
        return (FrozenMap, (self._items,))


class Role(enum.Enum):
    """What a target does, which decides what it may contain and what code it gets."""

    CONTROLLER = "controller"  # a CPU: runs a runtime (vm/graph/aot), may drive devices
    ACCELERATOR = "accelerator"  # driven by a controller; runs only what its patterns claim
    COMPOSITE = "composite"  # accelerator-with-coprocessor: a `host` controller plus devices


class Runtime(enum.Enum):
    VM = "vm"  # bytecode program run by a small C interpreter
    GRAPH = "graph"  # static node table walked in order
    AOT = "aot"  # straight-line C calls


@dataclass(frozen=True)
class SourcePos:
    file: str
    line: int = 0
    column: int = 0


@dataclass(frozen=True)
class AttrSpec:
    """One attribute of a kind's schema."""

    name: str
    type: str  # "int" | "float" | "str" | "bool" | "list[str]"
    default: Any = None  # None with required=True means the user must give it
    required: bool = False
    doc: str = ""
    choices: tuple[Any, ...] = ()
    minimum: float | None = None  # smallest accepted value for "int"/"float" attributes


@dataclass(frozen=True)
class PatternStep:
    ops: tuple[str, ...]  # alternatives; ("*",) matches any operator hetgen supports
    optional: bool = False


@dataclass(frozen=True)
class Pattern:
    """An entry of a kind's pattern table: which of the kernel table's units the device *could* run.

    The kernel table (hetgen/spec) is the only source of units; a pattern only admits some of them.
    `chain` admits the units whose operators, in order, the steps match: one operator, or a head and
    the activations its epilogue absorbs (hetgen/platform/units.py says which chains can match a
    unit). `unit` (instead of a chain) admits every unit of one of the table's multi-operator kinds
    (`conv_residual`, `attention`). `where` holds declarative predicates about the unit's operands,
    evaluated by `hetgen.partition.predicates` (dtypes, kernel sizes, attribute values, memory fit).
    """

    label: str
    chain: tuple[PatternStep, ...]
    where: Mapping[str, Any] = field(default_factory=dict)
    efficiency: float = 1.0  # fraction of peak throughput this pattern reaches on the device
    unit: str | None = None  # a multi-operator unit kind of the kernel table (then `chain` is empty)
    # a refinement's entry that removes its parent's pattern of this label (a unit the real device
    # does not run: the Ethos-U's QLinearAdd is an operation of its own, never a Conv's epilogue)
    withdrawn: bool = False


@dataclass(frozen=True)
class CostFigures:
    peak_gflops: float  # arithmetic throughput
    bandwidth_gbps: float  # local memory bandwidth, GB/s
    launch_us: float  # fixed overhead per kernel launch / command
    local_gbps: float | None = None  # an accelerator's local memory as its engines stream it; None: not modelled
    command_us: float = 0.0  # a tiled accelerator's overhead per command (DMA or kernel) within a launch
    peak_int8_gops: float | None = None  # integer-kernel throughput where the kind has an int8 datapath
    vector_gops: float | None = None  # elements/ns a tiled accelerator's vector unit adds (a fused residual Add)
    # A MAC array's rows and columns (int8 columns where it packs int8 products): a tile's compute is
    # priced at the share of the array its product's shape keeps busy. None: not modelled (full use).
    mac_rows: float | None = None
    mac_cols: float | None = None
    int8_mac_cols: float | None = None
    # int8 products each multiplier sums along the reduction (the device model's int8_mac_depth: a
    # dot-product unit): an int8 product of depth k takes ceil(k / it) steps; 0: not modelled (one)
    int8_mac_depth: float = 0.0
    # us a MAC command's output stage takes per output element (the device model's
    # output_cycles_per_element at its clock), overlapped with the array; 0: not modelled
    output_us: float = 0.0
    # A tiled accelerator whose weights come from a memory apart from its other tensors' (the device
    # model's weight_dma_gbps: Vela's Shared_Sram): their DMA rate (None: bandwidth_gbps) and the us
    # each weight DMA waits beyond another DMA's
    weight_gbps: float | None = None
    weight_setup_us: float = 0.0
    # us of a DMA's setup hidden where it is queued behind another DMA (the device model's
    # dma_hidden_cycles at its clock: reads kept in flight); 0: every DMA pays its setup
    dma_hidden_us: float = 0.0
    # us a queued weight DMA hides beyond dma_hidden_us, where weights are apart (the device model's
    # weight_dma_outstanding_bytes: reads in flight from the weights' memory); 0: none beyond
    weight_hidden_us: float = 0.0
    # input channels the MAC array takes a step (the device model's mac_depth_block): a dense
    # convolution's channels are rounded up to a multiple of it; 0: not modelled
    mac_depth_block: float = 0.0
    # channels of a pixel the DMA fetches as one brick (the device model's dma_brick_channels): a
    # feature-map DMA of C channels moves ceil(C / it) x it / C of its bytes; 0: not modelled
    dma_brick_channels: float = 0.0
    # the tensors the controller writes and reads, in DRAM in its linear layout: the DRAM's burst
    # and a write access's most bytes (the device model's linear_burst_bytes, linear_write_bytes;
    # hetgen/spec/work.py linear_bytes); 0: not modelled
    linear_burst_bytes: float = 0.0
    linear_write_bytes: float = 0.0


@dataclass(frozen=True)
class Toolchain:
    cc: str = "cc"
    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    ar: str = "ar"
    launcher: tuple[str, ...] = ()  # e.g. ("ccache",)
    sysroot: str = ""  # "" = the compiler's own; else passed as --sysroot= to the board build
    triple: str = ""  # "" = native; e.g. "aarch64-linux-gnu" for a cross build
    emulator: tuple[str, ...] = ()  # e.g. ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu")


@dataclass(frozen=True)
class Kind:
    name: str
    role: Role
    parent: str | None = None  # the kind this one refines
    doc: str = ""
    attributes: tuple[AttrSpec, ...] = ()
    figures: Mapping[str, Any] = field(default_factory=dict)  # numbers or expressions of attributes
    memory: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"local_bytes": "sram_kib * 1024"}
    # An accelerator's device model (hetgen/platform/device_model.py): parameter -> number or expression
    device: Mapping[str, Any] = field(default_factory=dict)
    patterns: tuple[Pattern, ...] = ()
    toolchain: Toolchain = Toolchain()
    templates: str = ""  # absolute folder of kernel templates overriding the defaults ("" = none)
    # Energy figures (hetgen/partition/energy.py): {"pj_per_mac": .., "pj_per_byte": {memory: ..},
    # "static_mw": ..}, numbers; empty: the kind declares none (the energy objective is refused)
    energy: Mapping[str, Any] = field(default_factory=lambda: FrozenMap())
    # Where a value was written is not part of what it is: a canonical re-load compares equal.
    source: SourcePos = field(default=SourcePos("<builtin>"), compare=False)

    def attribute(self, name: str) -> AttrSpec | None:
        return next((spec for spec in self.attributes if spec.name == name), None)


@dataclass(frozen=True)
class Link:
    bandwidth_gbps: float
    latency_us: float
    pj_per_byte: float | None = None  # energy per byte moved over it (the energy objective); None: not declared


@dataclass(frozen=True)
class Bank:
    """One memory of a target (`memories:` in the platform file; hetgen/platform/banks.py): the
    planner puts each buffer, scratch area and weight block in one (hetgen/lower/banks.py), the cost
    model prices its accesses at the bank's figures, a bare-metal linker script gives it a region."""

    name: str
    size: int  # bytes
    origin: int | None  # its address (bare metal); None: not mapped by the platform
    bandwidth_gbps: float
    latency_ns: float  # the first access of a stream
    read_only: bool = False  # the program never writes it (flash): it may hold code and weights only
    shared: bool = True  # the CPU reaches it (an npu's local SRAM does not)
    holds: tuple[str, ...] = ()  # what it holds (BANK_CONTENTS), resolved: never empty once loaded

    def access_us(self, nbytes: float, accesses: int) -> float:
        """The time `nbytes` streamed in `accesses` accesses take at this bank's figures: the bytes at
        its bandwidth, plus its latency once per access (a kernel's stream over one buffer). The one
        price of a bank's traffic: the cost model's group times (hetgen/partition/choices.py
        `banked`) and explain's per-bank lines (hetgen/lower/banks.py) both use it."""
        return nbytes / (self.bandwidth_gbps * 1e3) + accesses * self.latency_ns / 1e3


@dataclass(frozen=True)
class Target:
    """A node of the platform tree. `path` names it, e.g. ("soc", "vdevice0", "npu0")."""

    name: str
    path: tuple[str, ...]
    kind: Kind
    attrs: Mapping[str, Any]  # the kind's attributes with defaults applied
    figures: CostFigures
    toolchain: Toolchain
    runtime: Runtime | None = None  # controllers only
    threads: int | None = None  # controllers only: its own `threads:`; None = the platform's default
    host: Target | None = None  # COMPOSITE only: the co-processor that drives `devices`
    devices: tuple[Target, ...] = ()
    link: Link | None = None  # the link from the controlling parent to this target
    memory_bytes: int | None = None  # local memory capacity; None = unbounded (host DRAM)
    address_bytes: int | None = None  # the largest tensor it can address; None = no bound
    static_bytes: int | None = None  # the most static data (arena + weights) it can link; None = no bound
    memories: tuple[Bank, ...] = ()  # declared memory banks (hetgen/platform/banks.py); () = the kind's one map
    source: SourcePos = field(default=SourcePos("<builtin>"), compare=False)
    # An npu whose feature maps may live in its arena cache (Dedicated_Sram, feature_maps: auto):
    # itself so configured (hetgen/platform/memory_modes.py feature_map_cache_attributes), which
    # hetgen/lower/feature_maps.py puts in its place where the network's arena fits and it is faster.
    in_cache: Target | None = field(default=None, compare=False, repr=False)
    # On such a configuration: the cache's bytes, which its arena (the feature maps) must fit.
    cache_bytes: int | None = None

    def __hash__(self) -> int:
        # A target keys the per-target tables of later stages (lowering's schedule and memory
        # plans). Its path names one device of the platform, so hashing the path alone agrees
        # with == (equal targets have equal paths) and costs a short tuple, not the subtree.
        return hash(self.path)

    @property
    def path_str(self) -> str:
        return "/".join(self.path)

    @property
    def role(self) -> Role:
        return self.kind.role

    def walk(self) -> Iterator[Target]:
        """This target and everything below it, parents before children, in declaration order."""
        yield self
        if self.host is not None:
            yield from self.host.walk()
        for device in self.devices:
            yield from device.walk()

    def controller(self) -> Target:
        """The target whose runtime drives this one's children (self, or a composite's host)."""
        return self.host if self.host is not None else self


@dataclass(frozen=True)
class Platform:
    name: str  # a valid C identifier and folder name
    file: str = field(compare=False)  # where it was loaded from ("<string>" for text)
    root: Target
    options: Mapping[str, Any] = field(default_factory=dict)  # e.g. pins, weights placement
    declared_kinds: tuple[Kind, ...] = ()  # kinds the platform file itself declares, resolved, in file order

    def targets(self) -> tuple[Target, ...]:
        return tuple(self.root.walk())

    def target(self, path: str) -> Target:
        for target in self.root.walk():
            if target.path_str == path:
                return target
        raise KeyError(path)

    def parent(self, target: Target) -> Target | None:
        """The node whose `devices` (or, for a composite's co-processor, `host`) holds `target`."""
        if len(target.path) < 2:
            return None
        return self.target("/".join(target.path[:-1]))

    def driver(self, target: Target) -> Target | None:
        """The controller whose runtime launches work on `target` (None for the root).

        A device is driven by its parent's controller (the parent itself, or a composite's host);
        a composite's host is driven by whoever drives the composite.
        """
        parent = self.parent(target)
        if parent is None:
            return None
        if parent.host is not None and target.path == parent.host.path:
            return self.driver(parent)
        return parent.controller()

    def kinds(self) -> tuple[Kind, ...]:
        """The kinds the tree uses, each once, in walk order."""
        seen: dict[str, Kind] = {}
        for target in self.root.walk():
            seen.setdefault(target.kind.name, target.kind)
        return tuple(seen.values())
