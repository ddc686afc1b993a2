"""The root's arena split across its memory banks (`memories:`, hetgen/platform/banks.py).

Every activation and scratch area the root plans goes to one of the banks that hold the arena, in
their preference order (fastest first by default), by heat: a buffer's accesses (the steps that
write or read it) per step it stays live, so a tensor used by the next layer and then dead ranks
above a skip connection held across a whole block, and a kernel's scratch (live one step) above
both. The hottest buffers fill the first bank up to what it can give the arena (its size less what
the board puts there besides: the stack, the example's buffers); whatever does not fit spills to
the next, and so on. Each bank is planned by the liveness planner (hetgen/lower/memory.py), and a
bank whose plan comes out larger than its room (fragmentation) gives its coldest buffers to the
next bank until it fits. The last bank takes the rest or is refused, named, with the bytes over.

The banks' plans are laid end to end in one plan (each bank at its own `base`, ALIGNMENT-aligned),
so buffer references, the verifier and the liveness checks see one arena; codegen turns an offset
in bank k's range into that bank's own storage (hetgen/codegen/viewmodel.py), and the bare-metal
linker script gives each bank its region and section (hetgen/codegen/baremetal.py).

The price: `group_traffic` tells the cost model, per placement group, the bytes and accesses of
its kernels in each bank, and hetgen/partition/choices.py `banked` prices the groups with them; the
per-bank lines explain prints (`bank_report`) are those groups' shares summed, at `Bank.access_us`.

Deterministic: the order is (heat, name), and the planner places the same intervals alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetgen.errors import InternalError, PlacementError
from hetgen.lower.memory import ALIGNMENT, Interval, MemoryPlan, plan_memory
from hetgen.platform.banks import KIB, bank_of, holding
from hetgen.platform.model import Bank, Target

# Bytes kept free in the bank that holds .data and .bss besides the arena: the runtime's and board
# support's own static data (hg_board.c's semihosting block, the stats), measured at ~300 B on the
# Cortex-M builds (arm-none-eabi-size of a built ELF less its workspace and buffers), rounded up.
STATIC_DATA_RESERVE = 1024


@dataclass(frozen=True)
class BankArena:
    """One bank's part of a program's arena: offsets [base, base + size) of the program's plan."""

    bank: Bank
    base: int
    size: int  # the bank's plan, aligned
    capacity: int  # what the bank can give the arena (its size less `reserved`)
    reserved: int  # what else the board puts in it: the stack, the example's buffers, static data
    buffers: tuple[str, ...]  # the buffers planned in it, sorted

    @property
    def end(self) -> int:
        return self.base + self.size


def _aligned(value: int) -> int:
    return (value + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def example_buffers_bytes(graph) -> int:
    """The board example's input and output buffers: one per graph input and output, each at
    least a byte (C has no empty arrays), each aligned as the planner aligns buffers."""
    return sum(_aligned(max(graph.types[name].nbytes, 1)) for name in (*graph.inputs, *graph.outputs))


def example_buffers_bank(target: Target, graph) -> Bank | None:
    """The bank that holds the board example's input and output buffers, None for a target
    without banks: the stack's bank (with .data and .bss), beside the stack and the runtime's
    static data, where they fit; else the last bank that holds the arena (the one that takes what
    the faster ones cannot) where they fit there, in a section of its own. A model whose buffers
    outgrow the stack's small bank (a 64 KiB DTCM) still builds on a board with a large SRAM."""
    stack_bank = bank_of(target.memories, "stack")
    if stack_bank is None:
        return None
    io = example_buffers_bytes(graph)
    if _stack_bytes(target) + io + STATIC_DATA_RESERVE <= stack_bank.size:
        return stack_bank
    roomy = [bank for bank in holding(target.memories, "arena") if not bank.read_only and io <= bank.size]
    return roomy[-1] if roomy else stack_bank


def bank_reserves(target: Target, graph) -> dict[str, int]:
    """What a banked root's board keeps in its banks besides the arena: the bank holding the stack
    also holds .data and .bss (the runtime's static data), and the example's input and output
    buffers lie in `example_buffers_bank` (the stack's where they fit)."""
    stack_bank = bank_of(target.memories, "stack")
    if stack_bank is None:
        return {}
    reserved = {stack_bank.name: _stack_bytes(target) + STATIC_DATA_RESERVE}
    buffers = example_buffers_bank(target, graph)
    reserved[buffers.name] = reserved.get(buffers.name, 0) + example_buffers_bytes(graph)
    return reserved


def _stack_bytes(target: Target) -> int:
    return int(target.attrs.get("stack_kib", 0)) * KIB


def heat(interval: Interval, accesses: int) -> float:
    """Accesses per step live: what a byte of fast memory given to this buffer buys."""
    return accesses / (interval.last - interval.first + 1)


def plan_banks(
    target: Target, intervals: list[Interval], accesses: Mapping[str, int], reserved: Mapping[str, int]
) -> tuple[MemoryPlan, tuple[BankArena, ...]]:
    """Assign `intervals` to the arena banks of `target` by heat and plan each (module docstring).
    `accesses`: steps touching each buffer; `reserved`: bytes of a bank kept for other things."""
    banks = holding(target.memories, "arena")
    order = sorted(intervals, key=lambda iv: (-heat(iv, accesses.get(iv.name, 1)), iv.name))
    remaining = order
    arenas: list[BankArena] = []
    buffers: list[tuple[str, int, int]] = []
    base = 0
    for index, bank in enumerate(banks):
        room = max(bank.size - reserved.get(bank.name, 0), 0)
        last = index == len(banks) - 1
        chosen = remaining if last else _fitting(remaining, room)
        plan = plan_memory(chosen)
        while not last and plan.arena_size > room and chosen:
            chosen = chosen[:-1]  # the coldest goes on to the next bank
            plan = plan_memory(chosen)
        if last and plan.arena_size > room:
            raise PlacementError(_overflow(target, bank, plan, room, reserved.get(bank.name, 0), banks))
        names = {iv.name for iv in chosen}
        remaining = [iv for iv in remaining if iv.name not in names]
        size = _aligned(plan.arena_size)
        arenas.append(BankArena(bank, base, size, room, reserved.get(bank.name, 0), tuple(sorted(names))))
        buffers += [(name, base + offset, nbytes) for name, offset, nbytes in plan.buffers]
        base += size
    live = [0] * (max((iv.last for iv in intervals), default=-1) + 2)
    for iv in intervals:
        live[iv.first] += iv.nbytes
        live[iv.last + 1] -= iv.nbytes
    bound = running = 0
    for delta in live:
        running += delta
        bound = max(bound, running)
    combined = MemoryPlan(tuple(sorted(buffers)), base, sum(iv.nbytes for iv in intervals), bound)
    return combined, tuple(arenas)


def _fitting(order: list[Interval], room: int) -> list[Interval]:
    """The hottest buffers whose aligned bytes live at every step stay within `room` (the liveness
    bound of the bank's share: no plan of them can be smaller)."""
    if not order:
        return []
    live = [0] * (max(iv.last for iv in order) + 1)
    chosen = []
    for iv in order:
        size = _aligned(max(iv.nbytes, 1))
        if max(live[iv.first : iv.last + 1]) + size > room:
            continue
        for step in range(iv.first, iv.last + 1):
            live[step] += size
        chosen.append(iv)
    return chosen


def _overflow(target: Target, bank: Bank, plan: MemoryPlan, room: int, reserved: int, banks) -> str:
    over = plan.arena_size - room
    largest = max(plan.buffers, key=lambda buffer: (buffer[2], buffer[0]), default=None)
    detail = f", largest {largest[0]!r} {largest[2]:,} B" if largest else ""
    earlier = ", ".join(f"'{b.name}'" for b in banks[:-1])
    spilled = f" after {earlier} filled" if earlier else ""
    return (
        f"{target.path_str}: bank '{bank.name}' ({bank.size // KIB} KiB) overflows by {over:,} B: the arena's "
        f"buffers placed there{spilled} need {plan.arena_size:,} B{detail}, and {reserved:,} B of the bank are "
        f"reserved (stack, buffers, static data). Fix: give bank '{bank.name}' more kib, add a bank that holds "
        "the arena, or use a smaller model or input shapes"
    )


def check_weights_bank(
    target: Target, weights: int, arenas: tuple[BankArena, ...], reserved: Mapping[str, int]
) -> None:
    """A hosted banked root's weights against their bank: they, the arena part planned there and
    what is reserved there must fit its kib (a bare-metal root's image is checked whole, code
    included, by the board fit: hetgen/build/baremetal.py)."""
    bank = next((b for b in target.memories if "weights" in b.holds), None)
    if bank is None:
        return
    arena = sum(a.size for a in arenas if a.bank.name == bank.name)
    kept = reserved.get(bank.name, 0)
    need = weights + arena + kept
    if need > bank.size:
        parts = (
            f"weights {weights:,} B"
            + (f", arena {arena:,} B" if arena else "")
            + (f", reserved {kept:,} B" if kept else "")
        )
        raise PlacementError(
            f"{target.path_str}: bank '{bank.name}' ({bank.size // KIB} KiB) overflows by {need - bank.size:,} B: "
            f"{need:,} B needed ({parts}). Fix: give bank '{bank.name}' more kib, hold the weights in a larger "
            "bank, or use a smaller model"
        )


def bank_of_offset(arenas: tuple[BankArena, ...], offset: int) -> BankArena:
    for arena in arenas:
        if arena.base <= offset < arena.end:
            return arena
    return arenas[-1]


def group_traffic(
    target: Target, unit_groups, infos, kernels, graph, plan: MemoryPlan, arenas: tuple[BankArena, ...]
) -> dict[str, dict[str, tuple[int, int]]]:
    """Per placement group of a banked root, per bank: (the bytes of the buffers its kernels read
    and write there, the number of those accesses), which the cost model prices the group at
    (hetgen/partition/choices.py `banked`). Each kernel unit on `target` (`unit_groups[i]`: its
    group's name, a reorder counted in the group of the unit it serves) reads each input and writes
    each output once, and writes and reads its scratch: an activation or scratch area in the bank
    the plan put it in, a weight block in the weights bank, the caller's input and output buffers
    in the bank of the board example's (`example_buffers_bank`: the stack's, where they fit)."""
    offsets = {name: offset for name, offset, _ in plan.buffers}
    weights = bank_of(target.memories, "weights")
    io = set(graph.inputs) | set(graph.outputs)
    buffers = example_buffers_bank(target, graph)

    def bank(name: str) -> str:
        if name in offsets:
            return bank_of_offset(arenas, offsets[name]).bank.name
        if name in graph.constants:
            return weights.name
        if name in io:
            return buffers.name
        raise InternalError(f"{target.path_str}: buffer {name!r} of the root has no bank")

    traffic: dict[str, dict[str, tuple[int, int]]] = {}
    for index, (group, info) in enumerate(zip(unit_groups, infos)):
        if info.target != target:
            continue
        parts = traffic.setdefault(group, {})
        streams = [(name, _nbytes(graph, name), 1) for name in (*info.inputs, *info.outputs) if name]
        if kernels[index].scratch_bytes:
            streams.append((f"scratch:{index}", kernels[index].scratch_bytes, 2))
        for name, nbytes, accesses in streams:
            where = bank(name)
            before = parts.get(where, (0, 0))
            parts[where] = (before[0] + nbytes * accesses, before[1] + accesses)
    return traffic


def _nbytes(graph, name: str) -> int:
    return int(graph.constants[name].nbytes) if name in graph.constants else graph.types[name].nbytes


def bank_report(lowered) -> list[dict]:
    """Per bank of a banked root: its size, what it holds (arena buffers, weights: every program's,
    as the image links them), the bytes used, and the root's traffic there per run with its price
    (`Bank.access_us`), as the cost model priced the groups (`Program.bank_traffic`: the groups'
    shares summed; hetgen/partition/choices.py `banked`). A device's weights are read by its own
    DMA, priced by its figures. [] without banks."""
    program = lowered.root
    if not program.banks:
        return []
    devices_weights = sum(other.weights.size for other in lowered.programs if other is not program)
    weights_bank = next((bank for bank in program.target.memories if "weights" in bank.holds), None)
    arenas = {arena.bank.name: arena for arena in program.banks}
    traffic = {name: (nbytes, accesses) for name, nbytes, accesses in program.bank_traffic}
    rows = []
    for bank in program.target.memories:
        arena = arenas.get(bank.name)
        used = arena.size if arena else 0
        touched, accesses = traffic.get(bank.name, (0.0, 0))
        buffers = list(arena.buffers) if arena else []
        weights = []
        if bank == weights_bank:
            weights = [entry.tensor for entry in program.weights.entries]
            used += program.weights.size + devices_weights
        rows.append(
            {
                "bank": bank.name,
                "size": bank.size,
                "origin": bank.origin,
                "read_only": bank.read_only,
                "holds": list(bank.holds),
                "used": used,
                "reserved": arena.reserved if arena else 0,
                "tensors": [name for name in buffers if not name.startswith("scratch:")],
                "scratch": [name for name in buffers if name.startswith("scratch:")],
                "weights": weights,
                "device_weights": devices_weights if bank == weights_bank else 0,
                "touched_bytes": round(touched),
                "accesses": accesses,
                "access_us": round(bank.access_us(touched, accesses), 3),
            }
        )
    return rows


def bank_text(rows: list[dict], target: str) -> str:
    """`bank_report` as explain's text: a line per bank, then what it holds."""
    if not rows:
        return ""
    lines = [f"memory banks of {target} (hetgen/lower/banks.py):"]
    for row in rows:
        listed = row["tensors"] + row["scratch"]
        shown = ", ".join(listed[:8]) + (f", ... ({len(listed) - 8} more)" if len(listed) > 8 else "")
        lines.append(
            f"  {row['bank']}: {row['used']:,} of {row['size']:,} B used"
            + (f" ({row['reserved']:,} B reserved: stack, buffers, static data)" if row["reserved"] else "")
            + f"; holds {', '.join(row['holds'])}; {row['touched_bytes']:,} B touched in {row['accesses']} accesses"
            f" = {row['access_us']:g} us a run"
        )
        if listed:
            lines.append(f"    tensors and scratch ({len(listed)}): {shown}")
        if row["weights"] or row["device_weights"]:
            devices = f", and the devices' {row['device_weights']:,} B" if row["device_weights"] else ""
            lines.append(f"    weights: the root's {len(row['weights'])} blocks{devices}")
    return "\n".join(lines)
