"""What a placement costs, in one place: explain's total, the placement's `total_us` and the
estimate `hetgen bench` shows beside the simulation all come from here, so they cannot differ.

Devices run concurrently with their controllers (hetgen/spec/timeline.py): the program's time
is the makespan of the program lowering emits, each group at its cost and each copy at its link and
DMA time. `group_us` and `transfer_us` are the parts it is made of; their sum is what it would take
one thing at a time, so `total_us` is at most that sum, and less where work overlaps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hetgen.partition.placement import Group, Transfer


@dataclass(frozen=True)
class Price:
    group_us: float  # every group's time, launches included
    launch_us: float  # the launches inside group_us
    transfer_us: float  # every copy between two places
    by_target: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # group time per target
    makespan_us: float | None = None  # the program's time with devices running concurrently

    @property
    def serial_us(self) -> float:
        """One thing at a time: every group and every copy, one after the other."""
        return self.group_us + self.transfer_us

    @property
    def total_us(self) -> float:
        return self.serial_us if self.makespan_us is None else self.makespan_us


def price(groups: Iterable[Group], transfers: Iterable[Transfer], makespan_us: float | None = None) -> Price:
    groups, transfers = tuple(groups), tuple(transfers)
    by_target: dict[str, float] = {}
    for group in groups:
        by_target[group.target] = by_target.get(group.target, 0.0) + group.cost_us
    return Price(
        float(sum(g.cost_us for g in groups)),
        float(sum(g.launch_us for g in groups)),
        float(sum(t.cost_us for t in transfers)),
        MappingProxyType(by_target),
        makespan_us,
    )


def placement_price(placement) -> Price:
    return price(placement.groups, placement.transfers, placement.total_us)
