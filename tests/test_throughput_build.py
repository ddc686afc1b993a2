"""Frames pipelined through a built project (issue 23, item 6): resnet_tiny on soc placed for
throughput, built once (native, -O1): `_run_frames` runs frames with a workspace per frame in
flight, each frame's outputs match onnxruntime's, and the period simulated frame by frame from the
devices' counters is within 10 % of the estimate's."""

from __future__ import annotations

import json
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
    # and one frame alone through `_run` gives the same as that frame in the pipeline
    model = hetgen.load(built)
    feeds, outputs = report.outputs[FRAMES - 1]
    alone = model.run(feeds)
    for name in names:
        np.testing.assert_array_equal(alone[name], outputs[name])


def test_simulated_period_within_ten_percent_of_the_estimate(built):
    report = frames_report(built)
    assert report.period_us == pytest.approx(report.estimate_period_us, rel=0.10)
    assert report.period_us < 0.9 * report.latency_us  # frames overlap: more frames a second than one at a time
    assert report.period_us == pytest.approx(max(report.busy_us.values()), rel=1e-6)
    text = "\n".join(frames_lines(report))
    assert "frames/s" in text and "simulated/estimated period" in text


def test_a_latency_project_refuses_frames(tmp_path, built):
    manifest = json.loads((built / "hetgen.json").read_text())
    manifest.pop("frame_depth")
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(built, copy, symlinks=True)
    (copy / "hetgen.json").write_text(json.dumps(manifest))
    with pytest.raises(HetgenError, match="--objective throughput"):
        frames_report(copy, 3)
