"""Kernels beside the GEMM that split their work across the worker pool (hetgen/ops/_parallel.py):
fused attention (one head per task), LayerNorm and Softmax (rows, or runs of columns), elementwise
kernels (chunks of the outermost loop), recurrent layers (each step's hidden units), a channel Concat
(its copies in tasks of whole cache lines). Built with `threads: 2` they match onnxruntime and the
`threads: 1` build bit for bit (the tasks are cut at generate time, whatever the thread count); small
operators stay serial; without a pool (bare metal) the split compiles to a plain loop; and the pool
is clean under ThreadSanitizer (and AddressSanitizer + UBSan) while heads run their GEMMs on worker
threads, in the threads' own scratch."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.errors import HetgenError
from hetgen.ops.conv import DepthwiseSplit, depthwise_split
from hetgen.runtime.reference import ort_session, random_inputs
from kernel_text import kernel_functions, unit_kernels
from pool_threads import exited, started_since, thread_ids

HEADS, SEQ, HEAD_DIM = 2, 128, 32
Z = [4, 64, 128]  # Softmax rows of 128 along the last axis; 128 inner columns along axis 1
ODD = [201, 203]  # an elementwise loop that does not end on a whole chunk
LARGE = ("attention", "LayerNormalization", "Softmax", "LogSoftmax", "Add", "Sigmoid", "Mul", "MaxPool", "AveragePool")
LARGE += ("GlobalAveragePool", "Conv", "LSTM", "GRU", "Concat")
IMAGE = [1, 64, 32, 32]  # pooled plane by plane; a depthwise Conv splits its channels; a 3x3 Conv
# takes Winograd, whose rows of tiles are the tasks, each its transforms and 16 products on one thread
FEW = [1, 2, 96, 96]  # a depthwise Conv of two channels splits blocks of each channel's rows
# [steps, batch, inputs]: LSTM and GRU steps share their hidden units, runs of whole panels per thread:
# 7 panels (LSTM: an uneven share at 2 and 3 threads) and 8 (GRU: its default reset takes two passes)
FRAMES, LSTM_HIDDEN, GRU_HIDDEN = [4, 2, 8], 224, 256
PHOTO = [1, 3, 96, 96]  # a stem from phase planes: its 3 bands of 16 output rows are the tasks (uneven at 2 threads)


def threaded_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def const(name, shape, scale=1.0):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    head = [1, HEADS, SEQ, HEAD_DIM]
    value = helper.make_tensor_value_info
    inputs = [value(name, TensorProto.FLOAT, head) for name in ("q", "k", "v")]
    inputs += [
        value("mask", TensorProto.FLOAT, [1, 1, 1, SEQ]),
        value("h", TensorProto.FLOAT, [1, SEQ, 64]),
        value("z", TensorProto.FLOAT, Z),
        value("a", TensorProto.FLOAT, ODD),
        value("b", TensorProto.FLOAT, ODD),
        value("tiny", TensorProto.FLOAT, [2, 8]),
        value("tall", TensorProto.FLOAT, [512, 64]),
        value("image", TensorProto.FLOAT, IMAGE),
        value("other", TensorProto.FLOAT, IMAGE),
        value("few", TensorProto.FLOAT, FEW),
        value("sensor", TensorProto.FLOAT, [1, 1, 49, 10]),
        value("frames", TensorProto.FLOAT, FRAMES),
        value("photo", TensorProto.FLOAT, PHOTO),
    ]
    nodes = [
        # attention: softmax(Q Kᵀ / 4 + mask) V, one kernel (hetgen/lower/fuse_attention.py)
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Div", ["scores", "four"], ["scaled"]),
        helper.make_node("Add", ["mask", "scaled"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["y_attention"]),
        helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y_layernorm"], axis=-1),
        helper.make_node("Softmax", ["z"], ["y_softmax"], axis=-1),
        helper.make_node("LogSoftmax", ["z"], ["y_logsoftmax"], axis=1),
        helper.make_node("Add", ["z", "row"], ["y_add"]),  # broadcast: two loops, the outer one split
        helper.make_node("Sigmoid", ["z"], ["y_sigmoid"]),  # one flat loop, in chunks of whole vectors
        helper.make_node("Mul", ["a", "b"], ["y_mul"]),
        helper.make_node("LayerNormalization", ["tiny", "tiny_gamma"], ["y_tiny"], axis=-1, name="tiny"),
        # many rows of activations by packed weights: the GEMM splits its rows (hg_gemm.c)
        helper.make_node("MatMul", ["tall", "w_tall"], ["y_matmul"]),
        helper.make_node("MaxPool", ["image"], ["y_maxpool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4),
        helper.make_node("MaxPool", ["image"], ["y_argmax", "y_indices"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["image"], ["y_avgpool"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["image"], ["y_global"]),
        # depthwise (direct loop), with bias and a fused Relu; strided and padded
        helper.make_node("Conv", ["image", "w_depthwise", "b_depthwise"], ["depthwise"], group=64, pads=[1] * 4),
        helper.make_node("Relu", ["depthwise"], ["y_depthwise"]),
        helper.make_node(
            "Conv", ["few", "w_few"], ["y_few"], group=2, kernel_shape=[5, 5], strides=[2, 2], pads=[2] * 4
        ),
        helper.make_node("Conv", ["image", "w_winograd", "b_winograd"], ["winograd"], pads=[1] * 4),
        helper.make_node("Relu", ["winograd"], ["y_winograd"]),
        # a keyword spotter's stem: the direct kernel of small planes, its blocks of output channels split
        helper.make_node("Conv", ["sensor", "w_stem"], ["y_stem"], strides=[2, 2], pads=[4, 1, 5, 2]),
        helper.make_node(
            "LSTM",
            ["frames", "w_lstm", "r_lstm", "b_lstm"],
            ["y_lstm", "y_lstm_h"],
            hidden_size=LSTM_HIDDEN,
            direction="bidirectional",
        ),
        helper.make_node("GRU", ["frames", "w_gru", "r_gru", "b_gru"], ["", "y_gru_h"], hidden_size=GRU_HIDDEN),
        helper.make_node(
            "GRU",
            ["frames", "w_gru", "r_gru", "b_gru"],
            ["y_gru_lbr"],
            hidden_size=GRU_HIDDEN,
            linear_before_reset=1,
            direction="reverse",
        ),
        # a channel Concat at batch 1: two memcpys, cut into tasks of whole cache lines
        helper.make_node("Concat", ["image", "other"], ["y_concat"], axis=1),
        helper.make_node("Conv", ["photo", "w_photo", "b_photo"], ["photo_conv"], strides=[2, 2], pads=[1] * 4),
        helper.make_node("Relu", ["photo_conv"], ["y_photo"]),
    ]
    inits = [
        numpy_helper.from_array(np.asarray(4.0, np.float32), "four"),
        const("gamma", [64]),
        const("beta", [64]),
        const("row", [Z[-1]]),
        const("tiny_gamma", [8]),
        const("w_tall", [64, 64], 0.125),
        const("w_depthwise", [64, 1, 3, 3], 0.3),
        const("b_depthwise", [64]),
        const("w_few", [2, 1, 5, 5], 0.2),
        const("w_winograd", [32, 64, 3, 3], 0.05),
        const("b_winograd", [32]),
        const("w_stem", [64, 1, 10, 4], 0.2),
        const("w_lstm", [2, 4 * LSTM_HIDDEN, FRAMES[2]], 0.2),
        const("r_lstm", [2, 4 * LSTM_HIDDEN, LSTM_HIDDEN], 0.1),
        const("b_lstm", [2, 8 * LSTM_HIDDEN], 0.1),
        const("w_gru", [1, 3 * GRU_HIDDEN, FRAMES[2]], 0.2),
        const("r_gru", [1, 3 * GRU_HIDDEN, GRU_HIDDEN], 0.1),
        const("b_gru", [1, 6 * GRU_HIDDEN], 0.1),
        const("w_photo", [16, 3, 3, 3], 0.2),
        const("b_photo", [16]),
    ]
    shapes = {
        "y_attention": head,
        "y_layernorm": [1, SEQ, 64],
        **{name: Z for name in ("y_softmax", "y_logsoftmax", "y_add", "y_sigmoid")},
        "y_mul": ODD,
        "y_tiny": [2, 8],
        "y_matmul": [512, 64],
        **{name: [1, 64, 16, 16] for name in ("y_maxpool", "y_argmax", "y_avgpool")},
        "y_global": [1, 64, 1, 1],
        "y_concat": [1, 128, 32, 32],
        "y_depthwise": IMAGE,
        "y_few": [1, 2, 48, 48],
        "y_winograd": [1, 32, 32, 32],
        "y_stem": [1, 64, 25, 5],
        "y_lstm": [FRAMES[0], 2, FRAMES[1], LSTM_HIDDEN],
        "y_lstm_h": [2, FRAMES[1], LSTM_HIDDEN],
        "y_gru_h": [1, FRAMES[1], GRU_HIDDEN],
        "y_gru_lbr": [FRAMES[0], 1, FRAMES[1], GRU_HIDDEN],
        "y_photo": [1, 16, 48, 48],
    }
    outputs = [value(name, TensorProto.FLOAT, shape) for name, shape in shapes.items()]
    outputs.append(value("y_indices", TensorProto.INT64, [1, 64, 16, 16]))
    graph = helper.make_graph(nodes, "threaded", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def host_platform(folder: Path, threads: int) -> Path:
    """The host with `threads`; memory: fast, so the 3x3 Conv takes Winograd (lean declines its workspace here)."""
    path = folder / f"host{threads}.yaml"
    path.write_text(
        f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{threads: {threads}, memory: fast}}\n"
    )
    return path


def kernel_sources(out: Path) -> dict[str, str]:
    """Each kernel function's C text by the label of the nodes it computes ("Softmax (n7_softmax)", ...)."""
    return unit_kernels(out)


def split_kernels(out: Path) -> set[str]:
    """The kernels that call the pool, each named by its kind (attention, or its first operator)."""
    names = set()
    for label, text in kernel_sources(out).items():
        if "hg_parallel_for" in text or "hg_parallel_phases" in text:
            names.add("attention" if label.count("MatMul") == 2 and "Softmax" in label else label.split()[0])
    return names


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    model = threaded_model()
    folder = tmp_path_factory.mktemp("threaded")
    outs = {
        threads: hetgen.compile(
            host_platform(folder, threads), model, out=folder / f"out{threads}", opt=("-O2",), native_only=True
        )
        for threads in (1, 2)
    }
    return model, outs


def run(out: Path, feeds: dict, monkeypatch, threads: int | None = None) -> dict[str, np.ndarray]:
    if threads is None:
        monkeypatch.delenv("HG_THREADS", raising=False)
    else:
        monkeypatch.setenv("HG_THREADS", str(threads))
    with hetgen.load(out) as model:  # each load is a private copy, with a pool of its own
        return model.run(feeds)


@pytest.mark.cc
def test_large_kernels_split_and_small_ones_stay_serial(builds):
    _, outs = builds
    assert split_kernels(outs[2]) == set(LARGE)
    # the cut does not depend on the platform's thread count: the threads: 1 build has the same tasks
    assert kernel_sources(outs[1]) == kernel_sources(outs[2])
    winograd = kernel_sources(outs[2])["Conv (n21_conv) + Relu (n22_relu)"]
    assert "Winograd F(2x2, 3x3)" in winograd
    # rows of tiles as the tasks, each running its transforms and products (16 x 16 tiles: 2 of 128)
    assert "hg_parallel_for(2u, " in winograd and "_tile_rows, (void *)&job)" in winograd
    stem = kernel_sources(outs[2])["Conv (n23_conv)"]
    assert "Direct convolution of small planes" in stem and "_task, (void *)&job)" in stem
    banded = [text for text in kernel_sources(outs[2]).values() if "_band, (void *)&job)" in text]
    assert len(banded) == 1 and "implicit, from phase planes" in banded[0] and "hg_parallel_for(3u" in banded[0]
    tiny = kernel_sources(outs[2])["LayerNormalization 'tiny'"]
    assert "hg_parallel_for" not in tiny and "hg_threads.h" not in tiny


@pytest.mark.cc
def test_two_threads_match_onnxruntime_and_one_thread_bit_for_bit(builds, monkeypatch):
    model, outs = builds
    feeds = random_inputs(hetgen.load(outs[1]).inputs, seed=5)
    expected = dict(zip((o.name for o in model.graph.output), ort_session(model.SerializeToString()).run(None, feeds)))
    before = thread_ids()
    monkeypatch.delenv("HG_THREADS", raising=False)
    with hetgen.load(outs[2]) as model:
        two = model.run(feeds)
        worker = started_since(before)
        assert len(worker) == 1, "the threads: 2 build started no worker"
    assert exited(worker), "closing the model left its worker running"
    one = run(outs[1], feeds, monkeypatch)
    three = run(outs[1], feeds, monkeypatch, threads=3)
    for name, wanted in expected.items():
        np.testing.assert_allclose(two[name], wanted, rtol=1e-4, atol=1e-5, err_msg=name)
        assert np.array_equal(one[name].view(np.uint32), two[name].view(np.uint32)), f"{name}: 1 and 2 threads differ"
        assert np.array_equal(one[name].view(np.uint32), three[name].view(np.uint32)), f"{name}: 1 and 3 threads differ"


@pytest.mark.cc
def test_without_a_pool_the_split_is_a_plain_loop(builds, tmp_path):
    """Bare metal has no pool (hg_threads_config.h: HG_THREADS_POOL 0): a split kernel then refers to
    no pool function and no pthreads, so it links without hg_threads.c's pool or -pthread."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    _, outs = builds
    headers = tmp_path / "runtime"
    shutil.copytree(outs[2] / "runtime", headers)
    (headers / "hg_threads_config.h").write_text("#define HG_THREADS_DEFAULT 1\n#define HG_THREADS_POOL 0\n")
    functions = [text for _, text in kernel_functions(outs[2]).values() if "hg_parallel_" in text]
    # two MaxPools, two depthwise Convs, the Winograd, small and banded Convs, two GRUs
    assert len(functions) == len(LARGE) + 6
    kernels = sorted((outs[2] / "host" / "kernels").glob("*.c"))
    split = [path for path in kernels if "hg_parallel_" in path.read_text()]
    for index, source in enumerate(split):
        copy = headers / source.name  # beside the headers, so "hg_threads_config.h" is this one
        shutil.copy(source, copy)
        obj = tmp_path / f"k{index}.o"
        subprocess.run(["gcc", "-std=c11", "-O2", "-c", str(copy), "-I", str(headers), "-o", str(obj)], check=True)
        undefined = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, check=True).stdout
        assert "hg_parallel" not in undefined and "pthread" not in undefined, (source.name, undefined)


@pytest.mark.cc
def test_a_model_unloads_with_its_pool_stopped_again_and_again(builds, monkeypatch):
    """Unloading (close, or collection) stops and joins the worker before the library is unmapped:
    a worker left running (spinning) in unmapped code was a segfault. Thirty loads in one process,
    each with its own pool, alternately closed and collected; a shutdown through the C entry
    restarts the pool at the next run."""
    model, outs = builds
    monkeypatch.setenv("HG_THREADS", "2")
    feeds = random_inputs(hetgen.load(outs[2]).inputs, seed=7)
    gc.collect()
    expected = ort_session(model.SerializeToString()).run(None, feeds)
    before = thread_ids()
    first = None
    for round_ in range(30):
        loaded = hetgen.load(outs[2])
        got = loaded.run(feeds)
        worker = started_since(before)
        assert len(worker) == 1, f"round {round_}: {len(worker)} workers started, not one"
        if round_ == 0:
            stop = loaded.function("void hg_threads_shutdown(void);", "hg_threads_shutdown")
            stop()
            stop()  # idempotent
            assert exited(worker), "hg_threads_shutdown left the worker running"
            again = loaded.run(feeds)
            worker = started_since(before)
            assert len(worker) == 1, "the pool did not start again after a shutdown"
            assert all(np.array_equal(got[k].view(np.uint8), again[k].view(np.uint8)) for k in got)
        if round_ % 2:
            loaded.close()
            loaded.close()  # closing again does nothing
            with pytest.raises(HetgenError, match="closed"):
                loaded.run(feeds)
        del loaded
        gc.collect()
        assert exited(worker), f"round {round_}: unloading left the worker running"
        first = first or got
        for name in got:
            assert np.array_equal(first[name].view(np.uint8), got[name].view(np.uint8)), (round_, name)
    names = [output.name for output in model.graph.output]
    for name, wanted in zip(names, expected):
        np.testing.assert_allclose(first[name], wanted, rtol=1e-4, atol=1e-5, err_msg=name)


EXIT_CHILD = """
import sys, threading
import numpy as np
import hetgen
from hetgen.runtime.reference import random_inputs
model = hetgen.load(sys.argv[1])
feeds = random_inputs(model.inputs, seed=1)
model.run(feeds)
def keep_running():
    while True:
        model.run(feeds)
threading.Thread(target=keep_running, daemon=True).start()
print("ok", flush=True)
"""


@pytest.mark.cc
def test_the_interpreter_exits_cleanly_with_a_pool_running(builds):
    """At exit the model is unloaded (its finalizer, atexit) while a daemon thread keeps running it
    and the pool's worker spins: the unload waits for the run in flight and joins the worker."""
    _, outs = builds
    environment = {**os.environ, "HG_THREADS": "2", "PYTHONPATH": str(Path(hetgen.__file__).parents[1])}
    for _ in range(3):
        result = subprocess.run(
            [sys.executable, "-c", EXIT_CHILD, str(outs[2])],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
        )
        assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])


DRIVER = r"""
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hg_host.h"
#include "hg_threads.h"

#define CALLERS 3
#define RUNS 3
#define RESTARTS 30

static void *inputs[HG_HOST_NUM_INPUTS], *expected[HG_HOST_NUM_OUTPUTS];

static void *buffers(const hg_tensor_info *info, size_t count, void **into) {
    for (size_t i = 0; i < count; ++i)
        into[i] = calloc(1, info[i].nbytes);
    return into;
}

static int run_once(void **outputs, void *workspace) {
    return hg_host_run((const void *const *)inputs, outputs, workspace);
}

/* Several callers at once: one owns the pool (its attention heads run on the worker, each head's
   GEMMs alone), the others run every task themselves. */
static void *caller(void *arg) {
    (void)arg;
    void *workspace = aligned_alloc(HG_HOST_WORKSPACE_ALIGN, HG_HOST_WORKSPACE_SIZE);
    void *outputs[HG_HOST_NUM_OUTPUTS];
    buffers(hg_host_outputs, HG_HOST_NUM_OUTPUTS, outputs);
    for (int r = 0; r < RUNS; ++r) {
        if (run_once(outputs, workspace) != HG_OK)
            exit(3);
        for (size_t o = 0; o < HG_HOST_NUM_OUTPUTS; ++o)
            if (memcmp(outputs[o], expected[o], hg_host_outputs[o].nbytes) != 0) {
                fprintf(stderr, "run %d: output %zu differs\n", r, o);
                exit(4);
            }
    }
    for (size_t o = 0; o < HG_HOST_NUM_OUTPUTS; ++o)
        free(outputs[o]);
    free(workspace);
    return NULL;
}

/* hg_parallel_phases alone: each run of a phase reads every run's value of the phase before, so a
   phase that started before the barrier reads a stale value (and TSan sees the race). */
#define PHASES 64
#define PHASE_RUNS 5
typedef struct {
    size_t runs;
    unsigned value[PHASES + 1][PHASE_RUNS];
} phased;

static void phase_step(void *ctx, size_t run, size_t phase) {
    phased *job = ctx;
    unsigned sum = 0;
    for (size_t r = 0; r < job->runs; ++r)
        sum += job->value[phase][r];
    job->value[phase + 1][run] = sum * 3u + (unsigned)run;
}

static int phases_agree(size_t runs) {
    static phased pooled, serial;
    memset(&pooled, 0, sizeof pooled);
    pooled.runs = runs;
    for (size_t r = 0; r < runs; ++r)
        pooled.value[0][r] = (unsigned)r + 1u;
    serial = pooled;
    hg_parallel_phases(runs, PHASES, phase_step, &pooled);
    for (size_t p = 0; p < PHASES; ++p)
        for (size_t r = 0; r < runs; ++r)
            phase_step(&serial, r, p);
    return memcmp(&pooled, &serial, sizeof pooled) == 0;
}

/* Stops the pool again and again while the callers run: each stop waits for the call that owns the
   workers and joins them, and the next call starts them afresh. */
static void *stopper(void *arg) {
    (void)arg;
    for (int r = 0; r < RESTARTS; ++r)
        hg_threads_shutdown();
    return NULL;
}

int main(void) {
    buffers(hg_host_inputs, HG_HOST_NUM_INPUTS, inputs);
    for (size_t i = 0; i < HG_HOST_NUM_INPUTS; ++i) {
        float *x = inputs[i];
        for (size_t j = 0; j < hg_host_inputs[i].nbytes / sizeof(float); ++j)
            x[j] = (float)((j * 37 + i) % 101) / 50.0f - 1.0f;
    }
    buffers(hg_host_outputs, HG_HOST_NUM_OUTPUTS, expected);
    if (hg_host_init() != HG_OK || run_once(expected, NULL) != HG_OK) return 2;
    pthread_t threads[CALLERS], stopping;
    for (int t = 0; t < CALLERS; ++t) pthread_create(&threads[t], NULL, caller, NULL);
    pthread_create(&stopping, NULL, stopper, NULL);
    for (int t = 0; t < CALLERS; ++t) pthread_join(threads[t], NULL);
    pthread_join(stopping, NULL);
    /* run, stop, run: the pool restarts each time, and every run gives the same bits */
    void *outputs[HG_HOST_NUM_OUTPUTS];
    buffers(hg_host_outputs, HG_HOST_NUM_OUTPUTS, outputs);
    for (int r = 0; r < RESTARTS; ++r) {
        if (run_once(outputs, NULL) != HG_OK)
            return 5;
        for (size_t o = 0; o < HG_HOST_NUM_OUTPUTS; ++o)
            if (memcmp(outputs[o], expected[o], hg_host_outputs[o].nbytes) != 0)
                return 6;
        if (hg_threads_count() != 2)
            return 7;
        hg_threads_shutdown();
        hg_threads_shutdown();
    }
    /* phases at 2 threads (2 runs, and 3 and 5: more runs than threads), at 3 threads (2 runs: a
       thread with none), and at 1 (every phase on the caller) */
    static const char *counts[] = {"2", "3", "1"};
    for (int c = 0; c < 3; ++c) {
        setenv("HG_THREADS", counts[c], 1);
        hg_threads_shutdown(); /* the next call starts the pool again, reading HG_THREADS */
        for (size_t runs = 2; runs <= PHASE_RUNS; ++runs)
            if (!phases_agree(runs))
                return 8;
        if (hg_threads_count() != (size_t)atoi(counts[c]))
            return 9;
    }
    for (size_t o = 0; o < HG_HOST_NUM_OUTPUTS; ++o) free(outputs[o]);
    for (size_t i = 0; i < HG_HOST_NUM_INPUTS; ++i) free(inputs[i]);
    for (size_t o = 0; o < HG_HOST_NUM_OUTPUTS; ++o) free(expected[o]);
    puts("ok");
    return 0;
}
"""


# Loads the shared library, runs it on two threads and unloads it, again and again: odd rounds stop
# the pool first (as hetgen's loader does), even ones leave it to the library's destructor at dlclose.
UNLOAD_DRIVER = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "hg_host.h"

#define ROUNDS 30

static void *symbol(void *lib, const char *name) {
    void *address = dlsym(lib, name);
    if (address == NULL) {
        fprintf(stderr, "%s: %s\n", name, dlerror());
        exit(3);
    }
    return address;
}

int main(int argc, char **argv) {
    (void)argc;
    for (int r = 0; r < ROUNDS; ++r) {
        void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) { fprintf(stderr, "%s\n", dlerror()); return 2; }
        int (*init)(void) = (int (*)(void))symbol(lib, "hg_host_init");
        int (*run)(const void *const *, void *const *, void *) =
            (int (*)(const void *const *, void *const *, void *))symbol(lib, "hg_host_run");
        size_t (*count)(void) = (size_t (*)(void))symbol(lib, "hg_threads_count");
        void (*shutdown)(void) = (void (*)(void))symbol(lib, "hg_threads_shutdown");
        const hg_tensor_info *inputs = symbol(lib, "hg_host_inputs"), *outputs = symbol(lib, "hg_host_outputs");
        void *in[HG_HOST_NUM_INPUTS], *out[HG_HOST_NUM_OUTPUTS];
        for (size_t i = 0; i < HG_HOST_NUM_INPUTS; ++i) in[i] = calloc(1, inputs[i].nbytes);
        for (size_t o = 0; o < HG_HOST_NUM_OUTPUTS; ++o) out[o] = calloc(1, outputs[o].nbytes);
        if (init() != 0 || run((const void *const *)in, out, NULL) != 0 || count() != 2) return 4;
        if (r % 2) { shutdown(); shutdown(); }
        if (dlclose(lib) != 0) return 5;
        for (size_t i = 0; i < HG_HOST_NUM_INPUTS; ++i) free(in[i]);
        for (size_t o = 0; o < HG_HOST_NUM_OUTPUTS; ++o) free(out[o]);
    }
    puts("ok");
    return 0;
}
"""


@pytest.mark.cc
@pytest.mark.parametrize("sanitizers", [("thread",), ("address", "undefined")], ids=["tsan", "asan-ubsan"])
def test_split_kernels_are_clean_under_sanitizers(tmp_path, monkeypatch, sanitizers):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    flag = f"-fsanitize={','.join(sanitizers)}"
    monkeypatch.delenv("HG_THREADS", raising=False)
    out = hetgen.compile(
        host_platform(tmp_path, 2),
        threaded_model(),
        out=tmp_path / "out",
        opt=("-O1", "-g"),
        native_tuning=False,
        native_only=True,
        sanitize=sanitizers,
    )
    (tmp_path / "driver.c").write_text(DRIVER)
    exe = tmp_path / "driver"
    command = ["gcc", "-std=c11", "-O1", "-g", flag, "-I", str(out / "host"), "-I", str(out / "runtime")]
    command += [str(tmp_path / "driver.c"), str(out / "lib" / "libhg_host.a"), "-pthread", "-lm", "-o", str(exe)]
    subprocess.run(command, check=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "Sanitizer" not in result.stderr, result.stderr[-4000:]
    assert result.stdout.strip() == "ok"
    (tmp_path / "unload.c").write_text(UNLOAD_DRIVER)
    unload = tmp_path / "unload"
    command = ["gcc", "-std=c11", "-O1", "-g", flag, "-I", str(out / "host"), "-I", str(out / "runtime")]
    command += [str(tmp_path / "unload.c"), "-ldl", "-pthread", "-o", str(unload)]
    subprocess.run(command, check=True)
    result = subprocess.run(
        [str(unload), str(out / "lib" / "libhg_host.so")], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and "Sanitizer" not in result.stderr, result.stderr[-4000:]
    assert result.stdout.strip() == "ok"


def test_depthwise_split_cuts_planes_or_blocks_of_rows():
    # MobileNetV2's 7x7 layer of 960 channels: whole planes
    many = depthwise_split(960, 7, 7 * 9)
    assert many.blocks == 1 and many.tasks.units == 960 and many.tasks.tasks > 2
    # two large channels: blocks of rows, so more tasks than planes
    few = depthwise_split(2, 48, 48 * 25)
    assert few.blocks > 1 and few.tasks.tasks > 2
    assert few.blocks * few.block_rows >= 48 > (few.blocks - 1) * few.block_rows
    # a small layer stays one serial loop over whole planes
    assert depthwise_split(8, 4, 4 * 9) == DepthwiseSplit(4, 1, None)
