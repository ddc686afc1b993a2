"""hetgen.json, the contract between a generated project and the Python that loads, verifies and
benches it, as a typed value: codegen builds a `Manifest`, the pipeline adds what the build stage
decided, and `to_json` is the only place that spells its keys for writing (`from_json` for reading).
Everything that reads a built project's hetgen.json (the runtime, the CLI, explain) reads it through
`read_manifest`, which turns a missing, broken or other-version file into one clear error."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetgen.abi import Engine
from hetgen.errors import HetgenError
from hetgen.lower.program import Call, Copy, Lowered, Program
from hetgen.lower.workspace import STATE_HEADER_SIZE
from hetgen.spec.timeline import ProgramSteps

MANIFEST = "hetgen.json"  # its name in a generated project
MANIFEST_VERSION = 2  # the format `to_json` writes and `from_json` reads; any change to either bumps it


@dataclass(frozen=True)
class TensorEntry:
    """A model input or output as the caller passes it."""

    name: str
    dtype: str  # DType.label
    shape: tuple[int, ...]

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping) -> TensorEntry:
        return cls(data["name"], data["dtype"], tuple(data["shape"]))


@dataclass(frozen=True)
class CounterEntry:
    """What one of a simulated accelerator's per-command cycle counters counts."""

    program: int  # the sub-program (entry) the command belongs to
    what: str  # "kernel" | "move" | "tile load" | "tile store" | "weight load" | "other"
    nodes: tuple[str, ...]  # the IR nodes it is charged to
    tensor: str | None = None  # the tensor a load or store moves

    def to_json(self) -> dict:
        tensor = {} if self.tensor is None else {"tensor": self.tensor}
        return {"program": self.program, "what": self.what, **tensor, "nodes": list(self.nodes)}

    @classmethod
    def from_json(cls, data: Mapping) -> CounterEntry:
        return cls(data["program"], data["what"], tuple(data["nodes"]), data.get("tensor"))


@dataclass(frozen=True)
class SimulatorEntry:
    """Where a simulated accelerator's counters sit in the root's workspace, and what each counts."""

    counters_offset: int
    counters: tuple[CounterEntry, ...]


@dataclass(frozen=True)
class TargetEntry:
    path: str
    prefix: str
    role: str  # ProgramRole.value
    runtime: str  # Runtime.value
    arena_size: int
    intermediate_bytes: int
    liveness_lower_bound: int
    weights_bytes: int
    kernels: int
    estimated_us: float
    clock_mhz: float | None  # a simulated device's, or a counting co-processor's
    capacity_bytes: int | None  # a simulated device's local memory
    stats_device: int | None  # its index for `<prefix>_device_stats`
    simulator: SimulatorEntry | None = None

    def to_json(self) -> dict:
        fields = {
            "path": self.path,
            "prefix": self.prefix,
            "role": self.role,
            "runtime": self.runtime,
            "arena_size": self.arena_size,
            "intermediate_bytes": self.intermediate_bytes,
            "liveness_lower_bound": self.liveness_lower_bound,
            "weights_bytes": self.weights_bytes,
            "kernels": self.kernels,
            "estimated_us": self.estimated_us,
            "clock_mhz": self.clock_mhz,
            "capacity_bytes": self.capacity_bytes,
            "stats_device": self.stats_device,
        }
        if self.simulator is not None:
            fields["counters_offset"] = self.simulator.counters_offset
            fields["counters"] = [counter.to_json() for counter in self.simulator.counters]
        return fields

    @classmethod
    def from_json(cls, data: Mapping) -> TargetEntry:
        simulator = None
        if "counters" in data:
            counters = tuple(CounterEntry.from_json(c) for c in data["counters"])
            simulator = SimulatorEntry(data["counters_offset"], counters)
        plain = {key: data[key] for key in cls.__dataclass_fields__ if key != "simulator"}
        return cls(**plain, simulator=simulator)


@dataclass(frozen=True)
class EstimatePart:
    what: str  # "link" | "dma"
    target: str
    us: float


@dataclass(frozen=True)
class EstimateEntry:
    """The placement's figure for one group or (with `tensor`) one transfer."""

    name: str
    target: str
    label: str
    nodes: tuple[str, ...]
    estimate_us: float
    tensor: str = ""
    source: str = ""
    parts: tuple[EstimatePart, ...] = ()

    def to_json(self) -> dict:
        fields: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "label": self.label,
            "nodes": list(self.nodes),
            "estimate_us": self.estimate_us,
        }
        if self.tensor:
            fields.update(tensor=self.tensor, source=self.source)
        if self.parts:
            fields["parts"] = [{"what": p.what, "target": p.target, "us": p.us} for p in self.parts]
        return fields

    @classmethod
    def from_json(cls, data: Mapping) -> EstimateEntry:
        parts = tuple(EstimatePart(p["what"], p["target"], p["us"]) for p in data.get("parts", ()))
        return cls(
            data["name"],
            data["target"],
            data["label"],
            tuple(data["nodes"]),
            data["estimate_us"],
            data.get("tensor", ""),
            data.get("source", ""),
            parts,
        )


@dataclass(frozen=True)
class RemoteDeviceEntry:
    """A co-processor the board build's root reaches over the transport."""

    name: str
    target: str  # the co-processor's program (target path)
    server: str  # its device-server executable
    env: str  # the environment variable that names its transport
    plan_hash: str = ""  # hex: the generated project both ends are built from (the hello checks it)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "target": self.target,
            "server": self.server,
            "env": self.env,
            "plan_hash": self.plan_hash,
        }


@dataclass(frozen=True)
class Manifest:
    platform: str
    model: str
    prefix: str  # the root's C prefix
    inputs: tuple[TensorEntry, ...]
    outputs: tuple[TensorEntry, ...]
    targets: tuple[TargetEntry, ...]  # the root first
    estimates: tuple[EstimateEntry, ...]
    estimate_us: float  # the placement's total, as explain prices it
    workspace_size: int
    workspace_align: int
    remote_devices: tuple[RemoteDeviceEntry, ...] = ()
    # What the build stage decided, added by the pipeline: the sanitizers the libraries are built
    # with (the loader must know before it dlopens them) and the board build's own record.
    sanitize: tuple[str, ...] = ()
    board: Mapping[str, Any] | None = field(default=None)
    # The controllers' programs as `hetgen bench` replays them with concurrent devices: their timed
    # steps (hetgen/spec/timeline.py; lowering writes them, hetgen/runtime/replay.py times them).
    program: ProgramSteps | None = field(default=None)
    # The SHA-256 of the model it was built from (hetgen/frontend/fingerprint.py), added by the
    # pipeline; "" in a project an older hetgen wrote.
    model_sha256: str = ""
    # Under the energy objective only (hetgen/partition/energy.py EnergyReport.to_manifest): the
    # estimate and the figures `hetgen bench` prices the simulated counts with; None elsewhere.
    energy: Mapping[str, Any] | None = None
    # Frames in flight of the root's `_run_frames` (objective throughput, hetgen/spec/frames.py);
    # 0: the project runs one frame at a time (absent from hetgen.json then).
    frame_depth: int = 0
    # The placement's pipeline at the estimates (hetgen/partition/throughput.py: `Pipeline.to_json`),
    # where the objective is throughput: what `hetgen bench` compares the simulated frames with.
    pipeline: Mapping[str, Any] | None = field(default=None)

    def to_json(self) -> dict:
        extra = {} if self.energy is None else {"energy": self.energy}
        if self.frame_depth:
            extra["frame_depth"] = self.frame_depth
        if self.pipeline is not None:
            extra["pipeline"] = self.pipeline
        return {
            **extra,
            "hetgen_manifest": MANIFEST_VERSION,
            "model_sha256": self.model_sha256,
            "platform": self.platform,
            "model": self.model,
            "prefix": self.prefix,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "targets": [t.to_json() for t in self.targets],
            "estimates": [e.to_json() for e in self.estimates],
            "estimate_us": self.estimate_us,
            "workspace_size": self.workspace_size,
            "workspace_align": self.workspace_align,
            "remote_devices": [d.to_json() for d in self.remote_devices],
            "sanitize": list(self.sanitize),
            "board": self.board,
            "program": self.program.to_json() if self.program is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> Manifest:
        return cls(
            data["platform"],
            data["model"],
            data["prefix"],
            tuple(TensorEntry.from_json(t) for t in data["inputs"]),
            tuple(TensorEntry.from_json(t) for t in data["outputs"]),
            tuple(TargetEntry.from_json(t) for t in data["targets"]),
            tuple(EstimateEntry.from_json(e) for e in data["estimates"]),
            data["estimate_us"],
            data["workspace_size"],
            data["workspace_align"],
            tuple(RemoteDeviceEntry(**d) for d in data.get("remote_devices", ())),
            tuple(data.get("sanitize", ())),
            data.get("board"),
            program=ProgramSteps.from_json(data["program"]) if data.get("program") is not None else None,
            model_sha256=data.get("model_sha256", ""),
            energy=data.get("energy"),
            frame_depth=int(data.get("frame_depth", 0)),
            pipeline=data.get("pipeline"),
        )

    def to_bytes(self) -> bytes:
        """hetgen.json's content: sorted keys, so generation stays byte-for-byte reproducible."""
        return (json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n").encode()


def read_manifest(out_dir: str | Path) -> Manifest:
    """The manifest of the project generated in `out_dir`; a HetgenError naming the file and what to
    do when it is missing, is not the JSON hetgen writes, or was written by another hetgen version."""
    path = Path(out_dir) / MANIFEST
    regenerate = f"run `hetgen PLATFORM MODEL -o {out_dir}` again to regenerate the project"
    if not path.is_file():
        raise HetgenError(
            f"{out_dir}: not a hetgen project (no {MANIFEST}); run `hetgen PLATFORM MODEL -o {out_dir}` first"
        )
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise HetgenError(f"{path}: cannot be read as JSON ({error}); {regenerate}") from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string"}.get(type(data), "a number or constant")
        raise HetgenError(f"{path}: is not what hetgen writes (a JSON object; this is {kind}); {regenerate}")
    version = data.get("hetgen_manifest")
    if version != MANIFEST_VERSION:
        written = "no format version" if version is None else f"format {version!r}"
        raise HetgenError(
            f"{path}: written by another hetgen version ({written}; this hetgen reads format "
            f"{MANIFEST_VERSION}); {regenerate}"
        )
    try:
        manifest = Manifest.from_json(data)
    except KeyError as error:
        raise HetgenError(f"{path}: has no {error.args[0]!r} entry; {regenerate}") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise HetgenError(f"{path}: is not what hetgen writes ({error}); {regenerate}") from None
    if not (isinstance(manifest.prefix, str) and manifest.prefix.isidentifier()):
        raise HetgenError(f"{path}: prefix {manifest.prefix!r} is not a C identifier; {regenerate}")
    for name, least in (("workspace_size", 0), ("workspace_align", 1)):
        value = getattr(manifest, name)
        if type(value) is not int or value < least:
            raise HetgenError(f"{path}: {name} {value!r} is not a byte count; {regenerate}")
    return manifest


def counter_entries(program: Program) -> tuple[CounterEntry, ...]:
    """What each of a simulated accelerator's per-command cycle counters counts, in counter order:
    the key for joining `hetgen bench`'s simulated times with the placement's groups."""
    counters = []
    for index, steps in enumerate(program.entries):
        calls = [step for step in steps if isinstance(step, Call)]
        first_call = tuple(calls[0].unit.nodes) if calls else ()
        for step in steps:
            if isinstance(step, Call):
                counters.append(CounterEntry(index, "kernel", tuple(step.unit.nodes)))
            elif isinstance(step, Copy) and step.work is not None and step.work.engine is Engine.MOVE:
                counters.append(CounterEntry(index, "move", first_call))  # a cascade's SRAM-to-SRAM copy
            elif isinstance(step, Copy) and step.src.tensor.startswith("sram:"):  # a tile's store
                counters.append(CounterEntry(index, "tile store", first_call, step.dst.tensor))
            elif isinstance(step, Copy) and step.dst.tensor.startswith("sram:"):  # a tile's load
                counters.append(CounterEntry(index, "tile load", first_call, step.src.tensor))
            elif isinstance(step, Copy):  # a weight load, charged to the first kernel that reads it
                reader = next((c for c in calls if any(a.tensor == step.dst.tensor for a in c.args)), None)
                nodes = tuple(reader.unit.nodes) if reader else ()
                counters.append(CounterEntry(index, "weight load", nodes, step.dst.tensor))
            else:
                counters.append(CounterEntry(index, "other", ()))
    return tuple(counters)


def simulator_entry(program: Program, state_offset: int) -> SimulatorEntry:
    """Where a simulated accelerator's counters sit (its state block's offset in the root's
    workspace, past the header) and what each one counts."""
    return SimulatorEntry(state_offset + STATE_HEADER_SIZE, counter_entries(program))


def estimate_entries(lowered: Lowered) -> tuple[EstimateEntry, ...]:
    """The placement's estimate for each group and transfer, recorded when the project is generated
    (bench joins the groups with the simulator's counters through their node names)."""
    return tuple(
        EstimateEntry(
            e.name,
            e.target,
            e.label,
            tuple(e.nodes),
            round(e.estimate_us, 3),
            e.tensor,
            e.source if e.tensor else "",
            tuple(EstimatePart(what, target, round(us, 3)) for what, target, us in e.parts),
        )
        for e in lowered.estimates
    )
