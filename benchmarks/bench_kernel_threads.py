"""Where a model's time goes at 1 and 2 threads, kernel by kernel: which kernels share their work with
the worker pool (templates/runtime/hg_threads.c), and how much of the run stays on one thread.

    python benchmarks/bench_kernel_threads.py --models squeezenet@224,ds_cnn [--runs 10] [--threads 2]

Per model it builds the host program, then a copy whose model.c times every kernel call
(clock_gettime around it) and whose hg_threads.c counts the hg_parallel_for calls that hand work to
the pool, and runs that copy in a child process per thread count (HG_THREADS=1, then T). Per kernel:
the fastest of the runs at each count (the minimum: on a shared machine the one least disturbed),
and the pool calls one run makes at T threads. Then the Amdahl figure that does not depend on the
machine's load: the share of the 1-thread time spent in kernels that call the pool at T threads,
and the best T-thread time it allows (those kernels at 1/T, the rest as at one thread).

On a busy machine (load average above the core count) the T-thread column shows little speed-up:
a worker that spins and yields between kernels is seldom running when the next kernel starts, and
the caller then claims every task itself. The share column is the structural evidence.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hetgen  # noqa: E402
from hetgen.build.ninja_file import run_ninja  # noqa: E402
from hetgen.models.suite import BENCH_MODELS  # noqa: E402

# A kernel call in the host's straight-line model.c: its comment (the units it computes), its
# arguments, the call.
CALL = re.compile(
    r"\{ /\*(?P<label>.*?)\*/(?P<args>\n\s*void \*const args\[\] = .*?;\n\s*)(?P<call>hg_host_k_\w+\(args\);)"
)
TIMERS = """#define _POSIX_C_SOURCE 200809L
#include <time.h>
double hg_bench_ns[%(count)d], hg_bench_pool_calls[%(count)d];
extern unsigned long hg_bench_pool_total;
static double hg_bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
"""
POOL_CALL = "    pool.fn = fn;\n    pool.ctx = ctx;"


def instrument(out: Path) -> list[str]:
    """Times every kernel call of `out`'s model.c and counts the pool's calls; returns the labels."""
    model_c = out / "host" / "model.c"
    labels: list[str] = []

    def timed(match: re.Match) -> str:
        index = len(labels)
        labels.append(match["label"].strip())
        return (
            f"{{ /*{match['label']}*/{match['args']}{{ const double t0 = hg_bench_now(); "
            f"const unsigned long c0 = hg_bench_pool_total; {match['call']} "
            f"hg_bench_ns[{index}] += hg_bench_now() - t0; hg_bench_pool_calls[{index}] += hg_bench_pool_total - c0; }}"
        )

    text = CALL.sub(timed, model_c.read_text())
    model_c.write_text(TIMERS % {"count": max(len(labels), 1)} + text)
    threads_c = out / "runtime" / "hg_threads.c"
    pool = threads_c.read_text()
    if POOL_CALL not in pool:
        raise SystemExit(f"{threads_c}: the pool's call site moved; update bench_kernel_threads.POOL_CALL")
    pool = pool.replace(POOL_CALL, "    hg_bench_pool_total += 1;\n" + POOL_CALL, 1)
    pool = pool.replace("void hg_parallel_for(", "unsigned long hg_bench_pool_total;\nvoid hg_parallel_for(", 1)
    threads_c.write_text("#define HG_THREADS_TRACE 1\n" + pool)
    run_ninja(out, ("native",))
    return labels


CHILD = "child"
TRACE_THREADS = 8  # hg_threads.c's TRACE_THREADS


class TraceRecord(ctypes.Structure):
    """hg_threads.c's hg_threads_trace_record: one hg_parallel_for call that reached the workers."""

    _fields_ = [
        ("tasks", ctypes.c_uint32),
        ("worker_state", ctypes.c_uint32 * TRACE_THREADS),
        ("ran", ctypes.c_uint32 * TRACE_THREADS),
        ("cpu", ctypes.c_int32 * TRACE_THREADS),
        ("moved", ctypes.c_uint32),
        ("first_claim_ns", ctypes.c_uint64),
        ("caller_done_ns", ctypes.c_uint64),
        ("all_done_ns", ctypes.c_uint64),
        ("busy_ns", ctypes.c_uint64 * TRACE_THREADS),
    ]


def trace_of(library: ctypes.CDLL, threads: int) -> list[dict]:
    """The pool trace since the last reset, one dict per call, in call order."""
    records, size = ctypes.POINTER(TraceRecord)(), ctypes.c_size_t()
    library.hg_threads_trace.restype = ctypes.c_size_t
    count = library.hg_threads_trace(ctypes.byref(records), ctypes.byref(size))
    if size.value != ctypes.sizeof(TraceRecord):
        raise SystemExit("hg_threads.c's trace record changed; update bench_kernel_threads.TraceRecord")
    return [
        {
            "tasks": r.tasks,
            "states": [r.worker_state[t] for t in range(1, min(threads, TRACE_THREADS))],
            "ran": [r.ran[t] for t in range(min(threads, TRACE_THREADS))],
            "same_cpu": sum(r.cpu[t] == r.cpu[0] for t in range(1, min(threads, TRACE_THREADS))),
            "first_claim_us": r.first_claim_ns / 1e3,
            "caller_done_us": r.caller_done_ns / 1e3,
            "all_done_us": r.all_done_ns / 1e3,
            "busy_us": [r.busy_ns[t] / 1e3 for t in range(min(threads, TRACE_THREADS))],
        }
        for r in records[:count]
    ]


def child(out: Path, kernels: int, runs: int, threads: int) -> None:
    """Runs the instrumented library: one line of per-kernel ns per run, then the last run's pool
    calls, then the pool's trace of every measured run (JSON, one list of calls per kernel)."""
    manifest = json.loads((out / "hetgen.json").read_text())
    library = ctypes.CDLL(str(out / "lib" / "libhg_host.so"))
    if library.hg_host_init() != 0:
        raise SystemExit("hg_host_init failed")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(t["shape"]).astype(t["dtype"]) for t in manifest["inputs"]]
    outputs = [np.empty(t["shape"], t["dtype"]) for t in manifest["outputs"]]
    pointers_in = (ctypes.c_void_p * len(inputs))(*[a.ctypes.data for a in inputs])
    pointers_out = (ctypes.c_void_p * len(outputs))(*[a.ctypes.data for a in outputs])
    times = (ctypes.c_double * kernels).in_dll(library, "hg_bench_ns")
    calls = (ctypes.c_double * kernels).in_dll(library, "hg_bench_pool_calls")
    for _ in range(3):  # the pool starts, caches warm
        library.hg_host_run(pointers_in, pointers_out, None)
    per_kernel: list[list[dict]] = [[] for _ in range(kernels)]
    for _ in range(runs):
        before, calls_before = np.array(times[:]), np.array(calls[:])
        library.hg_threads_trace_reset()
        library.hg_host_run(pointers_in, pointers_out, None)
        print(" ".join(f"{v:.0f}" for v in np.array(times[:]) - before))
        trace = iter(trace_of(library, threads))
        for kernel, count in enumerate(np.array(calls[:]) - calls_before):
            per_kernel[kernel] += [next(trace) for _ in range(int(count))]
    print(" ".join(f"{v:.0f}" for v in np.array(calls[:]) - calls_before))
    print(json.dumps(per_kernel))


def measure(out: Path, kernels: int, runs: int, threads: int) -> tuple[np.ndarray, np.ndarray, list[list[dict]]]:
    """(per-run per-kernel us, the pool calls of one run, each kernel's pool trace) at `threads`, in a
    child process (the pool reads HG_THREADS once, when it starts)."""
    environment = {**os.environ, "HG_THREADS": str(threads)}
    environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    command = [sys.executable, __file__, CHILD, str(out), str(kernels), str(runs), str(threads)]
    lines = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout.splitlines()
    return (
        np.array([[float(v) for v in line.split()] for line in lines[:-2]]) / 1e3,
        np.array([float(v) for v in lines[-2].split()]),
        json.loads(lines[-1]),
    )


def report(name: str, labels: list[str], one: np.ndarray, many: np.ndarray, calls: np.ndarray, threads: int) -> None:
    fastest_one, fastest_many = one.min(axis=0), many.min(axis=0)
    shared = calls > 0
    total, parallel = fastest_one.sum(), fastest_one[shared].sum()
    bound = total - parallel + parallel / threads
    print(
        f"{name}: {total:.1f} us at 1 thread (sum of each kernel's fastest run), {fastest_many.sum():.1f} us at "
        f"{threads}; {100 * parallel / total:.0f} % of the 1-thread time in kernels that call the pool at "
        f"{threads} threads, best {threads}-thread time {bound:.1f} us ({total / bound:.2f}x)"
    )
    print(f"{'1t us':>9} {f'{threads}t us':>9} {'pool':>5}  kernel (the 12 slowest, then the slowest serial ones)")
    order = list(np.argsort(-fastest_one))
    serial = [i for i in order if not shared[i]]
    for i in order[:12] + [i for i in serial[:6] if i not in order[:12]]:
        print(f"{fastest_one[i]:9.1f} {fastest_many[i]:9.1f} {calls[i]:5.0f}  {labels[i][:90]}")


def report_trace(labels: list[str], one: np.ndarray, trace: list[list[dict]]) -> None:
    """Per kernel that calls the pool: how its calls went at T threads, over every measured run."""
    print(
        f"{'1t us':>9} {'calls':>6} {'tasks':>6} {'worker%':>8} {'spinning':>9} {'none%':>6} {'claim us':>9} {'wait us':>8} {'same':>6}  "
        f"worker state when called (spinning/yielding/asleep/running %)  kernel"
    )
    fastest_one = one.min(axis=0)
    everything: list[dict] = []
    for i in np.argsort(-fastest_one):
        calls = trace[i]
        if calls:
            everything += calls
            print(f"{fastest_one[i]:9.1f} {trace_line(calls, len(one))}  {labels[i][:60]}")
    if everything:
        print(f"{'':9} {trace_line(everything, len(one))}  all")


def report_split(
    labels: list[str], one: np.ndarray, many: np.ndarray, calls: np.ndarray, trace: list[list[dict]]
) -> None:
    """Per kernel that calls the pool, where its T-thread time goes (medians over the runs, us): the
    kernel; its serial stretches (the caller outside any pool call: planes, transforms or packing it
    prepares alone); the time in its pool calls; the caller's and the workers' busy time in tasks;
    the caller's wait for the workers' last tasks; and the tasks' total busy time over the kernel's
    1-thread time (above 1: the split does more work, or the same work slower: repeated packing,
    cache lines fetched from the other core, false sharing at task boundaries)."""
    print(
        f"{'1t us':>9} {'2t us':>8} {'serial':>7} {'in pool':>8} {'caller':>7} {'workers':>8} {'wait':>6} "
        f"{'busy/1t':>7}  kernel"
    )
    fastest_one = one.min(axis=0)
    for i in np.argsort(-fastest_one):
        per_run = int(calls[i])
        if per_run == 0 or len(trace[i]) < per_run * len(many):
            continue
        runs = [trace[i][r * per_run : (r + 1) * per_run] for r in range(len(many))]
        in_pool = np.array([sum(c["all_done_us"] for c in run) for run in runs])
        caller = np.array([sum(c["busy_us"][0] for c in run) for run in runs])
        workers = np.array([sum(sum(c["busy_us"][1:]) for c in run) for run in runs])
        wait = np.array([sum(c["all_done_us"] - c["caller_done_us"] for c in run) for run in runs])
        print(
            f"{fastest_one[i]:9.1f} {np.median(many[:, i]):8.1f} {np.median(many[:, i] - in_pool):7.1f} "
            f"{np.median(in_pool):8.1f} {np.median(caller):7.1f} {np.median(workers):8.1f} {np.median(wait):6.1f} "
            f"{np.median(caller + workers) / fastest_one[i]:7.2f}  {labels[i][:60]}"
        )


def trace_line(calls: list[dict], runs: int) -> str:
    """calls per run, tasks per call, the share of tasks the workers ran (of all calls, and of the
    calls that found every worker spinning: what the pool hands a worker that is there, whatever the
    machine's load), the share of calls where no worker claimed one, the median time to a worker's first claim, the median time the caller waited
    for the workers' last tasks, and the workers' states when the calls came."""
    tasks = sum(c["tasks"] for c in calls)
    on_workers = sum(sum(c["ran"][1:]) for c in calls)
    spinning = [c for c in calls if c["states"] and all(state == 1 for state in c["states"])]
    spinning_share = (
        100 * sum(sum(c["ran"][1:]) for c in spinning) / sum(c["tasks"] for c in spinning) if spinning else float("nan")
    )
    claimed = [c["first_claim_us"] for c in calls if c["first_claim_us"] > 0]
    waits = [c["all_done_us"] - c["caller_done_us"] for c in calls]
    states = [s for c in calls for s in c["states"]]
    same_cpu = sum(c["same_cpu"] for c in calls)
    shares = "/".join(f"{100 * states.count(k) / max(len(states), 1):.0f}" for k in (1, 2, 3, 0))
    return (
        f"{len(calls) / runs:6.0f} {tasks / len(calls):6.1f} {100 * on_workers / max(tasks, 1):7.0f}% "
        f"{spinning_share:8.0f}% "
        f"{100 * (len(calls) - len(claimed)) / len(calls):5.0f}% "
        f"{np.median(claimed) if claimed else float('nan'):9.1f} {np.median(waits):8.1f} "
        f"{100 * same_cpu / max(len(states), 1):5.0f}%  {shares:>20}"
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        child(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="squeezenet@224,ds_cnn", help=f"from {', '.join(BENCH_MODELS)}")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in BENCH_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; accepted: {', '.join(BENCH_MODELS)}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="hetgen-kernel-threads-") as tmp:
        for name in names:
            path = Path(tmp) / f"{name.replace('@', '_')}.onnx"
            onnx.save(BENCH_MODELS[name](), path)
            out = hetgen.compile("host", path, out=Path(tmp) / path.stem, native_only=True)
            labels = instrument(out)
            one, _, _ = measure(out, len(labels), args.runs, 1)
            many, calls, trace = measure(out, len(labels), args.runs, args.threads)
            report(name, labels, one, many, calls, args.threads)
            report_trace(labels, one, trace)
            report_split(labels, one, many, calls, trace)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
