"""ONNX backend node tests as hetgen conformance cases.

`cases()` lists the backend test cases (`onnx.backend.test.case.node`) whose every node is an
operator hetgen registers; `run_case(case)` compiles and runs one and compares it with the case's
expected outputs. `run_case` is the seam: today it goes through `tests/harness.py` (one kernel per
node, no planner); the full pipeline can replace it without touching the cases. `run_cases` gives
the same outcomes for many cases at once, several times faster (their kernels are compiled
together); tests/test_conformance.py uses it, so a new runner replaces both (or makes `run_cases`
map `run_case`).

Statuses: "pass"; "skip" when the case needs something hetgen does not support (a dtype it has no
C type for, a lowering that raises `Unsupported`, a value that must be a compile-time constant but
is computed); "fail" otherwise, with the detail.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import hashlib
import os
import re
import subprocess
import tempfile
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx

import caches
import harness
from hetgen.codegen.kernels import kernel_source
from hetgen.errors import ModelError
from hetgen.frontend.onnx_import import import_onnx
from hetgen.ir import DType, Graph
from hetgen.ops.base import Unsupported
from hetgen.ops.registry import const_inputs, op_def, supported_ops
from hetgen.templates_dir import templates_dir

# Nodes the frontend folds away before any lowering sees them.
FOLDED_OPS = frozenset({"Constant"})

# Cases that fail for a reason we accept, with the reason. The test marks them xfail (strict: a
# case that starts passing must be taken off the list).
_RANDOM_DROPOUT = (
    "training-mode Dropout draws a random mask (the expected output comes from numpy's seeded "
    "generator); hetgen compiles for inference, where the frontend makes Dropout the identity"
)
_FLOAT16_ROUNDING = (
    "float16 Attention: hetgen rounds each operator of the body to float16 (as onnxruntime does per "
    "node); the expected output keeps float32 between them: 2 of 192 elements differ by one float16 ulp"
)
_DFT_NOISE = (
    "inverse DFT: where the exact result is 0, the expected output holds numpy's float32 FFT rounding "
    "noise (1.9e-7); hetgen's double-precision transform gives 3e-15, past the case's atol of 1e-7"
)
EXPECTED_FAILURES: dict[str, str] = {
    "test_dft_inverse": _DFT_NOISE,
    "test_dft_inverse_opset19": _DFT_NOISE,
    "test_attention_4d_causal_fp16": _FLOAT16_ROUNDING,
    "test_attention_4d_causal_fp16_expanded": _FLOAT16_ROUNDING,
    "test_training_dropout": _RANDOM_DROPOUT,
    "test_training_dropout_default": _RANDOM_DROPOUT,
    "test_training_dropout_default_mask": _RANDOM_DROPOUT,
    "test_training_dropout_mask": _RANDOM_DROPOUT,
}


# Every skipped case of a claimed operator, pinned with its reason (tests/conformance_skips.txt).
# tests/test_conformance.py fails when a case skips that is not pinned, skips for another reason,
# or passes while pinned: a case can no longer stop being supported without anyone noticing.
PINNED_SKIPS_FILE = Path(__file__).resolve().parent / "conformance_skips.txt"
_PIN_HEADER = """\
# ONNX node cases of operators hetgen claims that it skips, one per line: `case: reason`.
# The reason is the skip's detail on one line. tests/test_conformance.py fails when a case
# skips that is not here, skips for another reason, or passes while listed here.
# Regenerate after a deliberate change: PYTHONPATH=. python tests/conformance.py --pin
"""


def skip_reason(detail: str) -> str:
    """How a skip's detail is pinned: one line, spaces collapsed, at most 300 characters."""
    return " ".join(detail.split())[:300].strip()


def read_pinned_skips(path: Path = PINNED_SKIPS_FILE) -> dict[str, str]:
    pinned = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.partition(": ")
            pinned[name.strip()] = reason.strip()
    return pinned


def write_pinned_skips(
    outcomes: dict[str, tuple[str, str]], path: Path = PINNED_SKIPS_FILE, header: str = _PIN_HEADER
) -> int:
    lines = [
        f"{name}: {skip_reason(detail)}" for name, (status, detail) in sorted(outcomes.items()) if status == "skip"
    ]
    path.write_text(header + "".join(line + "\n" for line in lines))
    return len(lines)


PINNED_SKIPS: dict[str, str] = read_pinned_skips() if PINNED_SKIPS_FILE.exists() else {}
PIN_COMMAND = "PYTHONPATH=. python tests/conformance.py --pin"


def pin_mismatch(
    name: str,
    status: str,
    detail: str,
    pinned: dict[str, str] | None = None,
    path: Path = PINNED_SKIPS_FILE,
    command: str = PIN_COMMAND,
) -> str | None:
    """Why the outcome of case `name` disagrees with the pinned skips (`pinned`, read from `path`,
    rewritten by `command`; conformance's by default); None when it agrees."""
    pins = PINNED_SKIPS if pinned is None else pinned
    pin = pins.get(name)
    fix = f"fix it, or pin it in {path.name} ({command})"
    if status == "skip" and pin is None:
        return f"{name} newly skips ({skip_reason(detail)}); {fix}"
    if status == "skip" and pin != skip_reason(detail):
        return f"{name} skips for another reason now: {skip_reason(detail)!r}, pinned {pin!r}; {fix}"
    if status == "pass" and pin is not None:
        return f"{name} passes now: take it off {path.name} ({command})"
    return None


@dataclass(frozen=True)
class Outcome:
    status: str  # "pass" | "skip" | "fail" | "xfail" (a failure listed in EXPECTED_FAILURES)
    detail: str = ""


# onnx makes its node cases by running each operator's Python generator (numpy computes every
# expected output): 7 s of CPU on an idle machine, paid by each process that collects them (every
# xdist worker). The first process stores them in a cache folder, keyed by the versions and files
# that make them, under a lock, so the other workers and later runs load them in a fraction of a
# second. The folder is the tests' cache (tests/caches.py: HG_TEST_CACHE, "off": none).


def _cases_cache() -> Path | None:
    import sys

    import onnx.backend.test.case.node as node_cases

    folder = caches.folder()
    if folder is None:
        return None
    sources = Path(node_cases.__file__).parent
    stamp = max(f.stat().st_mtime_ns for f in sources.rglob("*.py"))
    key = f"{onnx.__version__}|{np.__version__}|{sys.version}|{sources}|{stamp}"
    return folder / f"onnx-node-cases-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pickle"


def _collect_cases() -> tuple:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(collect_testcases(""))


@functools.lru_cache(maxsize=1)
def all_cases() -> tuple:
    """Every ONNX backend node test case (onnx.backend.test.case.node), from the cache when it has them."""
    import fcntl
    import pickle

    path = _cases_cache()
    if path is None:
        return _collect_cases()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "w")  # noqa: SIM115  (held until the cache is written)
    except OSError:
        return _collect_cases()
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be writing it: wait, then read its cases
        try:
            with open(path, "rb") as cached:
                return pickle.load(cached)
        except Exception:  # absent, or written by something else: make it again
            pass
        cases = _collect_cases()
        partial = path.with_suffix(f".{os.getpid()}.part")
        try:
            with open(partial, "wb") as out:
                pickle.dump(cases, out, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(partial, path)
        except OSError:
            partial.unlink(missing_ok=True)
        return cases


def case_ops(case) -> frozenset[str]:
    return frozenset(node.op_type for node in case.model.graph.node)


def cases(ops: frozenset[str] | None = None) -> list:
    """The backend node test cases that only use registered (or folded) operators."""
    known = (supported_ops() if ops is None else ops) | FOLDED_OPS
    selected = [c for c in all_cases() if case_ops(c) <= known and case_ops(c) - FOLDED_OPS]
    return sorted(selected, key=lambda c: c.name)


def _unsupported_value(value_info: onnx.ValueInfoProto) -> str | None:
    kind = value_info.type.WhichOneof("value")
    if kind != "tensor_type":
        return f"{value_info.name!r} is a {kind}, not a tensor"
    code = value_info.type.tensor_type.elem_type
    if DType.from_onnx(code) is None:
        return f"{value_info.name!r} has dtype {onnx.TensorProto.DataType.Name(code).lower()}"
    return None


def _frozen_inputs(model: onnx.ModelProto) -> tuple[str, ...]:
    """Graph inputs that feed a `const_inputs` slot: they become initializers."""
    graph_inputs = {vi.name for vi in model.graph.input}
    frozen = []
    for node in model.graph.node:
        for index in const_inputs(node.op_type):
            if index < len(node.input) and node.input[index] in graph_inputs:
                frozen.append(node.input[index])
    return tuple(dict.fromkeys(frozen))


def _as_array(value) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):  # some cases store their data as protos
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def _compare(name: str, actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> str | None:
    expected = _as_array(expected)
    if actual.shape != expected.shape:
        return f"{name}: shape {actual.shape}, expected {expected.shape}"
    if actual.dtype != expected.dtype:
        return f"{name}: dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.kind in "fc":
        close = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = actual == expected
    if close.all():
        return None
    bad = np.argwhere(~close)
    where = tuple(int(i) for i in bad[0])
    return (
        f"{name}: {len(bad)} of {expected.size} elements differ; first at {where}: "
        f"got {actual[where]!r}, expected {expected[where]!r}"
    )


def _checked_inputs(case) -> tuple[list, str | None]:
    """The graph inputs fed by the data sets, or why the case cannot run."""
    model = case.model
    if not case.data_sets:
        return [], "no data sets to compare with"
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    for value_info in (*graph_inputs, *model.graph.output):
        problem = _unsupported_value(value_info)
        if problem:
            return graph_inputs, f"unsupported: {problem}"
    return graph_inputs, None


def _check_outputs(case, outputs, results) -> tuple[str, str]:
    for vi, expected in zip(case.model.graph.output, outputs):
        mismatch = _compare(vi.name, results[vi.name], expected, case.rtol, case.atol)
        if mismatch:
            return "fail", mismatch
    return "pass", ""


def run_case(case) -> tuple[str, str]:
    """Run one backend test case through the harness; returns (status, detail)."""
    graph_inputs, problem = _checked_inputs(case)
    if problem:
        return "skip", problem
    frozen = _frozen_inputs(case.model)
    for inputs, outputs in case.data_sets:
        feeds = {vi.name: _as_array(value) for vi, value in zip(graph_inputs, inputs)}
        try:
            results = harness.run_model(case.model, feeds, frozen=frozen)
        except Unsupported as exc:
            return "skip", f"unsupported: {exc}"
        except ModelError as exc:
            return "skip", f"rejected by the frontend: {exc}"
        except Exception as exc:  # a failing case reports, it does not stop the run
            return "fail", f"{exc.__class__.__name__}: {exc}"
        status, detail = _check_outputs(case, outputs, results)
        if status != "pass":
            return status, detail
    return "pass", ""


# -- many cases at once ----------------------------------------------------------------------------
# Compiling each case's kernels as separate translation units costs ~50 ms per kernel, mostly the
# compiler starting and parsing headers; compiling a few dozen cases as one translation unit makes
# the whole suite several times faster. The results are those of `run_case`: the same lowering,
# rendering, flags and execution as the harness, only the kernels share a library. Half the kernels'
# text (3.3 of 6.8 MB) is another's but for its function's name (a case's data sets, the `_expanded`
# twins of functions, ops that lower alike): each text is compiled once, and a kernel whose text was
# compiled already is called from that library under the name it was compiled with.


@dataclass
class _Unit:
    """One data set of one case, lowered and rendered, waiting for its library."""

    case: object
    graph: Graph
    feeds: dict
    outputs: list
    kernels: list  # (node, fn, kernel)
    sources: tuple[str, ...]  # each kernel's C text, as function fn

    @property
    def source(self) -> str:
        return "\n".join(self.sources)


def _prepare(case, prefix: str) -> list[_Unit] | tuple[str, str]:
    graph_inputs, problem = _checked_inputs(case)
    if problem:
        return "skip", problem
    frozen = _frozen_inputs(case.model)
    units = []
    for k, (inputs, outputs) in enumerate(case.data_sets):
        feeds = {vi.name: _as_array(value) for vi, value in zip(graph_inputs, inputs)}
        try:
            graph = import_onnx(harness.freeze_inputs(case.model, feeds, frozen)).verify()
            kernels, sources = [], []
            for node, instance in harness.op_instances(graph):
                kernel = op_def(node.op, node.opset).lower(instance)
                fn = f"hg_{prefix}_{k}_{node.name}"
                sources.append(kernel_source(kernel, fn, node.label))
                kernels.append((node, fn, kernel))
        except Unsupported as exc:
            return "skip", f"unsupported: {exc}"
        except ModelError as exc:
            return "skip", f"rejected by the frontend: {exc}"
        except Exception as exc:
            return "fail", f"{exc.__class__.__name__}: {exc}"
        feeds = {name: value for name, value in feeds.items() if name not in frozen}
        units.append(_Unit(case, graph, feeds, outputs, kernels, tuple(sources)))
    return units


def _compile(sources: list[str], helpers: set[str], workdir: Path, tag: str) -> ctypes.CDLL | None:
    """One library of the kernels' `sources` (the runtime `helpers` they use linked from
    `harness.helper_objects`, compiled once); None when it does not build."""
    source = workdir / f"{tag}.c"
    source.write_text("\n".join(sources))
    runtime = templates_dir() / "runtime"
    lib = workdir / f"lib{tag}.so"
    try:
        objects = harness.helper_objects(sorted(helpers))
    except AssertionError:  # a helper does not compile: run_case reports it, case by case
        return None
    command = ["cc", *harness.CFLAGS, "-I", str(runtime), "-o", str(lib), str(source), *map(str, objects), "-lm"]
    result = subprocess.run(command, capture_output=True, text=True)
    return ctypes.CDLL(str(lib)) if result.returncode == 0 else None


def _execute(unit: _Unit, lib) -> dict[str, np.ndarray]:
    return harness.execute(lib, unit.kernels, unit.graph, unit.feeds)


def _run_units(units: list[tuple[_Unit, list[tuple[int, str]]]], libraries: list[Future]) -> dict[str, tuple[str, str]]:
    """Run each unit with each kernel from where its text was compiled (the chunk, the function's
    name there); a case one of whose chunks did not build runs alone (run_case), to find the kernel
    that breaks."""
    outcomes: dict[str, tuple[str, str]] = {}
    for unit, compiled in units:
        name = unit.case.name
        if outcomes.get(name, ("pass",))[0] != "pass":
            continue
        built = [(libraries[chunk].result(), function) for chunk, function in compiled]
        if any(lib is None for lib, _ in built):
            outcomes[name] = run_case(unit.case)
            continue
        functions = SimpleNamespace(
            **{fn: getattr(lib, function) for (_, fn, _), (lib, function) in zip(unit.kernels, built, strict=True)}
        )
        try:
            results = _execute(unit, functions)
        except Exception as exc:
            outcomes[name] = ("fail", f"{exc.__class__.__name__}: {exc}")
            continue
        outcomes[name] = _check_outputs(unit.case, unit.outputs, results)
    return outcomes


def run_cases(cases, chunk_kernels: int = 100, jobs: int | None = None) -> dict[str, tuple[str, str]]:
    """`run_case` for many cases at once: {case name: (status, detail)}, the same outcomes.

    The cases are lowered one by one, their kernels' distinct texts compiled in chunks of about
    `chunk_kernels` (`jobs` compilers in parallel, each chunk as soon as it is full, while the next
    ones are lowered), then the cases run one by one.
    """
    outcomes: dict[str, tuple[str, str]] = {}
    units: list[tuple[_Unit, list[tuple[int, str]]]] = []  # each kernel's (chunk, function name there)
    compiled: dict[str, tuple[int, str]] = {}  # a kernel's text, its function's name taken out -> the same
    libraries: list[Future] = []  # each chunk's
    sources: list[str] = []  # the chunk being filled
    helpers: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="hg_conformance_") as tmp:
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            for i, case in enumerate(cases):
                prepared = _prepare(case, f"c{i}")
                if isinstance(prepared, tuple):
                    outcomes[case.name] = prepared
                    continue
                if len(sources) >= chunk_kernels:
                    libraries.append(pool.submit(_compile, sources, helpers, Path(tmp), f"chunk{len(libraries)}"))
                    sources, helpers = [], set()
                for unit in prepared:
                    where = []
                    for (_, fn, kernel), text in zip(unit.kernels, unit.sources, strict=True):
                        key = text.replace(fn, "@fn@")
                        if key not in compiled:
                            compiled[key] = (len(libraries), fn)
                            sources.append(text)
                            helpers.update(kernel.helpers)
                        where.append(compiled[key])
                    units.append((unit, where))
            if sources:
                libraries.append(pool.submit(_compile, sources, helpers, Path(tmp), f"chunk{len(libraries)}"))
            outcomes.update(_run_units(units, libraries))
    return outcomes


# Outcomes recorded by tests/test_conformance.py, summarised by tests/conftest.py.
RESULTS: dict[str, Outcome] = {}


def record(name: str, status: str, detail: str) -> None:
    RESULTS[name] = Outcome(status, detail)


def coverage() -> str:
    """The claimed operators and their node cases, for CI's summary."""
    exercised = {op for case in all_cases() for op in case_ops(case)} - FOLDED_OPS
    claimed = supported_ops()
    return (
        f"operators claimed: {len(claimed)} ({len(claimed & exercised)} of the {len(exercised)} the ONNX node "
        f"tests exercise); node cases of claimed operators: {len(cases())}; pinned skips: {len(PINNED_SKIPS)}"
    )


def summary() -> str | None:
    if not RESULTS:
        return None
    counts = collections.Counter(o.status for o in RESULTS.values())
    lines = [
        f"conformance: {counts['pass']} passed, {counts['skip']} skipped (unsupported), "
        f"{counts['xfail']} expected failures, {counts['fail']} failed, of {len(RESULTS)} ONNX node cases"
    ]
    skips = [o.detail for o in RESULTS.values() if o.status == "skip"]
    dtypes = collections.Counter(m.group(1) for d in skips if (m := re.search(r"has dtype (\w+)", d)))
    if dtypes:
        listed = ", ".join(sorted(dtypes))
        lines.append(f"  skip x{sum(dtypes.values())}: element types without a C type in hetgen ({listed})")
    # the other reasons, grouped by their wording without the names of models and tensors
    reasons = collections.Counter(
        re.sub(r"'[^']*'", "'…'", d).replace("\n", " ").split(";")[0][:110] for d in skips if "has dtype" not in d
    )
    lines += [f"  skip x{n}: {reason}" for reason, n in reasons.most_common(10)]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--pin"]:
        sys.exit("usage: PYTHONPATH=. python tests/conformance.py --pin   (rewrites tests/conformance_skips.txt)")
    every = run_cases(cases())
    failed = sorted(name for name, (status, _) in every.items() if status == "fail" and name not in EXPECTED_FAILURES)
    print(f"pinned {write_pinned_skips(every)} skips in {PINNED_SKIPS_FILE}")
    PINNED_SKIPS.clear()
    PINNED_SKIPS.update(read_pinned_skips())
    print(coverage())
    if failed:
        sys.exit(f"{len(failed)} cases fail (not pinned; fix them): {', '.join(failed)}")
