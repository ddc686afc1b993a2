"""What a placement costs, summed in one place: explain's total, the placement's `total_us` and the
estimate `hetgen bench` shows beside the simulation all come from `price`, so they cannot differ.

One thing runs at a time (the controllers wait for their devices), so the program's time is the sum
of its groups' times (each with its launch) and its copies' times.
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

    @property
    def total_us(self) -> float:
        return self.group_us + self.transfer_us


def price(groups: Iterable[Group], transfers: Iterable[Transfer]) -> Price:
    groups, transfers = tuple(groups), tuple(transfers)
    by_target: dict[str, float] = {}
    for group in groups:
        by_target[group.target] = by_target.get(group.target, 0.0) + group.cost_us
    return Price(
        float(sum(g.cost_us for g in groups)),
        float(sum(g.launch_us for g in groups)),
        float(sum(t.cost_us for t in transfers)),
        MappingProxyType(by_target),
    )


def placement_price(placement) -> Price:
    return price(placement.groups, placement.transfers)
