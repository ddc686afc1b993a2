"""The import graph is the pipeline (docs/architecture.md): a stage imports only earlier stages.

Every module of hetgen/ is parsed (no import is run to find them): a module-level import of a
later stage fails, and so does any hetgen import inside a function or under TYPE_CHECKING (those
exist only to dodge a cycle), except in the two entry points that import lazily on purpose: the CLI
and the package's `__init__` (so `import hetgen.names` costs 0.1 s, not the 2.4 s of the whole
pipeline). A later stage that imports a *function* of an earlier pipeline stage (rather than its
values) is listed below with the reason, so a new seam is a decision, not an accident.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "hetgen"

# hetgen's packages in pipeline order; a module may import its own stage and any earlier one.
BASE = ("errors", "names", "ir", "bounded", "progress", "templates_dir", "models", "abi")  # leaves every stage uses
STAGES = ("ops", "platform", "frontend", "spec", "partition", "lower", "codegen", "build", "runtime")
# Entry points: they compose the stages, so they may import any of them.
ENTRY = ("__init__", "__main__", "cli", "pipeline", "backend", "tune")
LAZY_ALLOWED = {"hetgen/cli.py", "hetgen/__init__.py"}

# Functions a later stage calls from an earlier pipeline stage (ops and platform are libraries over
# values and are not listed). Each is a reason, not a loophole: the list only shrinks.
CROSS_STAGE_CALLS = {
    # The device model placement and lowering share (spec/ owns tiling, invocation and scheduling rules).
    ("lower", "hetgen.spec.invocation", "one_unit_per_invocation"): "which accelerators run one unit per invocation",
    ("lower", "hetgen.spec.tiling", "tensor_names"): "the operand names of a unit's tile commands",
    (
        "lower",
        "hetgen.spec.tiling",
        "block_channels",
    ): "a tile DMA's feature-map channels (its work descriptor's bricks)",
    ("lower", "hetgen.spec.cascade_program", "feature_channels"): "a cascade DMA's feature-map channels (its bricks)",
    ("lower", "hetgen.partition.cascades", "cascade_units"): "a claimed cascade's units and layers, as priced",
    ("lower", "hetgen.spec.cascade_program", "cascade_program"): "a claimed cascade's command list, as priced",
    ("lower", "hetgen.partition.choices", "stale"): "lowering refuses choices made for other groups",
    ("lower", "hetgen.partition.choices", "banked"): "a banked root's groups priced at the banks lowering assigns",
    ("lower", "hetgen.partition.choices", "placement_makespan_of"): "the makespan the banked groups are totalled by",
    ("lower", "hetgen.partition.blocked_layout", "blocked_name"): "the names of the tensors the choice stage blocked",
    (
        "lower",
        "hetgen.partition.liveness",
        "live_bytes",
    ): "one liveness rule for the lean budget and the bound it meets",
    ("lower", "hetgen.spec.work", "dma_work"): "work descriptors of device copies, not in the table (issue 19 item 4)",
    ("lower", "hetgen.spec.work", "instance_work"): "work descriptors of re-blocked units (issue 19 item 4)",
    ("lower", "hetgen.spec.work", "kernel_work"): "work descriptors of re-blocked units (issue 19 item 4)",
    ("lower", "hetgen.spec.work", "shape_work"): "work descriptors of re-blocked units (issue 19 item 4)",
    ("partition", "hetgen.spec", "build_kernel_specs"): "place() builds the table for a caller that has none",
    ("partition", "hetgen.spec.alias", "alias_source"): "one aliasing rule for the cost model and lowering",
    ("partition", "hetgen.spec.concat_view", "concat_slabs"): "the layout half of the one Concat view rule",
    ("partition", "hetgen.spec.split_view", "split_slabs"): "the layout half of the one Split view rule",
    ("partition", "hetgen.spec.split_view", "may_be_view"): "the views' layout rules, for the search's floors",
    ("partition", "hetgen.spec.fusion", "cut_units"): "the one fusion rule, applied to the placed groups",
    ("partition", "hetgen.spec.variants", "variant_name"): "what a chosen kernel is called",
    ("partition", "hetgen.spec.variants", "with_offers"): "a kernel with its constants' layouts, and its work",
    ("partition", "hetgen.spec.fits", "check_graph_fits"): "a tensor no target can hold is refused first",
    ("partition", "hetgen.spec.cascade", "cascade_layer"): "a placed unit as a cascade's layer",
    ("partition", "hetgen.spec.cascade", "stripe_plans"): "a chain's stripes, SRAM and DMA, as spec shapes them",
    ("partition", "hetgen.spec.cascade", "fitting_plan"): "of those, the one spec chooses for a capacity",
    ("partition", "hetgen.spec.cascade_program", "cascade_program"): "a cascade's command list, to price it",
    ("partition", "hetgen.spec.cascade_program", "program_us"): "a cascade priced as its command list runs",
    ("partition", "hetgen.spec.invocation", "unit_inputs"): "the inputs of a unit's kernel (a residual unit's)",
    ("partition", "hetgen.spec.tile_shapes", "unit_op"): "the unit as tiling sees it, for its cascade layer",
    ("partition", "hetgen.spec.tile_shapes", "tensor_names"): "a cascade unit's position names, for its commands",
    ("partition", "hetgen.spec.invocation", "group_plans"): "a group's tilings, read from the table",
    ("partition", "hetgen.spec.invocation", "kernel_units_of"): "how a group is cut into the table's units",
    ("partition", "hetgen.spec.invocation", "one_unit_per_invocation"): "which accelerators are tiled",
    ("partition", "hetgen.spec.invocation", "peak_gops"): "a target's rates from its figures",
    ("partition", "hetgen.spec.invocation", "residual_load_bytes"): "what a residual unit's tiles load",
    ("partition", "hetgen.spec.invocation", "tile_rates"): "a target's rates from its figures",
    ("partition", "hetgen.spec.invocation", "weight_load_bytes"): "what a group's tiles load of its weights",
    ("partition", "hetgen.spec.patterns", "residual_waits"): "when a residual unit's device must wait",
    ("partition", "hetgen.spec.schedule", "child_devices"): "the devices a controller drives",
    ("partition", "hetgen.spec.schedule", "timed_program"): "the scheduler's steps as the one interpreter times them",
    ("partition", "hetgen.spec.timeline", "call_shares"): "each call's part of its group's estimate",
    ("partition", "hetgen.spec.timeline", "run_timeline"): "the one interpreter prices the placement's program",
    ("partition", "hetgen.spec.tiling", "plan_us"): "a tile plan's time under the device model",
    # After the build: reading what earlier stages wrote, and the one concurrency model.
    ("runtime", "hetgen.build.ninja_file", "library_path"): "where the build put the library",
    ("runtime", "hetgen.codegen.manifest", "read_manifest"): "the manifest codegen wrote",
    ("runtime", "hetgen.codegen.render", "render"): "the explain page renders in the one template sandbox",
    ("runtime", "hetgen.partition.explain", "explanation"): "the explain page shows what explain says",
    ("runtime", "hetgen.partition.explain", "device_colours"): "the page colours devices as the text output does",
    ("runtime", "hetgen.partition.explain", "priced_timeline"): "the page's timeline is the placement's priced program",
    ("runtime", "hetgen.partition.explain", "energy_lines"): "the page prints the energy lines the text output does",
    ("runtime", "hetgen.spec.timeline", "call_shares"): "a controller's calls at their part of its group's estimate",
    ("runtime", "hetgen.spec.timeline", "run_timeline"): "bench replays the program with the placement's interpreter",
    # Frames pipelined (hetgen/spec/frames.py): one cut of the program into stages and one pipelined
    # interpreter for the price (partition), the generated _run_frames (codegen) and bench (runtime).
    ("partition", "hetgen.spec.frames", "frames_for"): "how many frames reach a steady state",
    ("partition", "hetgen.spec.frames", "frames_timeline"): "the pipelined program's period at the estimates",
    ("partition", "hetgen.spec.frames", "resource_busy"): "each resource's work per frame: the period",
    ("partition", "hetgen.spec.frames", "stages"): "the frames in flight of the program's stages",
    ("codegen", "hetgen.spec.frames", "stage_bounds"): "_run_frames cuts the program where the interpreter does",
    ("codegen", "hetgen.spec.frames", "stage_submissions"): "which devices each stage's end hands to their workers",
    ("runtime", "hetgen.spec.frames", "frames_for"): "how many frames reach a steady state",
    ("runtime", "hetgen.spec.frames", "frames_timeline"): "bench times the frames with the pipelined interpreter",
    ("runtime", "hetgen.spec.frames", "resource_busy"): "each resource's simulated work per frame",
    ("runtime", "hetgen.spec.frames", "stages"): "the frames in flight of a latency project's program",
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _rank(package: str) -> int | None:
    if package in BASE:
        return -1
    if package in STAGES:
        return STAGES.index(package)
    return None  # an entry point


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT.parent)
        name = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        yield relative.as_posix(), name, path


@functools.cache  # three tests read every file's imports: each file parsed once
def _imports(path: Path, module: str) -> tuple[tuple[int, str, tuple[str, ...], bool], ...]:
    """(line, imported module, names, lazy): every hetgen import of the file."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []

    def visit(node, lazy):
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = True
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name, (), inner) for a in child.names if a.name.startswith("hetgen"))
            elif isinstance(child, ast.ImportFrom):
                target = child.module or ""
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    target = ".".join([*base, *([child.module] if child.module else [])])
                if target == "hetgen" or target.startswith("hetgen."):
                    found.append((child.lineno, target, tuple(a.name for a in child.names), inner))
            visit(child, inner)

    visit(tree, False)
    return tuple(found)


def _target_package(target: str, names: tuple[str, ...]) -> list[str]:
    if target == "hetgen":  # `from hetgen import lower`: each name is a package
        return [name for name in names] or ["__init__"]
    return [_package(target)]


def test_no_stage_imports_a_later_stage():
    backwards = []
    for relative, module, path in _modules():
        own = _rank(_package(module))
        if own is None:
            continue
        for line, target, names, _ in _imports(path, module):
            for package in _target_package(target, names):
                rank = _rank(package)
                if rank is None or rank > own:
                    backwards.append(f"{relative}:{line}: {_package(module)} imports {target} ({package})")
    assert not backwards, "imports against the pipeline:\n" + "\n".join(backwards)


def test_no_lazy_or_type_checking_imports_outside_the_entry_points():
    lazy = [
        f"{relative}:{line}: {target}"
        for relative, module, path in _modules()
        if relative not in LAZY_ALLOWED
        for line, target, _, inner in _imports(path, module)
        if inner
    ]
    assert not lazy, "imports inside functions or under TYPE_CHECKING (a cycle dodged):\n" + "\n".join(lazy)


def test_calls_across_stages_are_the_listed_ones():
    found = {}
    for relative, module, path in _modules():
        own = _package(module)
        if _rank(own) is None or own in ("ops", "platform"):
            continue
        for line, target, names, _ in _imports(path, module):
            package = _package(target)
            if package == own or package not in STAGES or package in ("ops", "platform"):
                continue
            imported = importlib.import_module(target)
            for name in names:
                if inspect.isfunction(getattr(imported, name, None)):
                    found.setdefault((own, target, name), f"{relative}:{line}")
    unlisted = sorted(f"{where}: {key}" for key, where in found.items() if key not in CROSS_STAGE_CALLS)
    stale = sorted(str(key) for key in CROSS_STAGE_CALLS if key not in found)
    assert not unlisted, "a later stage calls an earlier stage's code; read its value, or list it here:\n" + "\n".join(
        unlisted
    )
    assert not stale, "listed but no longer imported (remove the entry):\n" + "\n".join(stale)


@pytest.mark.parametrize("package", [*BASE, *STAGES])
def test_every_package_is_placed(package):
    assert (ROOT / package).is_dir() or (ROOT / f"{package}.py").is_file()


def test_every_module_belongs_to_a_stage_or_an_entry_point():
    unplaced = [
        module for _, module, _ in _modules() if _package(module) not in (*BASE, *STAGES, *ENTRY)
    ]  # a new package must be given its place in the pipeline here
    assert not unplaced, unplaced
