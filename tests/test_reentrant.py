"""Concurrent callers: `hetgen.load(...).run()` from 8 threads at once, on host and on soc (with work
pinned onto the co-processor and the npu), against onnxruntime; and the generated C from pthreads
under ThreadSanitizer, with one workspace per thread (clean) and with the shared static one (a race
TSan must report, which shows the check can fail). Inputs of the wrong shape or dtype are refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.runtime.reference import ort_session

SHAPE = [1, 8, 8, 8]
# Work on every target of soc: the npu runs the convolutions, the co-processor the activation
# between them, the root the rest.
PINS = {"conv1": "soc/vdevice0/npu0", "act": "soc/vdevice0/host", "conv2": "soc/vdevice0/npu0", "mix": "soc"}
THREADS, ITERATIONS = 8, 25


def small_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), name)
        for name in ("w1", "w2")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Tanh", ["c1"], ["a1"], name="act"),
        helper.make_node("Conv", ["a1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "x"], ["y"], name="mix"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
        initializer=weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module", params=["host", "soc"])
def built(request, tmp_path_factory):
    model = small_model()
    pins = PINS if request.param == "soc" else {}
    out = hetgen.compile(
        f"platforms/{request.param}.yaml",
        model,
        out=tmp_path_factory.mktemp(request.param) / "out",
        pins=pins,
        opt=("-O1",),
        native_tuning=False,
        native_only=True,  # what Python loads; the board build is test_board.py's
    )
    kernels = {t["path"]: t["kernels"] for t in json.loads((out / "hetgen.json").read_text())["targets"]}
    if request.param == "soc":  # the work really is spread: every target runs a kernel
        assert all(kernels[path] > 0 for path in ("soc", "soc/vdevice0/host", "soc/vdevice0/npu0")), kernels
    return out, model


@pytest.mark.cc
def test_run_from_eight_threads_matches_onnxruntime(built):
    out, model = built
    loaded = hetgen.load(out)
    session = ort_session(model.SerializeToString())
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(THREADS * ITERATIONS)]
    expected = [session.run(None, {"x": x})[0] for x in feeds]
    start = threading.Barrier(THREADS)
    wrong: list[int] = []

    def worker(thread: int) -> None:
        start.wait()
        for index in range(thread, len(feeds), THREADS):
            got = loaded.run({"x": feeds[index]})["y"]
            if not np.allclose(got, expected[index], rtol=1e-4, atol=1e-5):
                wrong.append(index)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong, f"{len(wrong)} of {len(feeds)} concurrent runs differ from onnxruntime"


@pytest.mark.cc
def test_simulated_counters_are_per_workspace(built):
    out, _ = built
    loaded = hetgen.load(out)
    simulated = [t for t in json.loads((out / "hetgen.json").read_text())["targets"] if t["role"] == "accelerator"]
    x = np.ones(SHAPE, np.float32)
    for _ in range(3):
        loaded.run({"x": x})
    for target in simulated:
        stats = loaded.device_stats(target["stats_device"])
        assert stats["invocations"] > 0 and stats["compute_cycles"] > stats["load_cycles"] > 0, stats
    targets = json.loads((out / "hetgen.json").read_text())["targets"]
    counting = [t for t in targets if t["stats_device"] is not None]  # and co-processors counting their link
    with pytest.raises(hetgen.HetgenError, match="device_stats"):
        loaded.device_stats(len(counting))


@pytest.mark.cc
@pytest.mark.parametrize(
    "value, message",
    [
        (np.zeros((2, 4, 8, 8), np.float32), r"has shape 2x4x8x8; the model was built for 1x8x8x8"),
        (np.zeros((1, 512), np.float32), r"has shape 1x512; the model was built for 1x8x8x8"),
        (np.zeros(SHAPE, np.float64), r"has dtype float64; the model expects float32\[1x8x8x8\]"),
        (np.zeros(SHAPE, np.int32), r"has dtype int32"),
        ([[["a"]]], r"holds <U1 values; the model expects float32"),
    ],
)
def test_wrong_inputs_are_refused_with_both_shapes(built, value, message):
    out, _ = built
    with pytest.raises(hetgen.HetgenError, match=message):
        hetgen.load(out).run({"x": value})


@pytest.mark.cc
def test_run_into_follows_the_arrays_it_is_given(built):
    """run_into keeps the last arrays' addresses (hetgen/runtime/loader.py): a run reads the array
    given now, as it is now, and writes the output array given now, never one of an earlier run."""
    out, model = built
    loaded = hetgen.load(out)
    session = ort_session(model.SerializeToString())
    rng = np.random.default_rng(2)
    x, other = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2))
    y, y_other = np.empty(SHAPE, np.float32), np.empty(SHAPE, np.float32)

    def expected(value):
        return session.run(None, {"x": value})[0]

    loaded.run_into([x], [y])
    np.testing.assert_allclose(y, expected(x), rtol=1e-4, atol=1e-5)
    x *= -2.0  # the same array, new values
    loaded.run_into([x], [y])
    np.testing.assert_allclose(y, expected(x), rtol=1e-4, atol=1e-5)
    before = y.copy()
    loaded.run_into([other], [y_other])  # other arrays: read and written, the earlier output untouched
    np.testing.assert_allclose(y_other, expected(other), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(y, before)
    with pytest.raises(hetgen.HetgenError, match="needs contiguous arrays"):
        loaded.run_into([np.asfortranarray(x)], [y])
    with pytest.raises(hetgen.HetgenError, match="needs contiguous arrays"):
        loaded.run_into([x.reshape(1, 8, 64)], [y])
    np.testing.assert_allclose(loaded.run({"x": np.asfortranarray(x)})["y"], expected(x), rtol=1e-4, atol=1e-5)


DRIVER = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "PREFIX.h"

#define THREADS 4
#define RUNS 20
static int shared;  /* 1: every thread passes workspace NULL (the static one) */
static float expected[THREADS][PREFIX_OUTPUT_BYTES / 4];

static void fill(float *x, size_t n, int thread) {
    for (size_t i = 0; i < n; ++i) x[i] = (float)((int)((i * 7 + thread * 13) % 17) - 8) / 8.0f;
}

static int run_one(int thread, float *out, void *workspace) {
    float input[PREFIX_INPUT_BYTES / 4];
    fill(input, sizeof input / 4, thread);
    const void *inputs[1] = { input };
    void *outputs[1] = { out };
    return PREFIX_run(inputs, outputs, workspace);
}

static void *worker(void *arg) {
    const int thread = (int)(size_t)arg;
    void *workspace = shared ? NULL : aligned_alloc(UPPER_WORKSPACE_ALIGN, UPPER_WORKSPACE_SIZE);
    static float outs[THREADS][PREFIX_OUTPUT_BYTES / 4];
    for (int r = 0; r < RUNS; ++r) {
        if (run_one(thread, outs[thread], workspace) != HG_OK || memcmp(outs[thread], expected[thread], sizeof outs[thread]) != 0) {
            fprintf(stderr, "thread %d run %d: wrong result\n", thread, r);
            exit(3);
        }
    }
    free(workspace);
    return NULL;
}

int main(int argc, char **argv) {
    shared = argc > 1 && strcmp(argv[1], "shared") == 0;
    if (PREFIX_init() != HG_OK) return 2;
    for (int t = 0; t < THREADS; ++t) {
        if (run_one(t, expected[t], NULL) != HG_OK) return 2;  /* one at a time: the reference */
    }
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; ++t) pthread_create(&threads[t], NULL, worker, (void *)(size_t)t);
    for (int t = 0; t < THREADS; ++t) pthread_join(threads[t], NULL);
    puts("ok");
    return 0;
}
"""


@pytest.mark.cc
def test_generated_c_from_pthreads_under_thread_sanitizer(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    out = hetgen.compile(
        "platforms/soc.yaml",
        small_model(),
        out=tmp_path / "soc",
        pins=PINS,
        opt=("-O1", "-g"),
        native_tuning=False,
        sanitize=("thread",),
        native_only=True,  # sanitizers are the native build's
    )
    nbytes = int(np.prod(SHAPE)) * 4
    source = DRIVER.replace("PREFIX_INPUT_BYTES", str(nbytes)).replace("PREFIX_OUTPUT_BYTES", str(nbytes))
    source = source.replace("UPPER", "HG_SOC").replace("PREFIX", "hg_soc")
    (tmp_path / "driver.c").write_text(source)
    exe = tmp_path / "driver"
    command = ["gcc", "-std=c11", "-O1", "-g", "-fsanitize=thread", "-I", str(out / "soc"), "-I", str(out / "runtime")]
    command += [str(tmp_path / "driver.c"), str(out / "lib" / "libhg_soc.a"), "-lpthread", "-lm", "-o", str(exe)]
    subprocess.run(command, check=True)
    own = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert own.returncode == 0 and "ThreadSanitizer" not in own.stderr, own.stderr[-4000:]
    shared = subprocess.run([str(exe), "shared"], capture_output=True, text=True, timeout=120)
    assert "ThreadSanitizer: data race" in shared.stderr  # the static workspace is the race the workspaces remove


def test_workspace_blocks_are_aligned_and_disjoint():
    from hetgen import frontend, lower
    from hetgen.partition.search import place
    from hetgen.platform.loader import load_platform

    platform = load_platform("platforms/soc.yaml")
    graph = frontend.import_model(small_model())
    lowered = lower.lower(graph, platform, place(graph, platform, pins=PINS))
    for program in lowered.programs:
        layout = program.workspace
        spans = [(layout.arena_offset, layout.arena_offset + layout.arena_size)]
        spans += [(child.offset, child.offset + child.size) for child in layout.children]
        assert layout.arena_offset >= layout.header_size and layout.arena_size >= program.memory.arena_size
        assert all(start % 64 == 0 for start, _ in spans) and layout.size % 64 == 0
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans
        assert spans[-1][1] <= layout.size
    # the npu, and the co-processor that counts the copies over its link
    assert [device.path for device in lowered.simulated] == ["soc/vdevice0/host", "soc/vdevice0/npu0"]
    host = lowered.programs[0].workspace.children[0]
    npu = next(p for p in lowered.programs if p.target.path_str == host.path).workspace.children[0]
    assert lowered.simulated[0].offset == host.offset and lowered.simulated[1].offset == host.offset + npu.offset
