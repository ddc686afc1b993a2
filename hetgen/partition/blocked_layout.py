"""Blocked channel layout (NCHW[V]c) across runs of convolutions on a CPU controller: which units
run blocked, and where the reorders go (part of the kernel choice stage, hetgen/partition/choices.py,
which prices them; hetgen/lower/blocked_layout.py rewrites the graph as recorded).

A Conv reads V input channels at a time as one vector when its tensors are stored
[N][C / V][H][W][V]: every broadcast input value times a vector of V output channels' weights is one
FMA, with no im2col and no packing at run time (hetgen/ops/conv_nchwc.py). The layout pays off only
when it is kept from layer to layer, so this pass works on runs:

- a Conv unit (with its fused bias, activations and residual Add) goes blocked when it is on a CPU
  controller that takes the blocked layout (`options.layout`, `block_width`), is 2-D, float32,
  ungrouped, its weights and bias are constants, and `worth_blocking` says so;
- a run continues through a MaxPool or AveragePool (hetgen/ops/pool_nchwc.py) and through an Add
  not fused into a Conv (hetgen/ops/add_nchwc.py) whose inputs are already blocked (never the other
  way: reordering a pool's larger input would cost more than its output); it ends in a
  GlobalAveragePool or GlobalMaxPool of a blocked input, which writes NCHW itself;
- every tensor a blocked Conv, pool or Add writes is blocked, named `<tensor>.nchw<V>c`; every
  tensor a blocked Conv reads (input, residual) must be blocked too: where the producer is not
  blocked, one reorder NCHW -> NCHW[V]c is inserted before its first blocked reader;
- where a blocked tensor is read by anything else (a graph output, a layer that stays NCHW), one
  reorder back is inserted right after its producer, under the tensor's own name.

So reorders sit exactly at the edges of each run, and a tensor is reordered at most once each way.
A run whose reorders would cost more than blocking saves stays NCHW (`paying_runs`).
Channels are padded to a multiple of V with zeros (hetgen/ops/conv_nchwc.py says why the padding
needs no care). The choice shows in the generated code: each blocked Conv's kernel file is
conv_nchwc's, each reorder is a kernel of its own (its label names it).

Which CPUs take it (`options.layout`): `nchw` never; `nchwc` with V from the target (the vector of
the machine running hetgen for a target built by this machine's compiler: 16 with AVX-512, 8 with
AVX2, 4 otherwise; 8 for an x86-64 kind, 4 for an AArch64 one (NEON); none for other cores, whose
portable C gains nothing from blocks); `nchw4c`, `nchw8c`, `nchw16c` with that V. The default is
`nchw` (see `DEFAULT_LAYOUT`).
"""

from __future__ import annotations

import dataclasses
import platform as host_platform
from collections.abc import Mapping

from hetgen.errors import InternalError
from hetgen.ir import DType, Graph
from hetgen.ops import add_nchwc, conv_nchwc, pool_nchwc
from hetgen.ops.base import Kernel, Tiling, Unsupported, WorkRule
from hetgen.ops.registry import op_def
from hetgen.partition.units import Unit, op_instance
from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.model import Platform, Role, Target

# Not the default yet: the measured gain (benchmarks/bench_blocked_layout.py, docs/kernels.md) is
# small and was taken on a heavily shared machine.
DEFAULT_LAYOUT = "nchw"


def host_block_width() -> int:
    """The vector width in floats of the machine running hetgen (what -march=native targets)."""
    machine = host_platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return 4
    if machine not in ("x86_64", "amd64"):
        return 4
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        return 8
    if "avx512f" in flags:
        return 16
    return 8 if "avx2" in flags and "fma" in flags else 4


def block_width(target: Target, layout: str) -> int | None:
    """V for `target` under `layout`, or None where the target keeps NCHW."""
    if layout == "nchw" or target.role is not Role.CONTROLLER or is_bare_metal(target):
        return None
    if layout != "nchwc":
        return int(layout[4:-1])
    triple = target.toolchain.triple
    if not triple:
        return host_block_width()
    if triple.startswith("x86_64"):
        return 8
    if triple.startswith("aarch64"):
        return 4
    return None


def worth_blocking(op, kernel: Kernel, v: int) -> bool:
    """The per-layer rule: a Conv that took Winograd's weights (hetgen/partition/prepack.py) stays NCHW,
    since it does 2.25 times fewer multiplications than any direct kernel; else both channel counts
    at least V (a Conv of 3 input channels, a network's first, would multiply padding), and the
    layer 2-D, ungrouped, with constant weights and bias."""
    if kernel.params.get("variant") == "winograd":
        return False
    x_type, w_type = op.input_types[0], op.input_types[1]
    if x_type is None or x_type.rank != 4 or w_type is None or w_type.rank != 4:
        return False
    if int(op.attr("group", 1)) != 1 or op.constant(1) is None:
        return False
    if op.has_input(2) and op.constant(2) is None:
        return False
    if any(t is not None and t.dtype is not DType.FLOAT32 for t in (*op.input_types, *op.output_types)):
        return False
    return x_type.shape[1] >= v and w_type.shape[0] >= v


# The input positions each kind of blocked unit reads blocked.
BLOCKED_INPUTS = {"conv": (0, 3), "pool": (0,), "add": (0, 1), "global": (0,)}


def _pool_kind(op: str) -> str | None:
    """The blocked kind of a float pool, from its traits: "pool" for a window pool (MaxPool,
    AveragePool), "global" for a global one; None for any other operator. The device model tiles
    these pools (QLinear pools share the work rule, not the tiling)."""
    definition = op_def(op)
    if definition is None:
        return None
    if definition.work is WorkRule.WINDOW and definition.tiling is Tiling.WINDOW:
        return "pool"
    if definition.work is WorkRule.GLOBAL and definition.tiling is Tiling.CHANNELS:
        return "global"
    return None


def blocked_kind(unit: Unit, graph: Graph, kernel: Kernel, inputs, v: int, written: Mapping[str, int]) -> str | None:
    """How `unit` runs blocked with width `v` (a key of BLOCKED_INPUTS), or None where it keeps
    NCHW. `written`: the tensors blocked units before it write, with their widths."""
    op = op_instance(unit, graph)
    if unit.head.op == "Conv":
        # a tensor blocked with another V (two CPUs of different vector widths) is read as NCHW
        clash = any(written.get(name, v) != v for name in inputs[:1] + inputs[3:4])
        return "conv" if not clash and worth_blocking(op, kernel, v) else None
    kind = _pool_kind(unit.head.op)
    if kind is not None:
        return kind if written.get(inputs[0]) == v and pool_nchwc.blockable(op) else None
    if unit.head.op == "Add" and not unit.is_pattern:
        both = len(inputs) == 2 and all(written.get(name) == v for name in inputs)
        return "add" if both and add_nchwc.blockable(op) else None
    return None


# A byte a reorder moves (read or written) costs about what blocking saves on this many
# multiply-adds. Measured (one thread, CPU time, 224x224): blocking every run, MobileNetV2's runs of
# 1x1 Convs between depthwise ones (1.7 to 4.7 multiply-adds per byte) took 1.41x NCHW's time; with
# this limit they stay NCHW (0.97x), while ResNet-18 keeps its deep run (over 500) and its lone
# strided 3x3 (24) but not its lone 1x1 shortcut (2.7): 0.92x, against 0.93x blocking all.
MACS_PER_REORDER_BYTE = 10


def paying_runs(graph: Graph, units, kernels, unit_inputs, chosen: dict[int, tuple[int, str]]):
    """`chosen` less the runs whose reorders cost more than blocking saves: a run (the units joined
    by the blocked tensors between them) is kept where its multiply-adds per byte its reorders
    move reach MACS_PER_REORDER_BYTE."""
    writer = {units[i].outputs[0]: i for i, (_, kind) in chosen.items() if kind != "global"}
    run_of = {i: i for i in chosen}

    def find(i: int) -> int:
        while run_of[i] != i:
            run_of[i] = run_of[run_of[i]]
            i = run_of[i]
        return i

    reordered_in: list[tuple[int, str]] = []  # (reader, tensor): reordered once per run
    for i, (_, kind) in chosen.items():
        for position in BLOCKED_INPUTS[kind]:
            name = unit_inputs[i][position] if position < len(unit_inputs[i]) else ""
            if name in writer:
                run_of[find(i)] = find(writer[name])
            elif name:
                reordered_in.append((i, name))
    read_plain = {name for i, inputs in enumerate(unit_inputs) if i not in chosen for name in inputs if name in writer}
    read_plain |= {name for name in graph.outputs if name in writer}
    macs = dict.fromkeys((find(i) for i in chosen), 0)
    moved = dict.fromkeys(macs, 0)
    for i, (_, kind) in chosen.items():
        macs[find(i)] += kernels[i].flops // 2 if kind == "conv" else 0
        out = units[i].outputs[0]
        moved[find(i)] += 2 * graph.types[out].nbytes if kind != "global" and out in read_plain else 0
    for run, name in {(find(i), name) for i, name in reordered_in}:
        moved[run] += 2 * graph.types[name].nbytes
    return {i: chosen[i] for i in chosen if macs[find(i)] >= MACS_PER_REORDER_BYTE * moved[find(i)]}


@dataclasses.dataclass(frozen=True)
class Reorder:
    """One reorder kernel at the edge of a run: NCHW tensor `tensor` to NCHW[v]c, or back."""

    tensor: str
    v: int
    to_blocked: bool
    kernel: Kernel


@dataclasses.dataclass(frozen=True)
class BlockedUnit:
    """How a unit runs blocked: its width, kind (a key of BLOCKED_INPUTS), blocked kernel, and the
    reorders the program runs just before it (of its inputs) and just after it (of its output)."""

    v: int
    kind: str
    kernel: Kernel
    reorders_in: tuple[Reorder, ...] = ()
    reorders_out: tuple[Reorder, ...] = ()


def blocked_name(tensor: str, v: int) -> str:
    return f"{tensor}.nchw{v}c"


def blocked_units(
    graph: Graph,
    units: tuple[Unit, ...],
    kernels: tuple[Kernel, ...],
    unit_inputs: list[tuple[str, ...]],
    assignment: Mapping[str, str],
    platform: Platform,
) -> dict[int, BlockedUnit]:
    """Per unit index, how it runs blocked, with the reorders at the edges of each run (module doc);
    units absent keep NCHW."""
    layout = platform.options.get("layout") or DEFAULT_LAYOUT
    widths = {t.path_str: block_width(t, layout) for t in platform.targets()}
    chosen: dict[int, tuple[int, str]] = {}  # unit index -> (V, kind)
    written: dict[str, int] = {}  # tensor -> V of the blocked unit writing it
    for index, unit in enumerate(units):  # in execution order: producers first
        v = widths.get(assignment[unit.head.name])
        if v is None or (unit.pattern is not None and unit.pattern.attention is not None):
            continue
        kind = blocked_kind(unit, graph, kernels[index], unit_inputs[index], v, written)
        if kind is not None:
            chosen[index] = (v, kind)
            if kind != "global":
                written[unit.outputs[0]] = v
    chosen = paying_runs(graph, units, kernels, unit_inputs, chosen)
    return _with_reorders(graph, units, unit_inputs, chosen) if chosen else {}


def _with_reorders(graph, units, unit_inputs, chosen: dict[int, tuple[int, str]]) -> dict[int, BlockedUnit]:
    written_blocked: dict[str, int] = {}  # NCHW tensor name -> V, for tensors a blocked unit writes
    for index, (v, kind) in chosen.items():
        if kind != "global":
            written_blocked[units[index].outputs[0]] = v
    read_plain = {
        name
        for index, inputs in enumerate(unit_inputs)
        if index not in chosen
        for name in inputs
        if name in written_blocked
    } | {name for name in graph.outputs if name in written_blocked}
    reordered_in: set[str] = set()
    result: dict[int, BlockedUnit] = {}
    for index in sorted(chosen):
        v, kind = chosen[index]
        unit, inputs = units[index], unit_inputs[index]
        try:
            kernel = LOWERINGS[kind](op_instance(unit, graph), v)
        except Unsupported as exc:  # blocked_kind admitted only what the blocked kernels support
            raise InternalError(f"{unit.head.label}: blocked kernel refused: {exc}") from exc
        before = []
        for position in BLOCKED_INPUTS[kind]:  # blocked, reordered in where needed (a Conv's)
            if position >= len(inputs) or not inputs[position]:
                continue
            tensor = inputs[position]
            if written_blocked.get(tensor) != v and tensor not in reordered_in:
                if tensor in written_blocked:  # blocked_kind chose no such reader
                    raise InternalError(f"{tensor} is read blocked with two widths")
                shape = tuple(graph.types[tensor].shape)
                before.append(Reorder(tensor, v, True, conv_nchwc.reorder(shape, v, True)))
                reordered_in.add(tensor)
        after = []
        output = unit.outputs[0]
        if kind != "global" and output in read_plain:
            shape = tuple(graph.types[output].shape)
            after.append(Reorder(output, v, False, conv_nchwc.reorder(shape, v, False)))
        result[index] = BlockedUnit(v, kind, kernel, tuple(before), tuple(after))
    return result


LOWERINGS = {"conv": conv_nchwc.lower, "pool": pool_nchwc.lower, "global": pool_nchwc.lower, "add": add_nchwc.lower}
