"""Fuzz cases: a random model (tests/fuzz_graphs.py), a platform (a shipped one or random text),
random pins and compile options; and how one case is run and judged against onnxruntime.

`fuzz_cases()` is the hypothesis strategy; `run_case(case, folder)` compiles it with
`hetgen.compile`, runs it with `hetgen.load(...).run` and compares with onnxruntime (graph
optimisations off), giving an `Outcome`: "pass", "refused" (a clean ModelError or PlacementError for
something hetgen does not claim), "fail" (an internal error, a build failure, any other exception, a
wrong value or shape) or "invalid" (onnxruntime rejects the model: a bug in the generator).
`plain_names` renames everything, so a failure that goes away is a name-escaping bug.
"""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from hypothesis import strategies as st

from fuzz_graphs import REPO, RUNTIMES, SHIPPED_PLATFORMS, models


@dataclass
class FuzzCase:
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    platform_text: str
    platform_file: str | None  # a shipped platform's path (it may name files next to it), else None
    pins: dict[str, str] = field(default_factory=dict)
    ops: tuple[str, ...] = ()
    placement: str = "cost"  # hetgen.compile's placement= ("cost" | "greedy")
    weights: str = "blob"  # hetgen.compile's weights= ("blob" | "c_array")

    def _repr_pretty_(self, printer, cycle) -> None:  # what hypothesis prints for a falsifying example
        printer.text(repr(self))

    def __repr__(self) -> str:
        return (
            f"FuzzCase(ops={list(self.ops)}, platform={self.platform_file or 'random'}, pins={self.pins}, "
            f"placement={self.placement!r}, weights={self.weights!r},\n"
            f"{onnx.printer.to_text(self.model.graph)}\nplatform:\n{self.platform_text})"
        )


# -- platforms and pins --
def _kib(draw) -> int:
    return draw(st.sampled_from((16, 64, 72, 96, 256, 512, 2048)))


def _link(draw) -> str:
    bandwidth = draw(st.sampled_from((0.05, 1, 4, 32)))
    latency = draw(st.sampled_from((0, 0.5, 5, 500)))
    return f"{{bandwidth_gbps: {bandwidth}, latency_us: {latency}}}"


@st.composite
def random_platform_text(draw) -> str:
    """A platform of one of three shapes: a lone CPU, a CPU with NPUs, a CPU with an
    accelerator that has its own co-processor (as tests/test_random_placements.py's)."""
    root = draw(st.sampled_from(("native", "aarch64")))
    runtime = draw(st.sampled_from(RUNTIMES))
    shape = draw(st.integers(0, 2))
    if shape == 0:
        return f"name: rnd\ntarget: {{kind: {root}, runtime: {runtime}}}\n"
    if shape == 1:
        npus = "".join(
            f"    npu{i}: {{kind: npu, sram_kib: {_kib(draw)}, macs_per_cycle: {draw(st.sampled_from((16, 256)))}, "
            f"link: {_link(draw)}}}\n"
            for i in range(draw(st.integers(1, 2)))
        )
        return f"name: rnd\ntarget:\n  kind: {root}\n  runtime: {runtime}\n  devices:\n{npus}"
    return f"""name: rnd
target:
  kind: {root}
  runtime: {runtime}
  devices:
    vdevice0:
      kind: accelerator-with-coprocessor
      link: {_link(draw)}
      host: {{kind: riscv64, runtime: {draw(st.sampled_from(RUNTIMES))}}}
      devices:
        npu0: {{kind: npu, sram_kib: {_kib(draw)}}}
"""


def pinnable_targets(platform) -> list[tuple[str, frozenset[str] | None]]:
    """(target path, the ops its patterns start with; None = any) for each target that runs ops."""
    from hetgen.platform.model import Role

    targets = []
    for target in platform.root.walk():
        if target.role is Role.CONTROLLER:
            targets.append((target.path_str, None))
        elif target.role is Role.ACCELERATOR:
            heads = {op for pattern in target.kind.patterns for step in pattern.chain[:1] for op in step.ops}
            targets.append((target.path_str, frozenset(heads)))
    return targets


@st.composite
def random_pins(draw, model: onnx.ModelProto, platform) -> dict[str, str]:
    from test_random_placements import live_nodes  # pins must name nodes the frontend keeps

    pins = {}
    targets = pinnable_targets(platform)
    for node in live_nodes(model):
        if not node.name or not draw(st.booleans()):
            continue
        fitting = [path for path, ops in targets if ops is None or node.op_type in ops]
        pins[node.name] = draw(st.sampled_from(fitting))
    present = {node.op_type for node in model.graph.node}
    labelled = [
        (p.label, path)
        for path, ops in targets
        if ops is not None
        for p in platform.target(path).kind.patterns
        if p.chain and set(p.chain[0].ops) & present
    ]
    if labelled and draw(st.integers(0, 3)) == 0:  # a pattern label pins every node it matches
        label, path = draw(st.sampled_from(labelled))
        pins[label] = path
    return pins


@st.composite
def fuzz_cases(draw, max_ops: int = 6, hostile_names: bool | None = None, platform: str | None = None) -> FuzzCase:
    """A case on the shipped platform named `platform`, or (None) on a shipped or random one."""
    from hetgen.platform.loader import load_platform, load_platform_text

    model, feeds, used = draw(models(max_ops, hostile_names))
    shipped = platform or draw(st.sampled_from((*SHIPPED_PLATFORMS, None, None)))
    if shipped is None:
        text, file = draw(random_platform_text()), None
        platform = load_platform_text(text)
    else:
        file = str(REPO / "platforms" / f"{shipped}.yaml")
        text, platform = Path(file).read_text(), load_platform(file)
    pins = draw(random_pins(model, platform)) if draw(st.integers(0, 2)) else {}
    placement = draw(st.sampled_from(("cost", "greedy")))
    weights = draw(st.sampled_from(("blob", "c_array")))
    return FuzzCase(model, feeds, text, file, pins, used, placement, weights)


# -- running a case --
@dataclass(frozen=True)
class Outcome:
    status: str  # "pass" | "refused" | "fail" | "invalid" (onnxruntime rejects the model: a generator bug)
    reason: str = ""  # a short key to count refusals and failures by
    detail: str = ""


def tolerance(model: onnx.ModelProto) -> tuple[float, float]:
    """(rtol, atol scale): float results of long chains and accumulations differ in the last bits."""
    heavy = {"Conv", "ConvTranspose", "Gemm", "MatMul", "LayerNormalization", "Resize", "ReduceProd", "Pow"}
    heavy |= {"InstanceNormalization", "ReduceLogSumExp", "Softmax", "LogSoftmax"}
    if any(node.op_type in heavy for node in model.graph.node):
        return 2e-4, 2e-4
    return 1e-5, 1e-5


def refusal_key(message: str) -> str:
    """A message with its names and numbers blanked, to count refusals by kind."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    line = lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0] if lines else ""
    line = re.sub(r"^(\w+) \([^)]*\): ", r"\1: ", line)  # "Op (node name): why" -> "Op: why"
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", line)
    line = re.sub(r"\d+", "N", line)
    return line[:140]


def _reference(case: FuzzCase):
    from hetgen.runtime.reference import ort_session

    try:
        session = ort_session(case.model.SerializeToString())
        return session.run(None, case.feeds), None
    except Exception as exc:  # onnxruntime refuses the model: the generator made something invalid
        return None, Outcome("invalid", f"onnxruntime: {type(exc).__name__}", str(exc)[:2000])


def _platform(case: FuzzCase):
    from hetgen.platform.loader import load_platform, load_platform_text

    return load_platform(case.platform_file) if case.platform_file else load_platform_text(case.platform_text)


def run_case(case: FuzzCase, folder: Path) -> Outcome:
    """Compile, run and compare one case; never raises."""
    import hetgen
    from hetgen.build import BuildOptions
    from hetgen.build.toolchain import missing_tools
    from hetgen.errors import BuildError, HetgenError, ModelError, PlacementError

    expected, invalid = _reference(case)
    if invalid is not None:
        return invalid
    try:
        platform = _platform(case)
        build = {"opt": ("-O1",), "native_tuning": False}
        native_only = bool(missing_tools(platform, BuildOptions(**build)))  # a board toolchain this machine lacks
        out = hetgen.compile(
            platform, case.model, out=folder, pins=case.pins, placement=case.placement, weights=case.weights,
            native_only=native_only, **build,
        )  # fmt: skip
    except (ModelError, PlacementError) as exc:
        message = str(exc)
        if "internal error" in message:
            return Outcome("fail", "internal error", message)
        return Outcome("refused", f"{type(exc).__name__}: {refusal_key(message)}", message)
    except BuildError as exc:
        return Outcome("fail", "the generated C does not build", str(exc)[-4000:])
    except HetgenError as exc:
        return Outcome("fail", f"{type(exc).__name__}: {refusal_key(str(exc))}", str(exc))
    except Exception as exc:
        return Outcome("fail", f"{type(exc).__name__} while compiling", traceback.format_exc()[-4000:])
    try:
        got = hetgen.load(out).run(case.feeds)
    except Exception as exc:
        return Outcome("fail", f"{type(exc).__name__} while running", traceback.format_exc()[-4000:])
    rtol, atol = tolerance(case.model)
    for info, wanted in zip(case.model.graph.output, expected):
        actual = got.get(info.name)
        if actual is None:
            return Outcome("fail", "missing output", f"{info.name!r} not in {sorted(got)}")
        if actual.shape != wanted.shape or actual.dtype != wanted.dtype:
            detail = f"{info.name!r}: hetgen {actual.dtype}{actual.shape}, onnxruntime {wanted.dtype}{wanted.shape}"
            return Outcome("fail", "output shape or dtype", detail)
        scale = float(np.max(np.abs(wanted[np.isfinite(wanted)]), initial=1.0)) if wanted.dtype.kind == "f" else 0.0
        try:
            np.testing.assert_allclose(actual, wanted, rtol=rtol, atol=atol * max(scale, 1.0) if scale else 0)
        except AssertionError as exc:
            return Outcome("fail", "wrong values", f"output {info.name!r}:{exc}")
    return Outcome("pass")


def plain_names(case: FuzzCase) -> FuzzCase:
    """The same case with every tensor and node renamed t0, t1, ... and n0, n1, ...: a failure that
    goes away is a name-escaping bug."""
    model = onnx.ModelProto.FromString(case.model.SerializeToString())
    graph = model.graph
    tensors: dict[str, str] = {"": ""}
    for name in [*(i.name for i in graph.input), *(i.name for i in graph.initializer)]:
        tensors.setdefault(name, f"t{len(tensors)}")
    for node in graph.node:
        for name in [*node.input, *node.output]:
            tensors.setdefault(name, f"t{len(tensors)}")
    nodes = {node.name: f"n{index}" for index, node in enumerate(graph.node) if node.name}
    for info in [*graph.input, *graph.output, *graph.value_info]:
        info.name = tensors[info.name]
    for init in graph.initializer:
        init.name = tensors[init.name]
    for node in graph.node:
        node.input[:] = [tensors[n] for n in node.input]
        node.output[:] = [tensors[n] for n in node.output]
        node.name = nodes.get(node.name, "")
    graph.name = "plain"
    feeds = {tensors[name]: value for name, value in case.feeds.items()}
    pins = {nodes.get(key, key): path for key, path in case.pins.items()}
    return FuzzCase(model, feeds, case.platform_text, case.platform_file, pins, case.ops, case.placement, case.weights)


def save_case(case: FuzzCase, outcome: Outcome, folder: Path) -> Path:
    """Write a case as model.onnx, platform.yaml, pins.json, feeds.npz and outcome.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(case.model.SerializeToString())
    (folder / "platform.yaml").write_text(case.platform_text)
    options = {"platform_file": case.platform_file, "pins": case.pins, "placement": case.placement}
    (folder / "pins.json").write_text(json.dumps(options | {"weights": case.weights}, indent=1))
    np.savez(folder / "feeds.npz", **{f"arg{i}": v for i, v in enumerate(case.feeds.values())})
    (folder / "names.json").write_text(json.dumps(list(case.feeds)))
    (folder / "outcome.txt").write_text(f"{outcome.status}: {outcome.reason}\n\n{outcome.detail}\n\n{case!r}\n")
    return folder


def load_case(folder: Path) -> FuzzCase:
    model = onnx.load(folder / "model.onnx")
    meta = json.loads((folder / "pins.json").read_text())
    names = json.loads((folder / "names.json").read_text())
    arrays = np.load(folder / "feeds.npz")
    feeds = {name: arrays[f"arg{i}"] for i, name in enumerate(names)}
    platform_file = meta["platform_file"]
    text = (folder / "platform.yaml").read_text()
    return FuzzCase(
        model, feeds, text, platform_file, meta["pins"], (), meta.get("placement", "cost"), meta.get("weights", "blob")
    )
