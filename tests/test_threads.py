"""The GEMM's worker pool (templates/runtime/hg_threads.c): `options: {threads: N}` compiles in the
default, HG_THREADS overrides it at run time, and splitting a GEMM between threads changes no bit
of any output (each element is summed by one thread, in the one-thread order)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.errors import HetgenError
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session
from pool_threads import exited, started_since, thread_ids

SHAPE = [1, 16, 16, 16]


def conv_gemm_model() -> onnx.ModelProto:
    """Three GEMMs big enough to split: conv1 by columns (256 output pixels, im2col packed by each
    thread), conv2 by rows (64 output channels over only 16 pixels), the Gemm by columns (300
    outputs). A 5x5 kernel keeps conv1 off Winograd, whose GEMMs are too small to split."""
    rng = np.random.default_rng(0)

    def weight(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[2, 2, 2, 2], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[4, 4], strides=[4, 4], name="conv2"),
        helper.make_node("Flatten", ["c2"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "threads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 300])],
        initializer=[
            weight("w1", (32, 16, 5, 5)),
            weight("b1", (32,)),
            weight("w2", (64, 32, 4, 4)),
            weight("w3", (300, 1024)),
            weight("b3", (300,)),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def host_platform(folder: Path, threads: int) -> Path:
    path = folder / f"host{threads}.yaml"
    path.write_text(f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{threads: {threads}}}\n")
    return path


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    model = conv_gemm_model()
    folder = tmp_path_factory.mktemp("threads")
    outs = {
        threads: hetgen.compile(
            host_platform(folder, threads), model, out=folder / f"out{threads}", opt=("-O2",), native_only=True
        )
        for threads in (1, 2)
    }
    return model, outs


@pytest.mark.cc
def test_two_threads_match_onnxruntime_and_one_thread_bit_for_bit(builds, monkeypatch):
    model, outs = builds
    monkeypatch.delenv("HG_THREADS", raising=False)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    expected = ort_session(model.SerializeToString()).run(None, {"x": x})[0]
    one = hetgen.load(outs[1]).run({"x": x})["y"]
    before = thread_ids()
    loaded = hetgen.load(outs[2])  # held: unloading a model stops its pool's workers
    two = loaded.run({"x": x})["y"]
    worker = started_since(before)
    assert len(worker) == 1, "the threads: 2 build started no worker"
    loaded.close()
    assert exited(worker), "closing the model left its worker running"
    np.testing.assert_allclose(two, expected, rtol=1e-4, atol=1e-4)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32)), "splitting the GEMM changed bits"
    assert (outs[2] / "host" / "hg_threads_config.h").read_text().count("HG_THREADS_DEFAULT 2") == 1


@pytest.mark.cc
def test_hg_threads_overrides_the_platform_at_run_time(builds, monkeypatch):
    model, outs = builds
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    monkeypatch.setenv("HG_THREADS", "1")
    before = thread_ids()
    # each load is a private copy with its own pool; held, since unloading one stops its workers
    first = hetgen.load(outs[2])
    one = first.run({"x": x})["y"]
    assert not started_since(before), "HG_THREADS=1 still started a worker"
    monkeypatch.setenv("HG_THREADS", "3")
    second = hetgen.load(outs[1])
    three = second.run({"x": x})["y"]
    workers = started_since(before)
    assert len(workers) == 2, "HG_THREADS=3 did not start two workers in a threads: 1 build"
    first.close()
    second.close()
    assert exited(workers), "closing the model left its workers running"
    assert np.array_equal(one.view(np.uint32), three.view(np.uint32))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "'threads' of options must be at least 1, not 0"),
        ("two", "'threads' of options must be an integer"),
        ("1000", "'threads' of options must be at most 64, not 1000"),
    ],
)
def test_bad_thread_counts_are_refused(value, message):
    with pytest.raises(HetgenError) as error:
        load_platform_text(f"name: host\ntarget: {{kind: native}}\noptions: {{threads: {value}}}\n", "p.yaml")
    assert message in str(error.value) and "p.yaml:3" in str(error.value)


def test_threads_on_bare_metal_are_refused():
    text = Path("platforms/mcu.yaml").read_text() + "\noptions: {threads: 2}\n"
    with pytest.raises(HetgenError) as error:
        load_platform_text(text, "platforms/mcu.yaml", "platforms")
    text = str(error.value)
    assert "platforms/mcu.yaml:" in text and "is bare metal (no pthreads)" in text, text
    one = load_platform_text(
        Path("platforms/mcu.yaml").read_text() + "\noptions: {threads: 1}\n", "mcu.yaml", "platforms"
    )
    assert one.options["threads"] == 1


DRIVER = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hg_host.h"

#define CALLERS 3
#define RUNS 4
#define IN_FLOATS (16 * 16 * 16)
#define OUT_FLOATS 300

static float input[IN_FLOATS], expected[OUT_FLOATS];

static int run_once(float *out, void *workspace) {
    const void *inputs[1] = { input };
    void *outputs[1] = { out };
    return hg_host_run(inputs, outputs, workspace);
}

/* Several callers at once: one owns the pool, the others run their GEMMs alone. */
static void *caller(void *arg) {
    (void)arg;
    void *workspace = aligned_alloc(HG_HOST_WORKSPACE_ALIGN, HG_HOST_WORKSPACE_SIZE);
    float out[OUT_FLOATS];
    for (int r = 0; r < RUNS; ++r)
        if (run_once(out, workspace) != HG_OK || memcmp(out, expected, sizeof out) != 0) {
            fprintf(stderr, "run %d: wrong result\n", r);
            exit(3);
        }
    free(workspace);
    return NULL;
}

int main(void) {
    for (int i = 0; i < IN_FLOATS; ++i) input[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    if (hg_host_init() != HG_OK || run_once(expected, NULL) != HG_OK) return 2;
    pthread_t threads[CALLERS];
    for (int t = 0; t < CALLERS; ++t) pthread_create(&threads[t], NULL, caller, NULL);
    for (int t = 0; t < CALLERS; ++t) pthread_join(threads[t], NULL);
    puts("ok");
    return 0;
}
"""


@pytest.mark.cc
def test_pool_is_clean_under_thread_sanitizer(tmp_path, monkeypatch):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    monkeypatch.delenv("HG_THREADS", raising=False)
    out = hetgen.compile(
        host_platform(tmp_path, 2),
        conv_gemm_model(),
        out=tmp_path / "out",
        opt=("-O1", "-g"),
        native_tuning=False,
        sanitize=("thread",),
    )
    (tmp_path / "driver.c").write_text(DRIVER)
    exe = tmp_path / "driver"
    command = ["gcc", "-std=c11", "-O1", "-g", "-fsanitize=thread", "-I", str(out / "host"), "-I", str(out / "runtime")]
    command += [str(tmp_path / "driver.c"), str(out / "lib" / "libhg_host.a"), "-pthread", "-lm", "-o", str(exe)]
    subprocess.run(command, check=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "ThreadSanitizer" not in result.stderr, result.stderr[-4000:]
    assert result.stdout.strip() == "ok"


TRACE_DRIVER = r"""
#define HG_THREADS_TRACE 1
#include "hg_threads.c" /* its statics too: the trace records, the workers' seats */

#define WAIT_S 10 /* bounded waits: only a worker that never runs fails them */

static atomic_int runs_on[64], caller_busy;

static int wait_for(int (*done)(void))
{
    const uint64_t until = now_us() + WAIT_S * 1000000u;
    while (!done())
        if (now_us() > until)
            return 0;
    return 1;
}

static int second_task_ran(void) { return atomic_load(&runs_on[1]) != 0; }

/* Task 0 holds its thread until task 1 has run: the other thread must have claimed it. */
static void pair_task(void *ctx, size_t task, void *scratch)
{
    (void)ctx, (void)scratch;
    atomic_fetch_add(&runs_on[task], 1);
    if (task == 0 && !wait_for(second_task_ran))
        atomic_store(&caller_busy, 1);
}

static pthread_t caller;
static atomic_int on_caller[8];

static void count_task(void *ctx, size_t task, void *scratch)
{
    (void)scratch;
    atomic_fetch_add(&((atomic_int *)ctx)[task], 1);
    atomic_store(&on_caller[task], pthread_equal(pthread_self(), caller));
}

static int worker_awake(void) { return atomic_load(&seat[1].state) != WORKER_ASLEEP; }
static int worker_asleep(void) { return atomic_load(&seat[1].state) == WORKER_ASLEEP; }

int main(void)
{
    setenv("HG_THREADS", "2", 1);
    caller = pthread_self();
    hg_parallel_for(2, pair_task, NULL);
    if (atomic_load(&caller_busy) || runs_on[0] != 1 || runs_on[1] != 1)
        return 10; /* no second thread ran beside the first */
    hg_threads_trace_reset();
    for (int call = 0; call < 200; ++call) {
        atomic_int counts[8] = {0};
        hg_parallel_for(8, count_task, counts);
        for (int t = 0; t < 8; ++t)
            if (counts[t] != 1)
                return 11; /* a task ran twice, or not at all */
        for (int t = 1; t < 8; ++t)
            if (on_caller[t] && !on_caller[t - 1])
                return 20; /* the caller's tasks are not the front of the call's, the worker's the back */
    }
    const hg_threads_trace_record *records;
    size_t bytes;
    if (hg_threads_trace(&records, &bytes) != 200 || bytes != sizeof *records)
        return 12;
    const int cpus = CPU_COUNT(&pool.allowed);
    for (size_t i = 0; i < 200; ++i) {
        const hg_threads_trace_record *r = &records[i];
        if (r->tasks != 8 || r->ran[0] + r->ran[1] != 8 || r->all_done_ns < r->caller_done_ns)
            return 13;
        if ((r->ran[1] != 0) != (r->first_claim_ns != 0))
            return 14;
        for (int t = 0; t < 2; ++t)
            if ((r->ran[t] != 0) != (r->busy_ns[t] != 0) || r->busy_ns[t] > r->all_done_ns)
                return 21; /* busy time where no task ran, or longer than the call */
        /* a worker seen on the caller's CPU is moved off it, where there is another CPU */
        if (cpus > 1 && r->cpu[1] == r->cpu[0] && r->moved != 1)
            return 15;
    }
    /* while a run is in flight the worker does not sleep, however long between calls */
    if (!wait_for(worker_asleep))
        return 16;
    hg_threads_run_begin();
    if (!wait_for(worker_awake))
        return 17;
    const struct timespec pause = {0, 20 * HG_THREADS_SPIN_US * 1000};
    nanosleep(&pause, NULL);
    if (!worker_awake())
        return 18;
    /* a wait inside the run (a remote device's reply) lets it sleep, and its end wakes it */
    hg_threads_wait_begin();
    if (!wait_for(worker_asleep))
        return 22;
    hg_threads_wait_end();
    if (!wait_for(worker_awake))
        return 23;
    hg_threads_run_end();
    if (!wait_for(worker_asleep))
        return 19;
    /* outside a run a wait changes nothing */
    hg_threads_wait_begin();
    hg_threads_wait_end();
    if (atomic_load(&pool.runs) != 0)
        return 24;
    hg_threads_shutdown();
    puts("ok");
    return 0;
}
"""


@pytest.mark.cc
def test_pool_trace_records_every_call_and_workers_stay_up_for_a_run(tmp_path):
    """The pool's trace (-DHG_THREADS_TRACE, read by benchmarks/bench_kernel_threads.py) compiles
    warning-free and clean under ThreadSanitizer, and shows what the pool promises: a second thread
    runs a task beside the caller's; each call's tasks run once each, between the two threads, the
    caller's from the front and the worker's from the back, each thread's busy time recorded; a
    worker found on the caller's CPU is moved off it; and a worker does not sleep while a run is in
    flight (hg_threads_run_begin), but does during the run's wait for a remote device
    (hg_threads_wait_begin, hg_remote.c) and after it."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    runtime = Path(hetgen.__file__).parent.parent / "templates" / "runtime"
    (tmp_path / "hg_threads_config.h").write_text("#define HG_THREADS_DEFAULT 1\n#define HG_THREADS_POOL 1\n")
    (tmp_path / "driver.c").write_text(TRACE_DRIVER)
    exe = tmp_path / "driver"
    command = ["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fsanitize=thread"]
    command += ["-I", str(tmp_path), "-I", str(runtime), str(tmp_path / "driver.c")]
    subprocess.run(command + ["-pthread", "-o", str(exe)], check=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "ThreadSanitizer" not in result.stderr, (result.returncode, result.stderr[-4000:])
    assert result.stdout.strip() == "ok"
