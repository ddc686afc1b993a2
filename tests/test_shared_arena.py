"""One arena for a bare-metal controller and its npu whose arena is in the controller's RAM
(hetgen/lower/shared_arena.py): the Corstone-300's Cortex-M55 and Ethos-U55 in Sram_Only.

The bound here is computed from the lowered program itself, not from the planner: every tensor of
the root's arena and of the npu's activations, live from the first step of the root's step list
that touches it to the last, a tensor in the npu's memory also across every invocation that names
it, up to the root's wait for it (the npu runs while the root goes on)."""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import pytest

import hetgen.lower as lower_module
from hetgen.frontend import import_model
from hetgen.lower import lower
from hetgen.lower.memory import ALIGNMENT
from hetgen.lower.program import Call, Copy, DeviceCopyIn, DeviceCopyOut, Invoke, ProgramRole, Region, Wait
from hetgen.lower.verify import broken_invariants
from hetgen.partition import place
from hetgen.platform import load_platform, load_platform_text

REPO = Path(__file__).resolve().parent.parent
CORSTONE = REPO / "platforms" / "corstone-300.yaml"


@cache
def _ds_cnn():
    from hetgen.models.mlperf_tiny import ds_cnn
    from hetgen.models.quantized import quantized

    return import_model(quantized(ds_cnn(softmax=False), "QDQ", per_channel=True))


def _lowered(platform, graph=None):
    graph = graph if graph is not None else _ds_cnn()
    return lower(graph, platform, place(graph, platform))


def _programs(lowered):
    (npu,) = [p for p in lowered.programs if p.role is ProgramRole.ACCELERATOR]
    return lowered.root, npu


def _aligned(nbytes: int) -> int:
    return (max(nbytes, 1) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def liveness_bound(lowered) -> int:
    """The most bytes (each tensor rounded up to the arena's alignment, as any plan holds it) of the
    root's arena tensors and the npu's activations live at one step of the root's step list."""
    root, npu = _programs(lowered)
    sizes = {("root", name): nbytes for name, _, nbytes in root.memory.buffers}
    sizes |= {("npu", name): nbytes for name, _, nbytes in npu.memory.buffers}
    spans: dict[tuple[str, str], list[int]] = {}

    def touch(key, first, last):
        if key in sizes:
            span = spans.setdefault(key, [first, last])
            span[0], span[1] = min(span[0], first), max(span[1], last)

    invoked = {}
    (entry,) = root.entries
    for position, step in enumerate(entry):
        if isinstance(step, Call):
            for ref in step.args:
                if ref.region is Region.ARENA:
                    # a kernel's workspace is named "scratch" in its reference, "scratch:<unit>" planned
                    names = [
                        n for n, offset, _ in root.memory.buffers if n.startswith("scratch:") and offset == ref.position
                    ]
                    for name in names if ref.tensor == "scratch" else [ref.tensor]:
                        touch(("root", name), position, position)
        elif isinstance(step, Copy):
            for ref in (step.src, step.dst):
                if ref.region is Region.ARENA:
                    touch(("root", ref.tensor), position, position)
        elif isinstance(step, DeviceCopyIn):
            if step.src.region is Region.ARENA:
                touch(("root", step.src.tensor), position, position)
            touch(("npu", step.tensor), position, position)
        elif isinstance(step, DeviceCopyOut):
            if step.dst.region is Region.ARENA:
                touch(("root", step.dst.tensor), position, position)
            touch(("npu", step.tensor), position, position)
        elif isinstance(step, Invoke):
            invoked[step.program] = position
        elif isinstance(step, Wait):
            for program, start in invoked.items():
                for command in npu.entries[program]:  # kernel calls and the DMAs of its tiles
                    refs = command.args if isinstance(command, Call) else (command.src, command.dst)
                    for ref in refs:
                        if ref.region is Region.ARENA:
                            touch(("npu", ref.tensor), start, position)
            invoked.clear()
    assert set(spans) == set(sizes), set(sizes) ^ set(spans)
    live = [0] * (len(entry) + 1)
    for key, (first, last) in spans.items():
        for position in range(first, last + 1):
            live[position] += _aligned(sizes[key])
    return max(live)


def test_a_shared_memory_controller_and_npu_plan_one_arena_within_the_liveness_bound(monkeypatch):
    """DS-CNN on corstone-300: the root's arena is the npu's activations' bytes, and that one arena is
    at most the liveness bound of all their tensors; planned apart (as before), the two add up and
    exceed it (the quantized input and the fully connected layer's input, workspace and output)."""
    lowered = _lowered(load_platform(str(CORSTONE)))
    root, npu = _programs(lowered)
    assert not broken_invariants(lowered)
    base = npu.sram_size + npu.emulation_scratch
    shared = npu.memory.arena_size - base  # the npu's activations, the root's tensors among them
    assert root.arena_in == npu.target.path_str and root.arena_base == base
    assert root.memory.arena_size == shared
    # the root's arena is that region of the npu's block: no arena of its own in the workspace
    (child,) = root.workspace.children
    assert root.workspace.arena_offset == child.offset + npu.workspace.arena_offset + base
    assert root.workspace.size == child.offset + child.size
    assert root.memory.buffers and all(offset + n <= shared for _, offset, n in root.memory.buffers)

    bound = liveness_bound(lowered)
    assert shared <= bound

    # planned apart, the two arenas add up to more than the bound
    monkeypatch.setattr(lower_module, "shared_arena_device", lambda *_: None)
    apart = _lowered(load_platform(str(CORSTONE)))
    root_apart, npu_apart = _programs(apart)
    assert not root_apart.arena_in
    separate = root_apart.memory.arena_size + npu_apart.memory.arena_size - base
    assert separate > bound >= shared
    assert root_apart.workspace.size > root.workspace.size


def test_the_verifier_refuses_root_and_npu_buffers_that_share_bytes_while_live():
    """Moving the root's arena onto the npu's output while the root copies it out (both live at the
    copy) is a broken invariant: the check spans the two programs."""
    lowered = _lowered(load_platform(str(CORSTONE)))
    root, npu = _programs(lowered)
    (entry,) = root.entries
    copy = next(step for step in entry if isinstance(step, DeviceCopyOut) and step.dst.region is Region.ARENA)
    target = dict((name, offset) for name, offset, _ in root.memory.buffers)[copy.dst.tensor]
    moved = dataclasses.replace(root, arena_base=copy.src_offset - target)
    problems = broken_invariants(dataclasses.replace(lowered, programs=(moved, *lowered.programs[1:])))
    assert any("share bytes while both are live" in p and "(root)" in p for p in problems), problems


def _fc_and_pool():
    from hetgen.models._builder import Builder
    from hetgen.models.quantized import quantized

    b = Builder("fc_pool", 17, 0)
    x = b.input("input", (1, 8, 8, 8))
    h = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    h = b.op("Flatten", [h])
    b.output(b.gemm(h, 128, 16), (1, 16))
    return import_model(quantized(b.model(), "QDQ", per_channel=True))


@pytest.mark.parametrize(
    "file, old, new, shared",
    [
        ("corstone-300.yaml", "", "", True),
        ("corstone-300.yaml", "Sram_Only", "Shared_Sram", True),  # the arena in SRAM, weights in flash
        ("mcu-npu.yaml", "", "", False),  # hetgen's npu: no memory mode says where its arena is
        ("ethos-u65.yaml", "", "", False),  # Dedicated_Sram: the arena in DRAM; an aarch64 Linux root
        ("ethos-u65.yaml", "sram_kib: 384, memory_mode: Dedicated_Sram", "memory_mode: Shared_Sram", False),
    ],
)
def test_only_a_bare_metal_root_and_an_npu_arena_in_system_sram_share(file, old, new, shared):
    text = (REPO / "platforms" / file).read_text()
    assert old in text
    platform = load_platform_text(text.replace(old, new) if old else text, file=str(REPO / "platforms" / file))
    graph = _fc_and_pool()
    pins = {n.name: f"{platform.root.path_str}/npu0" for n in graph.nodes if n.op in ("MaxPool", "QGemm", "Gemm")}
    lowered = lower(graph, platform, place(graph, platform, pins=pins))
    root = lowered.root
    assert len(lowered.programs) == 2  # the npu runs the pool and the fully connected layer
    assert bool(root.arena_in) is shared
    if not shared:
        assert root.workspace.arena_offset == 0 and root.arena_base == 0
    assert not broken_invariants(lowered)


@pytest.mark.cc
def test_a_shared_arena_program_matches_onnxruntime_under_asan_and_ubsan(tmp_path):
    """DS-CNN on corstone-300, its M55's tensors in the U55's arena, built natively with sanitizers:
    the same outputs as onnxruntime (the float output one quantization step, 0.0173, off in places,
    as on platforms/host.yaml: docs/ethos-u.md) and no sanitizer report."""
    import re
    import subprocess
    import sys

    import onnx

    import hetgen
    from hetgen.models.mlperf_tiny import ds_cnn
    from hetgen.models.quantized import quantized

    model = tmp_path / "ds_cnn.onnx"
    onnx.save(quantized(ds_cnn(softmax=False), "QDQ", per_channel=True), model)
    out = tmp_path / "out"
    project = hetgen.compile(
        str(CORSTONE), model, out=out, native_only=True, werror=True, sanitize=("address", "undefined"), opt=("-O1",)
    )
    assert project is not None
    # the root's arena is inside the npu's block, not at the workspace's start
    offset = re.search(r"#define HG_CORSTONE_300_ARENA_OFFSET (\d+)u", (out / "corstone_300" / "model.c").read_text())
    assert offset and int(offset.group(1)) > 0
    result = subprocess.run(
        [sys.executable, "-m", "hetgen", "verify", str(out), "--atol", "0.02"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "1 of 1 outputs match onnxruntime" in result.stdout
