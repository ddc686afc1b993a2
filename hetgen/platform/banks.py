"""A controller's memory banks: `memories:` on a target, as Zephyr's devicetree memory nodes (one
node per memory: its address, size and attributes) and Vela's memory modes (which memory holds the
weights and which the arena) describe them.

```yaml
target:
  kind: cortex-m55
  memories:
    itcm: {origin: 0x00000000, kib: 512, bandwidth_gbps: 0.128, latency_cycles: 1, read_only: true}
    dtcm: {origin: 0x20000000, kib: 64, bandwidth_gbps: 0.128, latency_cycles: 1}
    sram: {origin: 0x21000000, kib: 4096, bandwidth_gbps: 0.032, latency_cycles: 8}
```

Each bank: `kib` (its size), `origin` (its address: bare metal needs one), `bandwidth_gbps`, one of
`latency_ns` / `latency_cycles` (at the target's clock_mhz), `read_only` (the program never writes
it: flash; it may hold code and weights only), `shared` (the CPU reaches it: true, the default and
the only value a controller's bank can take; false is refused), and
`holds`, what it holds, a subset of BANK_CONTENTS. Without `holds` anywhere the rule decides: code
and weights go to the first read-only bank; the arena to every writable bank, fastest first
(bandwidth, then latency, then the order written) and the stack (with .data and .bss) to the
fastest. With `holds` on a bank, that bank holds exactly what it lists, and the arena banks are the
ones listing `arena`, in the order written (a preference order).

A target without `memories` keeps its kind's one map: a bare-metal core's flash_*/ram_* attributes
(`default_banks`: flash holds code and weights, RAM the arena and stack), so every platform that
declares no banks generates the same files as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hetgen.platform.model import Bank, Target
from hetgen.platform.schema import Problems, check_keys, expect_map, expect_seq, is_c_identifier, read_number
from hetgen.platform.yaml_positions import YMap, YNode, YScalar, describe

BANK_KEYS = ("kib", "origin", "bandwidth_gbps", "latency_ns", "latency_cycles", "read_only", "shared", "holds")
BANK_CONTENTS = ("code", "weights", "arena", "stack")
KIB = 1024
ADDRESS_SPACE = 2**32  # a bare-metal Cortex-M addresses 4 GiB
MAX_BANKS = 8


def parse_memories(node: YNode, attrs: Mapping[str, Any], what: str, problems: Problems) -> tuple[Bank, ...]:
    """The banks of a `memories:` mapping, checked (every problem recorded with its position)."""
    body = expect_map(node, f"'memories' of {what}", problems, node.pos)
    if body is None:
        return ()
    if not body.entries:
        problems.add(body.pos, f"'memories' of {what} is empty; declare at least one bank or remove the key")
        return ()
    if len(body.entries) > MAX_BANKS:
        problems.add(body.pos, f"'memories' of {what} declares {len(body.entries)} banks; at most {MAX_BANKS}")
    clock = attrs.get("clock_mhz")
    banks, positions = [], {}
    for key, value in body.entries:
        bank = _bank(key, value, clock, what, problems)
        if bank is not None:
            banks.append(bank)
            positions[bank.name] = key.pos
    banks = _resolve_holds(body, banks, what, problems)
    _check_layout(banks, positions, body, what, problems)
    return tuple(banks)


def _bank(key: YScalar, node: YNode, clock, what: str, problems: Problems) -> Bank | None:
    name = key.value
    where = f"bank '{name}' of {what}"
    if not is_c_identifier(name):
        problems.add(key.pos, f"{where}: a bank's name must be a C identifier (it names a section)")
        return None
    body = expect_map(node, where, problems, key.pos)
    if body is None:
        return None
    before = len(problems)
    check_keys(body, BANK_KEYS, where, problems)
    if body.get("kib") is None:
        problems.add(body.pos, f"{where} needs 'kib' (its size in KiB)")
    if body.get("bandwidth_gbps") is None:
        problems.add(body.pos, f"{where} needs 'bandwidth_gbps' (what a stream of reads or writes reaches)")
    kib = read_number(body.get("kib"), f"'kib' of {where}", problems, minimum=1) if body.get("kib") else None
    origin = None
    if body.get("origin") is not None:
        origin = read_number(body.get("origin"), f"'origin' of {where}", problems, integer=True, minimum=0)
    bandwidth = None
    if body.get("bandwidth_gbps") is not None:
        bandwidth = read_number(body.get("bandwidth_gbps"), f"'bandwidth_gbps' of {where}", problems, minimum=1e-9)
    latency = _latency(body, clock, where, problems)
    flags = {}
    for flag, default in (("read_only", False), ("shared", True)):
        value = body.get(flag)
        if value is None:
            flags[flag] = default
        elif isinstance(value, YScalar) and isinstance(value.value, bool):
            flags[flag] = value.value
        else:
            problems.add(value.pos, f"'{flag}' of {where} must be true or false, not {describe(value)}")
    if flags.get("shared") is False:
        problems.add(
            body.get("shared").pos,
            f"{where}: 'shared: false' declares a memory the controller cannot reach, but every bank of "
            "'memories' holds what the controller's program reads and writes (code, weights, arena, stack); "
            "an accelerator's local memory is its own kind's (e.g. sram_kib). Remove the bank or 'shared'",
        )
    holds = _holds(body.get("holds"), where, problems) if body.get("holds") is not None else ()
    if len(problems) != before or kib is None or bandwidth is None or latency is None:
        return None
    size = int(kib * KIB)
    if size != kib * KIB:
        problems.add(body.get("kib").pos, f"'kib' of {where} must be a whole number of bytes, not {kib} KiB")
        return None
    return Bank(name, size, origin, float(bandwidth), float(latency), flags["read_only"], flags["shared"], holds)


def _latency(body: YMap, clock, where: str, problems: Problems) -> float | None:
    ns, cycles = body.get("latency_ns"), body.get("latency_cycles")
    if ns is not None and cycles is not None:
        problems.add(cycles.pos, f"{where} gives both 'latency_ns' and 'latency_cycles'; keep one")
        return None
    if cycles is not None:
        value = read_number(cycles, f"'latency_cycles' of {where}", problems, minimum=0)
        if value is None:
            return None
        if not clock:
            problems.add(cycles.pos, f"'latency_cycles' of {where} needs the target's clock_mhz; give 'latency_ns'")
            return None
        return value * 1e3 / float(clock)
    if ns is not None:
        return read_number(ns, f"'latency_ns' of {where}", problems, minimum=0)
    return 0.0


def _holds(node: YNode, where: str, problems: Problems) -> tuple[str, ...]:
    items = expect_seq(node, f"'holds' of {where}", problems)
    if items is None:
        return ()
    found = []
    for item in items.items:
        if not isinstance(item, YScalar) or item.value not in BANK_CONTENTS:
            problems.add(item.pos, f"'holds' of {where}: {describe(item)} is not one of {', '.join(BANK_CONTENTS)}")
        elif item.value not in found:
            found.append(item.value)
    return tuple(found)


def _speed(bank: Bank) -> tuple[float, float]:
    return (-bank.bandwidth_gbps, bank.latency_ns)


def _resolve_holds(body: YMap, banks: list[Bank], what: str, problems: Problems) -> list[Bank]:
    """Every bank with what it holds: as written where any bank says (`holds`), else by the rule."""
    if not banks:
        return banks
    explicit = any(bank.holds for bank in banks)
    if not explicit:
        read_only = [bank for bank in banks if bank.read_only]
        writable = sorted((bank for bank in banks if not bank.read_only), key=_speed)  # stable: order written
        holds: dict[str, list[str]] = {bank.name: [] for bank in banks}
        if read_only:
            holds[read_only[0].name] += ["code", "weights"]
        elif writable:
            holds[writable[-1].name] += ["code", "weights"]  # no flash: the image lies in the slowest RAM
        for index, bank in enumerate(writable):
            holds[bank.name] += ["arena"] + (["stack"] if index == 0 else [])
        resolved = [_with_holds(bank, tuple(holds[bank.name])) for bank in banks]
    else:
        resolved = banks
    for content in BANK_CONTENTS:
        holders = [bank.name for bank in resolved if content in bank.holds]
        single = content != "arena"
        if not holders:
            problems.add(body.pos, f"'memories' of {what}: no bank holds the {content}; add it to one bank's 'holds'")
        elif single and len(holders) > 1:
            problems.add(
                body.pos, f"'memories' of {what}: the {content} is held by {', '.join(holders)}; one bank only"
            )
    for bank in resolved:
        wrong = [content for content in bank.holds if bank.read_only and content in ("arena", "stack")]
        if wrong:
            problems.add(
                body.pos,
                f"bank '{bank.name}' of {what} is read_only but holds the {' and '.join(wrong)}, which the program writes",
            )
    return resolved


def _with_holds(bank: Bank, holds: tuple[str, ...]) -> Bank:
    return Bank(
        bank.name, bank.size, bank.origin, bank.bandwidth_gbps, bank.latency_ns, bank.read_only, bank.shared, holds
    )


def _check_layout(banks: list[Bank], positions, body: YMap, what: str, problems: Problems) -> None:
    """Sizes within the address space, and no two banks' address ranges overlapping."""
    mapped = []
    for bank in banks:
        if bank.origin is None:
            continue
        end = bank.origin + bank.size
        if end > ADDRESS_SPACE:
            problems.add(
                positions[bank.name],
                f"bank '{bank.name}' of {what} ends at 0x{end:x}, past the 32-bit address space (0x{ADDRESS_SPACE:x}); "
                "check its origin and kib",
            )
        mapped.append((bank.origin, end, bank.name))
    mapped.sort()
    for (start_a, end_a, name_a), (start_b, _, name_b) in zip(mapped, mapped[1:]):
        if start_b < end_a:
            problems.add(
                positions[name_b],
                f"bank '{name_b}' of {what} (from 0x{start_b:08x}) overlaps bank '{name_a}' "
                f"(0x{start_a:08x}-0x{end_a - 1:08x}); banks must not share addresses",
            )


def check_bare_metal_banks(banks: tuple[Bank, ...], node: YNode, what: str, problems: Problems) -> None:
    """A bare-metal target's banks are its linker regions: each needs an origin, and the image
    (code, weights) is programmed into read-only memory, which nothing copies to RAM at reset."""
    for bank in banks:
        if bank.origin is None:
            problems.add(
                node.pos, f"bank '{bank.name}' of {what} needs an 'origin': a bare-metal image links to addresses"
            )
        loaded = [content for content in ("code", "weights") if content in bank.holds]
        if loaded and not bank.read_only:
            problems.add(
                node.pos,
                f"bank '{bank.name}' of {what} holds the {' and '.join(loaded)} but is not read_only: a bare-metal "
                "image is programmed into read-only memory (flash, MRAM); declare such a bank with read_only: true",
            )


def check_hosted_banks(banks: tuple[Bank, ...], node: YNode, what: str, problems: Problems) -> None:
    """A hosted program's memory is placed by its operating system's loader: a bank's `origin`
    (a linker region's address on bare metal) would take no effect, so it is refused."""
    for bank in banks:
        if bank.origin is not None:
            problems.add(
                node.pos,
                f"bank '{bank.name}' of {what} has an 'origin', which only a bare-metal image links to; a hosted "
                "program's memory is placed by its operating system. Remove 'origin' (or use a bare-metal kind)",
            )


def default_banks(target: Target) -> tuple[Bank, ...]:
    """A target's banks: those it declares, else its kind's one map as two banks (a bare-metal
    core's flash and RAM; figures from its cost figures), else none (a hosted CPU's memory is
    not modelled)."""
    if target.memories:
        return target.memories
    attrs = target.attrs
    if not all(name in attrs for name in ("flash_origin", "flash_kib", "ram_origin", "ram_kib")):
        return ()
    bandwidth = target.figures.bandwidth_gbps
    return (
        Bank(
            "flash",
            int(attrs["flash_kib"]) * KIB,
            int(attrs["flash_origin"]),
            bandwidth,
            0.0,
            True,
            True,
            ("code", "weights"),
        ),
        Bank(
            "ram",
            int(attrs["ram_kib"]) * KIB,
            int(attrs["ram_origin"]),
            bandwidth,
            0.0,
            False,
            True,
            ("arena", "stack"),
        ),
    )


def holding(banks: tuple[Bank, ...], content: str) -> tuple[Bank, ...]:
    """The banks that hold `content` (BANK_CONTENTS), in preference order."""
    return tuple(bank for bank in banks if content in bank.holds)


def bank_of(banks: tuple[Bank, ...], content: str) -> Bank | None:
    found = holding(banks, content)
    return found[0] if found else None


def describe_bank(bank: Bank) -> str:
    place = f" at 0x{bank.origin:08x}" if bank.origin is not None else ""
    flags = ", read-only" if bank.read_only else ""
    return f"{bank.name} ({bank.size // KIB} KiB{place}, {bank.bandwidth_gbps:g} GB/s, {bank.latency_ns:g} ns{flags})"


def bank_document(bank: Bank) -> dict[str, Any]:
    """A bank as the canonical tree writes it (reloads to the same bank)."""
    document: dict[str, Any] = {"kib": bank.size / KIB if bank.size % KIB else bank.size // KIB}
    if bank.origin is not None:
        document["origin"] = bank.origin
    document.update(
        bandwidth_gbps=bank.bandwidth_gbps,
        latency_ns=bank.latency_ns,
        read_only=bank.read_only,
        shared=bank.shared,
        holds=list(bank.holds),
    )
    return document
