"""Frames pipelined through a built project (issue 23, item 6): resnet_tiny on soc placed for
throughput, built once (native, -O1): `_run_frames` runs frames with a workspace per frame in
flight, each device's batches on a worker thread of its own, each frame's outputs match
onnxruntime's and, bit for bit, the frame run alone, and the period simulated frame by frame from
the devices' counters is within 10 % of the estimate's. The device workers themselves
(templates/runtime/hg_frames.c) are checked on fake devices that prove the overlap by a rendezvous,
under ThreadSanitizer (tests/c/frames_unit.c)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import hetgen
from hetgen.codegen.manifest import read_manifest
from hetgen.errors import HetgenError
from hetgen.runtime.frames import frames_lines, frames_report
from hetgen.runtime.reference import ort_session
from hetgen.runtime.verify import MODEL_COPY
from hetgen.spec.frames import stages
from tests.test_reentrant import PINS, small_model

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.cc
FRAMES = 7  # more than twice the frames in flight, and not a multiple of them


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("throughput") / "soc"
    return hetgen.compile(
        ROOT / "platforms" / "soc.yaml",
        ROOT / "examples" / "resnet_tiny.onnx",
        out=out,
        objective="throughput",
        native_only=True,
        opt=("-O1",),
    )


def test_frames_match_onnxruntime_frame_by_frame(built):
    manifest = json.loads((built / "hetgen.json").read_text())
    assert manifest["frame_depth"] >= 2  # the root and the co-processor work on different frames
    # the C program is cut where the interpreter cuts the timed steps
    program = read_manifest(built).program
    assert manifest["frame_depth"] == len(stages(program.controllers[program.root].entries[0]))
    report = frames_report(built, FRAMES)
    assert report.frames == FRAMES and len(report.outputs) == FRAMES
    session = ort_session(str(built / MODEL_COPY))
    names = [o.name for o in session.get_outputs()]
    previous = None
    for feeds, outputs in report.outputs:
        expected = dict(zip(names, session.run(None, feeds)))
        for name in names:
            np.testing.assert_allclose(outputs[name], expected[name], rtol=1e-4, atol=1e-4)
        first = next(iter(outputs.values()))
        assert previous is None or not np.array_equal(first, previous)  # frames are not mixed up
        previous = first
    # every frame alone through `_run` gives, bit for bit, what it gave in the pipeline, where the
    # co-processor ran each frame's batch on its worker thread (soc: one device, one batch a frame)
    model = hetgen.load(built)
    feeds = [frame_feeds for frame_feeds, _ in report.outputs]
    pipelined, stats = model.run_frames_stats(feeds)
    assert stats["workers"] == 1 and stats["jobs"] == FRAMES, stats
    assert 0 <= stats["overlapped_jobs"] <= stats["jobs"]  # how many overlapped is the OS's to decide
    for frame_feeds, outputs, (_, reported) in zip(feeds, pipelined, report.outputs):
        alone = model.run(frame_feeds)
        for name in names:
            np.testing.assert_array_equal(alone[name], outputs[name])
            np.testing.assert_array_equal(reported[name], outputs[name])


@pytest.mark.parametrize("runtime", ["aot", "graph"])
def test_aot_and_graph_roots_run_frames_too(tmp_path, runtime):
    """A root of each other runtime runs its entry's stages as functions (an aot entry's parts cut
    at the stages too, a graph root's node ranges): every frame bit for bit what it gives alone,
    each frame's co-processor batch on its worker."""
    platform = tmp_path / "soc.yaml"
    text = (ROOT / "platforms" / "soc.yaml").read_text()
    platform.write_text(text.replace("  runtime: vm\n", f"  runtime: {runtime}\n", 1))
    out = hetgen.compile(
        platform, small_model(), out=tmp_path / "out", pins=PINS, objective="throughput", native_only=True, opt=("-O1",)
    )
    model = hetgen.load(out)
    assert model.manifest.frame_depth == 2
    rng = np.random.default_rng(1)
    feeds = [{info.name: rng.standard_normal(info.shape).astype(info.dtype) for info in model.inputs} for _ in range(5)]
    pipelined, stats = model.run_frames_stats(feeds)
    assert stats["workers"] == 1 and stats["jobs"] == len(feeds), stats
    for frame_feeds, outputs in zip(feeds, pipelined):
        for name, value in model.run(frame_feeds).items():
            np.testing.assert_array_equal(value, outputs[name])


@pytest.mark.parametrize("threads", [1, 0])
def test_device_workers_overlap_the_root_on_fake_devices(tmp_path, threads):
    """hg_frames.c with threads (under ThreadSanitizer): each batch runs on its device's worker and
    ends only after the root went on with its own work (a rendezvous: without real overlap the
    program fails its wait), results per frame as if run alone, a failed batch reported by its
    frame's wait; without threads (ASan, UBSan) the same frames on the root alone."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    runtime = ROOT / "templates" / "runtime"
    sanitize = "-fsanitize=thread" if threads else "-fsanitize=address,undefined"
    exe = tmp_path / "frames_unit"
    command = ["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", sanitize, f"-DHG_THREADS_POOL={threads}"]
    command += ["-I", str(runtime), "-o", str(exe), str(ROOT / "tests/c/frames_unit.c"), str(runtime / "hg_frames.c")]
    subprocess.run([*command, "-lpthread"], check=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr[-4000:]
    assert "Sanitizer" not in result.stderr, result.stderr[-4000:]


def test_simulated_period_within_ten_percent_of_the_estimate(built):
    report = frames_report(built)
    assert report.period_us == pytest.approx(report.estimate_period_us, rel=0.10)
    assert report.period_us < 0.9 * report.latency_us  # frames overlap: more frames a second than one at a time
    assert report.period_us == pytest.approx(max(report.busy_us.values()), rel=1e-6)
    text = "\n".join(frames_lines(report))
    assert "frames/s" in text and "simulated/estimated period" in text
    assert "1 device worker thread(s)" in text and f"of {report.frames} batches" in text


def test_a_latency_project_refuses_frames(tmp_path, built):
    manifest = json.loads((built / "hetgen.json").read_text())
    manifest.pop("frame_depth")
    copy = tmp_path / "copy"
    shutil.copytree(built, copy, symlinks=True)
    (copy / "hetgen.json").write_text(json.dumps(manifest))
    with pytest.raises(HetgenError, match="--objective throughput"):
        frames_report(copy, 3)
