"""The generated program's time at what the devices counted: the manifest's timed steps run through
the one interpreter the placement is priced with (hetgen/spec/timeline.py: `run_timeline`), with
`Counted` as the timing source."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hetgen.spec.timeline import DeviceCopy, DeviceRef, KernelCall


@dataclass(frozen=True)
class Counted:
    """What the devices counted: each accelerator's sub-program at the cycles the simulator counted
    for it (`invocations`, keyed (device, program), its invocation overhead included), each copy at
    what its device counts for it (its `CopyTiming` over the step's bytes, times the device's
    `copy_scale`: what it counted over what its model gives the program's copies, 1 where the bytes
    that crossed were the program's); each controller's kernels, which run natively and are not
    simulated, at their share of their group's estimate (`shares`, from `call_shares`; empty: at 0,
    the simulated total holds no estimate)."""

    shares: Mapping[tuple[str, tuple[str, ...]], float]
    invocations: Mapping[tuple[str, int], float]
    copy_scale: Mapping[str, float] = field(default_factory=dict)

    def call_us(self, target: str, call: KernelCall) -> float:
        return self.shares.get((target, call.nodes), 0.0)

    def copy_us(self, controller: str, device: DeviceRef, copy: DeviceCopy) -> float:
        if device.copies is None:
            return 0.0
        return device.copies.us(copy.nbytes) * self.copy_scale.get(device.path, 1.0)

    def invocation_us(self, device: str, program: int) -> float:
        return self.invocations.get((device, program), 0.0)
