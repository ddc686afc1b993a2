/* hetgen's worker pool: one fork/join loop, used by the GEMM (hg_gemm.c) to split its outermost
   independent loop, and by the kernels big enough to share (attention heads, LayerNorm and Softmax
   rows, pooling and depthwise convolution planes, elementwise chunks: hetgen/ops/_parallel.py cuts
   them into tasks at generate time), and by the recurrent layers, whose steps run as the phases of
   one call with a barrier between them (hg_parallel_phases). The pool exists only where the
   platform allows threads (hg_threads_config.h in each program's folder, written by hetgen from the
   controller's `threads:` or the platform's `options: {threads: N}`; never on bare-metal targets,
   where hg_parallel_for and hg_parallel_phases below are inline loops and the tasks compile to the
   serial code).

   Thread count: HG_THREADS_DEFAULT (the controller's `threads`), overridden at run time by the
   environment variable HG_THREADS (1..HG_THREADS_MAX), read when the pool starts.
   Workers are created on the first parallel call and run until hg_threads_shutdown (or until the
   library is unloaded or the process exits); the next parallel call after a shutdown starts them
   again, reading HG_THREADS afresh. */
#ifndef HG_THREADS_H
#define HG_THREADS_H

#include <stddef.h>

#include "hg_kernels.h"

/* A generated program always has hg_threads_config.h on its include path (its own folder); a
   kernel compiled on its own (tests, a user's harness) gets no pool, so it needs neither pthreads
   nor hg_threads.c. */
#if defined(__has_include)
#if __has_include("hg_threads_config.h")
#include "hg_threads_config.h"
#endif
#endif
#ifndef HG_THREADS_DEFAULT
#define HG_THREADS_DEFAULT 1
#endif
#ifndef HG_THREADS_POOL
#define HG_THREADS_POOL 0
#endif

#define HG_THREADS_MAX 64

/* Each worker's own scratch: the GEMM's packing buffers for a full MC x KC x NC block (a kernel that
   needs less per task, such as one attention head, may use it instead of its own workspace). */
#define HG_THREADS_SCRATCH_BYTES HG_SGEMM_PACK_BYTES(HG_SGEMM_MC, HG_SGEMM_NC, HG_SGEMM_KC)

/* One task. `scratch` is HG_THREADS_SCRATCH_BYTES bytes (64-byte aligned) owned by the thread
   that runs the task, or NULL when all tasks run on the caller (the caller's own buffers then). */
typedef void (*hg_task_fn)(void *ctx, size_t task, void *scratch);

/* One run's share of one phase of hg_parallel_phases. */
typedef void (*hg_phase_fn)(void *ctx, size_t run, size_t phase);

#if HG_THREADS_POOL

/* The number of threads parallel calls use (1: everything runs on the caller). */
size_t hg_threads_count(void);

/* Runs fn(ctx, task, scratch) for every task in [0, n) and returns when all are done. The caller
   and the workers claim tasks one at a time, so a worker the OS is slow to wake costs nothing: the
   caller runs its share too (workers spin a while between calls, so they are seldom asleep). At
   most 65535 tasks (more run on the caller). Which thread runs a task must not change its result. While another
   caller holds the pool, every task runs on this caller, one after another, with scratch NULL
   (the generated code stays re-entrant). */
void hg_parallel_for(size_t n, hg_task_fn fn, void *ctx);

/* Runs fn(ctx, run, phase) for every run in [0, runs) of every phase in [0, phases), phase after
   phase: no run of a phase starts before every run of the one before has returned (a recurrent
   layer's steps: each run a fixed range of hidden units, each phase a step that reads every unit
   of the previous one). One hg_parallel_for call of `runs` tasks for all of them, with a barrier
   between phases instead of a call each: run r stays on the thread that claimed it (the caller
   takes run 0), so it reads the same data every phase, in that core's cache. The caller never
   waits on a run no thread has claimed: it runs such a phase itself, so a worker the OS is slow to
   wake only costs its share. At most HG_THREADS_MAX runs (more: all on the caller). Which thread
   runs a phase must not change its result. */
void hg_parallel_phases(size_t runs, size_t phases, hg_phase_fn fn, void *ctx);

/* Around a model run (the generated `_run`): while a run is in flight the workers keep spinning
   between its parallel calls instead of sleeping after HG_THREADS_SPIN_US (the serial kernels and
   waits between two split ones can outlast it, and waking a sleeping worker costs tens of
   microseconds), and the start wakes a sleeping worker, so that it is up by the run's first
   parallel call. Pairs nest (runs on several threads). */
void hg_threads_run_begin(void);
void hg_threads_run_end(void);
/* Around a wait inside a run for something other than this process's CPUs (a remote device's
   reply over its transport: hg_remote.c): the workers may sleep meanwhile, as between runs, instead
   of spinning on cores the wait does not use (a Linux root's A53s while its MCU works), and the
   wait's end wakes them. Nothing outside a run on this thread (a device's setup, a frame thread). */
void hg_threads_wait_begin(void);
void hg_threads_wait_end(void);

/* Stops the workers and waits until they have returned (they are joined, so none runs this
   library's code afterwards), and frees their scratch. Call it before the library that holds the
   pool is unloaded (dlclose): hetgen's loader does (hetgen/runtime/loader.py). Safe to call
   again, or on a pool that never started; it waits for a call that owns the workers to end, and
   must not be called from a task. A later parallel call starts the pool again. */
void hg_threads_shutdown(void);

#else /* no pool on this platform (bare metal, or threads are not wanted): the caller runs all */

static inline size_t hg_threads_count(void) { return 1; }

static inline void hg_parallel_for(size_t n, hg_task_fn fn, void *ctx)
{
    for (size_t task = 0; task < n; ++task)
        fn(ctx, task, NULL);
}

static inline void hg_parallel_phases(size_t runs, size_t phases, hg_phase_fn fn, void *ctx)
{
    for (size_t phase = 0; phase < phases; ++phase)
        for (size_t run = 0; run < runs; ++run)
            fn(ctx, run, phase);
}

static inline void hg_threads_shutdown(void) {}

static inline void hg_threads_run_begin(void) {}

static inline void hg_threads_run_end(void) {}

static inline void hg_threads_wait_begin(void) {}

static inline void hg_threads_wait_end(void) {}

#endif

#endif
