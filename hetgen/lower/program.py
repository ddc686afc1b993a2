"""The lower stage's output: per-target programs of kernel calls over planned buffers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from hetgen.abi import Region  # where a buffer lives: `enum hg_region` of the generated hg_constants.h
from hetgen.ir import TensorType
from hetgen.lower.memory import MemoryPlan
from hetgen.lower.work import Work
from hetgen.lower.workspace import SimulatedDevice, WorkspaceLayout
from hetgen.ops.base import Kernel
from hetgen.platform.device_model import DEFAULT_CLOCK_MHZ, DeviceModel  # a simulated accelerator's parameters
from hetgen.platform.model import Runtime, Target
from hetgen.spec.timeline import (
    ControllerSteps,
    CopyTiming,
    DeviceCopy,
    DeviceInvoke,
    DeviceRef,
    DeviceWait,
    KernelCall,
    ProgramSteps,
    TimedStep,
)


@dataclass(frozen=True)
class BufferRef:
    region: Region
    position: int  # byte offset (ARENA, WEIGHTS, DEVICE) or index (INPUT, OUTPUT)
    tensor: str = ""  # the IR tensor, for comments and debugging


@dataclass(frozen=True)
class KernelUnit:
    """One generated C function: an operator and the activations fused into it."""

    fn: str  # C function name, unique within the platform
    nodes: tuple[str, ...]  # IR node names it computes
    label: str  # human-readable, for comments
    kernel: Kernel


@dataclass(frozen=True)
class Call:
    unit: KernelUnit
    args: tuple[BufferRef, ...]
    work: Work | None = None  # what a simulated accelerator is asked to do (accelerators only)

    def timed(self) -> KernelCall:
        return KernelCall(self.unit.nodes)


@dataclass(frozen=True)
class Copy:
    """Copy `nbytes` between two buffers of the same target (outputs that alias inputs/constants)."""

    src: BufferRef
    dst: BufferRef
    nbytes: int
    work: Work | None = None  # an accelerator's DMA (a weight load, a tile's load or store)
    # A tile's DMA is strided: `count` segments of nbytes / count, `src_stride` and `dst_stride`
    # bytes apart at each end (the simulator runs it; hetgen/lower/tiled.py).
    count: int = 1
    src_stride: int = 0
    dst_stride: int = 0


@dataclass(frozen=True)
class DeviceCopyIn:
    device: int  # index into Program.devices
    src: BufferRef
    dst_offset: int
    nbytes: int
    tensor: str = ""

    def timed(self) -> DeviceCopy:
        return DeviceCopy(self.device, self.nbytes)


@dataclass(frozen=True)
class DeviceCopyOut:
    device: int
    src_offset: int
    dst: BufferRef
    nbytes: int
    tensor: str = ""

    def timed(self) -> DeviceCopy:
        return DeviceCopy(self.device, self.nbytes, True)


@dataclass(frozen=True)
class Invoke:
    """Run sub-program `program` on child device `device` (asynchronously; see Wait)."""

    device: int
    program: int

    def timed(self) -> DeviceInvoke:
        return DeviceInvoke(self.device, self.program)


@dataclass(frozen=True)
class Wait:
    device: int

    def timed(self) -> DeviceWait:
        return DeviceWait(self.device)


Step = Call | Copy | DeviceCopyIn | DeviceCopyOut | Invoke | Wait


def timed_steps(entry) -> tuple[TimedStep, ...]:
    """An entry's steps as hetgen/spec/timeline.py times them (a copy within a target is not timed)."""
    return tuple(step.timed() for step in entry if not isinstance(step, Copy))


@dataclass(frozen=True)
class TensorSpec:
    name: str  # the model's tensor name
    c_name: str  # a C identifier derived from it
    type: TensorType


@dataclass(frozen=True)
class WeightEntry:
    tensor: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Weights:
    entries: tuple[WeightEntry, ...]
    blob: bytes

    @property
    def size(self) -> int:
        return len(self.blob)

    def offset(self, tensor: str) -> int:
        cached = self.__dict__.get("_offsets")
        if cached is None:
            cached = {entry.tensor: entry.offset for entry in self.entries}
            object.__setattr__(self, "_offsets", cached)
        return cached[tensor]


class ProgramRole(enum.Enum):
    ROOT = "root"  # the root controller: entry 0 is the model's run function
    COPROCESSOR = "coprocessor"  # a composite's host: entries are sub-programs its parent invokes
    ACCELERATOR = "accelerator"  # a simulated device: entries are command lists


@dataclass(frozen=True)
class CountedLink:
    """The link from a co-processor's controller to it, as the co-processor's copy_in and copy_out
    count it (hg_link): cycles at `clock_mhz`."""

    clock_mhz: float
    latency_cycles: float
    bytes_per_cycle: float


@dataclass(frozen=True)
class Program:
    """What one target runs. Each entry is a step list: the root has one (its run function); a
    device has one per sub-program its controller invokes."""

    target: Target
    role: ProgramRole
    runtime: Runtime
    units: tuple[KernelUnit, ...]
    entries: tuple[tuple[Step, ...], ...]
    memory: MemoryPlan
    weights: Weights
    inputs: tuple[TensorSpec, ...] = ()  # the root's model inputs
    outputs: tuple[TensorSpec, ...] = ()
    devices: tuple[str, ...] = ()  # child target paths, indexed by DeviceCopyIn.device etc.
    device_model: DeviceModel | None = None  # accelerators only
    estimated_us: float = 0.0  # the cost model's estimate of this target's work per run
    workspace: WorkspaceLayout | None = None  # this program's block of the caller's workspace
    counted_link: CountedLink | None = None  # a co-processor behind a link: it counts the copies over it
    # A tiled accelerator's SRAM: its local memory's first bytes, where every kernel call's buffers
    # lie (hetgen/lower/tiled.py); activations live past it. 0: not tiled.
    sram_size: int = 0
    # Past the SRAM: the emulating C kernels' workspace (im2col, GEMM packing), not the device's.
    emulation_scratch: int = 0
    # Its worker pool (hetgen.platform.threads): whether it has one, and the thread count it is
    # generated with (hg_threads_config.h) and priced at. An accelerator's: none, 1.
    pool: bool = False
    threads: int = 1
    # A banked root (`memories:`): its arena's part in each bank, laid end to end in `memory`
    # (hetgen/lower/banks.py); the first is the workspace's arena, the others static storage. ()
    # for every other program: `memory` is one arena.
    banks: tuple = ()
    # A banked root: the bank of its board example's input and output buffers
    # (hetgen/lower/banks.py `example_buffers_bank`); None for every other program.
    buffers_bank: object = None
    # Its traffic per bank per run, ((bank, bytes, accesses), ...), as the cost model priced its
    # groups (hetgen/partition/choices.py `banked`); explain's per-bank lines read it. () unbanked.
    bank_traffic: tuple = ()
    # A root whose arena is one with a device's activations (hetgen/lower/shared_arena.py): that
    # device's path, and where in its local memory the shared arena starts (past its SRAM and
    # emulation workspace). The workspace puts no arena of the root's own before the devices' blocks.
    arena_in: str = ""
    arena_base: int = 0

    @property
    def workspace_arena_size(self) -> int:
        """The arena bytes in the caller's workspace: the first bank's for a banked root."""
        return self.banks[0].size if self.banks else self.memory.arena_size

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(step for entry in self.entries for step in entry)

    def copy_timing(self) -> CopyTiming:
        """How this device counts one copy to or from its controller (hg_sim.c, hg_link_account)."""
        model, link = self.device_model, self.counted_link
        if model is not None:
            return CopyTiming(
                model.clock_mhz,
                model.dma_setup_cycles,
                model.dma_bytes_per_cycle,
                model.link_latency_cycles,
                model.link_bytes_per_cycle,
            )
        if link is not None:
            return CopyTiming(link.clock_mhz, 0, 0.0, link.latency_cycles, link.bytes_per_cycle)
        return CopyTiming(DEFAULT_CLOCK_MHZ, 0, 0.0)


@dataclass(frozen=True)
class Lowered:
    name: str  # platform name: the API prefix and output folder
    model_name: str
    programs: tuple[Program, ...]  # the root controller first
    simulated: tuple[SimulatedDevice, ...] = ()  # every simulated accelerator, where its state sits in the workspace
    estimates: tuple[GroupEstimate, ...] = ()  # the placement's groups and transfers, as it priced them
    estimate_us: float = 0.0  # the placement's total (hetgen.partition.price): what explain says
    # The placement as lowering priced it: the one given, or, on a root with memory banks, that one
    # with its groups priced at the banks lowering put their buffers in (partition/choices.py
    # `banked`). What explain shows, and `estimates` and `estimate_us` come from it.
    placement: object = field(default=None, compare=False, repr=False)

    @property
    def root(self) -> Program:
        return self.programs[0]

    def timed_program(self) -> ProgramSteps:
        """The program's steps as hetgen/spec/timeline.py times them (and the manifest records them
        for `hetgen bench`): each controller's entries and devices, with how each device counts a
        copy; each accelerator's sub-programs as the kernel calls they run."""
        by_path = {p.target.path_str: p for p in self.programs}
        controllers, accelerators = {}, {}
        for program in self.programs:
            if program.role is ProgramRole.ACCELERATOR:
                accelerators[program.target.path_str] = tuple(
                    tuple(step.timed() for step in entry if isinstance(step, Call)) for entry in program.entries
                )
                continue
            devices = []
            for path in program.devices:
                child = by_path.get(path) or by_path[self._host_of(path)]  # a composite: its host's program
                devices.append(DeviceRef(child.target.path_str, child.copy_timing()))
            entries = tuple(timed_steps(entry) for entry in program.entries)
            controllers[program.target.path_str] = ControllerSteps(tuple(devices), entries)
        return ProgramSteps(self.root.target.path_str, controllers, accelerators)

    def _host_of(self, path: str) -> str:
        for program in self.programs:
            if program.role is ProgramRole.COPROCESSOR and program.target.path_str.rsplit("/", 1)[0] == path:
                return program.target.path_str
        return path


@dataclass(frozen=True)
class GroupEstimate:
    """What the placement's cost model expects of one group (or, with `tensor`, one transfer)."""

    name: str  # the group's name (a transfer: "tensor -> dst")
    target: str
    nodes: tuple[str, ...]  # IR node names; empty for a transfer
    label: str
    estimate_us: float
    tensor: str = ""  # a transfer's tensor
    source: str = ""  # a transfer's source target
    # a transfer's cost by what pays it: ("link", target below the link, us) or ("dma", accelerator, us)
    parts: tuple[tuple[str, str, float], ...] = ()
