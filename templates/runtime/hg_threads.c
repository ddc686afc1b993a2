/* hetgen's worker pool (see hg_threads.h).

   A call publishes its job (function, context, task count) and then one 64-bit ticket: the call's
   generation and the range of its tasks not yet claimed. The caller and the workers claim tasks by
   compare-and-swap on the ticket, so a claim can only succeed for the call it read: a worker that
   arrives after its call ended finds a ticket of another generation (or one with no task left) and
   claims nothing. The job's fields are read only after a claim succeeded, and a call cannot end
   while one of its tasks runs, so they are stable while they are read.

   Between calls a worker spins for a while (HG_THREADS_SPIN_US) before it sleeps on a condition
   variable: a model's parallel kernels come one after another, microseconds apart, and waking a
   sleeping thread costs tens of microseconds (more on a loaded machine, where the worker then
   arrives after the caller has done all the work). A spinning worker claims its first task at once.
   While a model run is in flight (hg_threads_run_begin) the workers do not sleep at all, and the
   run's start wakes a sleeping one. The caller likewise spins a while for the last tasks before it
   sleeps. Where the pool has more threads than the process has CPUs, the spinning yields the CPU
   between checks past a short first part. No allocation after the pool starts.

   A worker must not wait on the caller's CPU: there it runs only when the caller is descheduled.
   The OS puts it there when the caller wakes it (wake-affine) and, with the other CPUs busy, leaves
   it there; so a call that finds a worker on its own CPU moves it to the process's other CPUs
   (place_workers). -DHG_THREADS_TRACE compiles in a record of every call (the tasks each thread
   ran, how soon a worker claimed one, where and in what state the workers were): printed per
   kernel by benchmarks/bench_kernel_threads.py.

   The pool starts on the first call that needs it and runs until hg_threads_shutdown, which stops
   and joins the workers (a library must not be unloaded while they run its code); the next call
   starts it again. A destructor does the same when the library is unloaded (dlclose) or the
   process exits, unless a call holds the pool then. */
#if defined(__linux__)
#define _GNU_SOURCE /* sched_getcpu, pthread_setaffinity_np */
#define HG_THREADS_PLACE 1
#else
#define HG_THREADS_PLACE 0
#endif
#define _POSIX_C_SOURCE 200809L
#include "hg_threads.h"

#if HG_THREADS_POOL
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HG_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define HG_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define HG_CPU_RELAX() ((void)0)
#endif

/* How long a worker (or a caller waiting for its last tasks) spins before it sleeps, and after how
   long of it the spinning thread yields its core between checks (so that where the OS has put it
   on the same core as the caller, on a busy machine, it does not take the caller's time). */
#ifndef HG_THREADS_SPIN_US
#define HG_THREADS_SPIN_US 200
#endif
#ifndef HG_THREADS_YIELD_US
#define HG_THREADS_YIELD_US 20
#endif

/* The ticket: generation (32 bits) | front (16 bits) | back (16 bits). The tasks not yet claimed
   are [front, back): the caller claims from the front, the workers from the back, so each thread
   takes one end of every call's tasks. Consecutive kernels cut alike (the same channels or rows in
   the same order) then leave each part of an activation in the cache of the core that wrote it,
   and the next kernel's thread for that part reads it there: where the two CPUs are far apart (this
   VM's two vCPUs on different dies of the host at times: a cache line written by one and read by
   the other took 315-496 ns a round trip instead of 79-122, reading 256 KB the other CPU wrote 3x
   the time of reading one's own), tasks claimed in one stream from the front mixed every
   activation's parts between the two, and ShuffleNet ran 3x slower at two threads than at one. */
#define TICKET_TASKS_MAX 0xffffu
#define TICKET(generation, front, back) (((uint64_t)(generation) << 32) | ((uint64_t)(front) << 16) | (uint64_t)(back))
#define TICKET_GENERATION(t) ((uint32_t)((t) >> 32))
#define TICKET_FRONT(t) ((size_t)(((t) >> 16) & 0xffffu))
#define TICKET_BACK(t) ((size_t)((t) & 0xffffu))
#define TICKET_FRONT_STEP ((uint64_t)1 << 16)

/* Worker states, published for the trace: what a worker was doing when a call came. */
enum { WORKER_RUNNING, WORKER_SPINNING, WORKER_YIELDING, WORKER_ASLEEP };

#ifdef HG_THREADS_TRACE
/* Compiled in with -DHG_THREADS_TRACE (benchmarks/bench_kernel_threads.py does): one record per
   hg_parallel_for call that reached the workers, read back through hg_threads_trace (declared
   there, not in hg_threads.h: nothing else links against it). */
#define TRACE_RECORDS 16384u
#define TRACE_THREADS 8u
typedef struct {
    uint32_t tasks;                 /* the call's task count */
    uint32_t worker_state[TRACE_THREADS]; /* each worker's state when the call was published */
    uint32_t ran[TRACE_THREADS];    /* tasks each thread ran (0: the caller) */
    int32_t cpu[TRACE_THREADS];     /* the CPU each thread last ran on when the call came */
    uint32_t moved;                 /* workers moved off the caller's CPU (place_workers) */
    uint64_t first_claim_ns;        /* publish -> a worker's first claim (0: no worker claimed one) */
    uint64_t caller_done_ns;        /* publish -> the caller found no task left */
    uint64_t all_done_ns;           /* publish -> the last task finished */
    uint64_t busy_ns[TRACE_THREADS]; /* the time each thread spent in the call's tasks (0: the caller) */
} hg_threads_trace_record;
static hg_threads_trace_record trace_records[TRACE_RECORDS];
static atomic_size_t trace_count;
static uint64_t trace_publish_ns;

static uint64_t trace_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

size_t hg_threads_trace(const hg_threads_trace_record **records, size_t *record_bytes);
size_t hg_threads_trace(const hg_threads_trace_record **records, size_t *record_bytes)
{
    *records = trace_records;
    *record_bytes = sizeof(hg_threads_trace_record);
    const size_t count = atomic_load_explicit(&trace_count, memory_order_acquire);
    return count < TRACE_RECORDS ? count : TRACE_RECORDS;
}

void hg_threads_trace_reset(void);
void hg_threads_trace_reset(void)
{
    atomic_store_explicit(&trace_count, 0, memory_order_release);
}

static hg_threads_trace_record *trace_current(void)
{
    const size_t index = atomic_load_explicit(&trace_count, memory_order_relaxed);
    return index < TRACE_RECORDS ? &trace_records[index] : NULL;
}

/* A claim by `thread` of the current call's task; returns when it was made (for trace_task_done). */
static uint64_t trace_claim(size_t thread, int first)
{
    const uint64_t now = trace_now_ns();
    hg_threads_trace_record *record = trace_current();
    if (record == NULL || thread >= TRACE_THREADS)
        return now;
    __atomic_fetch_add(&record->ran[thread], 1u, __ATOMIC_RELAXED);
    if (first && thread != 0) {
        uint64_t none = 0;
        __atomic_compare_exchange_n(&record->first_claim_ns, &none, now - trace_publish_ns, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    }
    return now;
}

/* The task `thread` claimed at `claimed` is done (before it is counted: the call is still current). */
static void trace_task_done(size_t thread, uint64_t claimed)
{
    hg_threads_trace_record *record = trace_current();
    if (record != NULL && thread < TRACE_THREADS)
        __atomic_fetch_add(&record->busy_ns[thread], trace_now_ns() - claimed, __ATOMIC_RELAXED);
}
#define TRACE(statement) statement
#else
#define TRACE(statement) ((void)0)
#endif

static struct {
    pthread_mutex_t state;  /* held while the pool starts or stops */
    atomic_int running;     /* started (set last, with release, once threads and scratch are ready) */
    atomic_size_t threads;  /* the caller and the workers */
    atomic_int stop;        /* tells the workers to return */
    pthread_t workers[HG_THREADS_MAX];
    void *scratch[HG_THREADS_MAX];
    pthread_mutex_t busy; /* held by the one caller that owns the workers, and while the pool stops */
    _Atomic uint64_t ticket;
    atomic_size_t finished; /* tasks of the current call that are done */
    hg_task_fn fn;          /* the current call's job: written before its ticket, read after a claim */
    void *ctx;
    size_t n; /* the current call's task count */
    pthread_mutex_t lock; /* guards sleepers and the sleeps on the condition variables */
    pthread_cond_t start, done;
    size_t sleepers;
    atomic_size_t runs; /* model runs in flight (hg_threads_run_begin): the workers do not sleep */
    atomic_int may_yield; /* whether two of the pool's threads may share a CPU (spin_step) */
#if HG_THREADS_PLACE
    cpu_set_t allowed; /* the CPUs the process may run on when the pool started */
#endif
} pool = {
    .state = PTHREAD_MUTEX_INITIALIZER,
    .threads = 1,
    .busy = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .start = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};

/* What each worker publishes about itself while it waits, a cache line each (a spinning worker
   writes it; the caller reads it once a call). */
static struct {
    _Alignas(64) atomic_int cpu; /* the CPU it last waited on (-1: not known) */
    atomic_int state;            /* WORKER_*, kept for the trace only */
} seat[HG_THREADS_MAX];

static size_t requested_threads(void)
{
    const char *text = getenv("HG_THREADS");
    if (text == NULL || *text == '\0')
        return HG_THREADS_DEFAULT;
    char *end = NULL;
    const long value = strtol(text, &end, 10);
    if (*end != '\0' || value < 1 || value > HG_THREADS_MAX) {
        fprintf(stderr, "hetgen: HG_THREADS=%s is not a thread count from 1 to %d; using %d\n", text,
                HG_THREADS_MAX, HG_THREADS_DEFAULT);
        return HG_THREADS_DEFAULT;
    }
    return (size_t)value;
}

static uint64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* Claims and runs tasks of call `generation` on `thread` (0: the caller, from the front; the
   workers from the back) until none is left. */
static void run_tasks(uint32_t generation, size_t thread, void *scratch)
{
    uint64_t ticket = atomic_load_explicit(&pool.ticket, memory_order_acquire);
    TRACE(int first = 1);
    for (;;) {
        if (TICKET_GENERATION(ticket) != generation || TICKET_FRONT(ticket) >= TICKET_BACK(ticket))
            return;
        const uint64_t claimed = thread == 0 ? ticket + TICKET_FRONT_STEP : ticket - 1;
        if (!atomic_compare_exchange_weak_explicit(&pool.ticket, &ticket, claimed, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* `ticket` now holds the current value */
        const size_t task = thread == 0 ? TICKET_FRONT(ticket) : TICKET_BACK(claimed);
        const size_t n = pool.n; /* read before this task is counted done: the call may end then */
        TRACE(const uint64_t claimed_ns = trace_claim(thread, first));
        TRACE(first = 0);
        pool.fn(pool.ctx, task, scratch);
        TRACE(trace_task_done(thread, claimed_ns));
        if (atomic_fetch_add_explicit(&pool.finished, 1, memory_order_acq_rel) + 1 == n) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
        ticket = atomic_load_explicit(&pool.ticket, memory_order_acquire);
    }
}

/* One step of a bounded wait: a pause, or past HG_THREADS_YIELD_US a yield of the core where two of
   the pool's threads may share a CPU (more threads than CPUs, or no placement: the spinning one
   would take the other's time). Returns 0 once the wait has lasted HG_THREADS_SPIN_US (time to
   sleep instead). Where each thread has a CPU of its own a wait never yields: on a busy machine a
   yielding worker gives its CPU to another process at every check, and is then seldom running when
   a call comes (the trace: 0 % of SqueezeNet's tasks at load average 13 on 2 cores). */
typedef struct {
    uint64_t start;
    unsigned steps;
    int yielding;
} spin_wait;

static int spin_step(spin_wait *wait)
{
    if (wait->yielding)
        sched_yield();
    else
        HG_CPU_RELAX();
    if (++wait->steps % 64u != 0 && !wait->yielding)
        return 1;
    const uint64_t spent = now_us() - wait->start;
    wait->yielding = atomic_load_explicit(&pool.may_yield, memory_order_relaxed) && spent >= HG_THREADS_YIELD_US;
    return spent < HG_THREADS_SPIN_US;
}

static int stopping(void)
{
    return atomic_load_explicit(&pool.stop, memory_order_acquire);
}

static int runs_in_flight(void)
{
    return atomic_load_explicit(&pool.runs, memory_order_acquire) != 0;
}

/* The next call's generation, once there is one (or `seen` once the pool stops): spins first,
   then sleeps, but not while a model run is in flight (hg_threads_run_begin). */
static uint32_t next_generation(size_t thread, uint32_t seen)
{
    (void)thread;
    TRACE(atomic_int *const state = &seat[thread].state);
    for (;;) {
        TRACE(atomic_store_explicit(state, WORKER_SPINNING, memory_order_relaxed));
        spin_wait wait = {now_us(), 0, 0};
        do {
            const uint32_t generation = TICKET_GENERATION(atomic_load_explicit(&pool.ticket, memory_order_acquire));
            if (generation != seen || stopping()) {
                TRACE(atomic_store_explicit(state, WORKER_RUNNING, memory_order_relaxed));
                return generation;
            }
            TRACE(if (wait.yielding) atomic_store_explicit(state, WORKER_YIELDING, memory_order_relaxed));
#if HG_THREADS_PLACE
            /* where it waits, for place_workers: not every step (a call costs 9-11 ns here, a
               pause-and-load step less); 64 steps are a few microseconds */
            if (wait.steps % 64u == 0)
                atomic_store_explicit(&seat[thread].cpu, sched_getcpu(), memory_order_relaxed);
#endif
        } while (spin_step(&wait) || runs_in_flight());
        pthread_mutex_lock(&pool.lock);
        TRACE(atomic_store_explicit(state, WORKER_ASLEEP, memory_order_relaxed));
        ++pool.sleepers;
        /* until a call, the pool's stop, or a run's start (then back to spinning, for its first call) */
        while (TICKET_GENERATION(atomic_load_explicit(&pool.ticket, memory_order_acquire)) == seen && !stopping() &&
               !runs_in_flight())
            pthread_cond_wait(&pool.start, &pool.lock);
        --pool.sleepers;
        pthread_mutex_unlock(&pool.lock);
    }
}

static void *worker_main(void *arg)
{
    const size_t thread = (size_t)arg;
    uint32_t seen = 0;
    for (;;) {
        seen = next_generation(thread, seen);
        if (stopping())
            return NULL;
        run_tasks(seen, thread, pool.scratch[thread]);
    }
}

static void free_scratch(void)
{
    for (size_t t = 0; t < HG_THREADS_MAX; ++t) {
        free(pool.scratch[t]);
        pool.scratch[t] = NULL;
    }
}

/* Scratch for `count` threads, or none (and 0) when memory is short. */
static int allocate_scratch(size_t count)
{
    for (size_t t = 0; t < count; ++t) {
        pool.scratch[t] = aligned_alloc(64, (HG_THREADS_SCRATCH_BYTES + 63u) & ~(size_t)63u);
        if (pool.scratch[t] == NULL) {
            free_scratch();
            return 0;
        }
    }
    return 1;
}

/* Scratch for every thread, then the workers (joinable: hg_threads_shutdown waits for them); if
   scratch is short the pool stays at one thread, and if a worker cannot start it runs with those
   that did. One thread needs neither: its tasks run on the caller, in the kernels' own
   workspaces. The caller holds `state`. */
static void start_pool(void)
{
    const size_t wanted = requested_threads();
#if HG_THREADS_PLACE
    if (sched_getaffinity(0, sizeof pool.allowed, &pool.allowed) != 0)
        CPU_ZERO(&pool.allowed);
    for (size_t t = 0; t < HG_THREADS_MAX; ++t)
        atomic_store_explicit(&seat[t].cpu, -1, memory_order_relaxed);
#endif
    size_t started = 1;
    if (wanted > 1 && allocate_scratch(wanted))
        for (; started < wanted; ++started)
            if (pthread_create(&pool.workers[started], NULL, worker_main, (void *)started) != 0)
                break;
    atomic_store_explicit(&pool.threads, started, memory_order_relaxed);
#if HG_THREADS_PLACE
    atomic_store_explicit(&pool.may_yield, (size_t)CPU_COUNT(&pool.allowed) < started, memory_order_relaxed);
#else
    atomic_store_explicit(&pool.may_yield, 1, memory_order_relaxed);
#endif
    atomic_store_explicit(&pool.running, 1, memory_order_release);
}

/* Stops and joins the workers and frees the scratch. The caller holds `busy` (so no call is in
   flight, and a worker that wakes finds no task) and `state`. */
static void stop_pool(void)
{
    const size_t threads = atomic_load_explicit(&pool.threads, memory_order_relaxed);
    atomic_store_explicit(&pool.stop, 1, memory_order_seq_cst);
    /* a worker that checked `stop` under the lock before the store is asleep by now */
    pthread_mutex_lock(&pool.lock);
    pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.lock);
    for (size_t t = 1; t < threads; ++t)
        pthread_join(pool.workers[t], NULL);
    atomic_store_explicit(&pool.stop, 0, memory_order_relaxed);
    free_scratch();
    atomic_store_explicit(&pool.threads, 1, memory_order_relaxed);
    atomic_store_explicit(&pool.running, 0, memory_order_release);
}

size_t hg_threads_count(void)
{
    if (!atomic_load_explicit(&pool.running, memory_order_acquire)) {
        pthread_mutex_lock(&pool.state);
        if (!atomic_load_explicit(&pool.running, memory_order_relaxed))
            start_pool();
        pthread_mutex_unlock(&pool.state);
    }
    return atomic_load_explicit(&pool.threads, memory_order_relaxed);
}

/* Stops the pool with `busy` held. */
static void shutdown_held(void)
{
    pthread_mutex_lock(&pool.state);
    if (atomic_load_explicit(&pool.running, memory_order_relaxed))
        stop_pool();
    pthread_mutex_unlock(&pool.state);
}

void hg_threads_shutdown(void)
{
    pthread_mutex_lock(&pool.busy); /* waits for a call that owns the workers */
    shutdown_held();
    pthread_mutex_unlock(&pool.busy);
}

/* When the library is unloaded, or the process exits: workers must not outlive the code they run.
   Skipped while a call owns the pool (exit() from another thread mid-run, where the process ends
   anyway), so that exiting never waits on a call that may never end. */
#if defined(__GNUC__)
__attribute__((destructor)) static void shutdown_on_unload(void)
{
    if (pthread_mutex_trylock(&pool.busy) != 0)
        return;
    shutdown_held();
    pthread_mutex_unlock(&pool.busy);
}
#endif

/* The runs in flight on this thread (hg_threads_wait_begin acts only inside one). */
static _Thread_local unsigned thread_runs;

/* One more run (or a run's wait ended): the workers spin, and a sleeping one wakes. */
static void runs_add(void)
{
    atomic_fetch_add_explicit(&pool.runs, 1, memory_order_seq_cst);
    if (!atomic_load_explicit(&pool.running, memory_order_acquire) ||
        atomic_load_explicit(&pool.threads, memory_order_relaxed) == 1)
        return; /* no worker to wake (the run's first parallel call starts the pool) */
    /* a worker that checked `runs` under the lock before the increment is asleep by now */
    pthread_mutex_lock(&pool.lock);
    if (pool.sleepers)
        pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.lock);
}

static void runs_sub(void)
{
    atomic_fetch_sub_explicit(&pool.runs, 1, memory_order_release);
}

void hg_threads_run_begin(void)
{
    ++thread_runs;
    runs_add();
}

void hg_threads_run_end(void)
{
    --thread_runs;
    runs_sub();
}

void hg_threads_wait_begin(void)
{
    if (thread_runs != 0)
        runs_sub();
}

void hg_threads_wait_end(void)
{
    if (thread_runs != 0)
        runs_add();
}

static void run_serially(size_t n, hg_task_fn fn, void *ctx)
{
    for (size_t task = 0; task < n; ++task)
        fn(ctx, task, NULL);
}

#if HG_THREADS_PLACE
/* A worker waiting on the caller's own CPU cannot run a task until the caller is descheduled: the
   OS put it there when the caller woke it (wake-affine) and, with both runnable on one CPU and the
   others busy, does not move it (the trace showed the worker on the caller's CPU at 100 % of calls,
   and claiming none of their tasks, on a loaded 2-core machine). Moves such a worker to the
   process's other CPUs; where there are none it stays. Returns how many it moved. */
static unsigned place_workers(size_t threads)
{
    const int cpu = sched_getcpu();
    if (cpu < 0 || !CPU_ISSET(cpu, &pool.allowed) || CPU_COUNT(&pool.allowed) < 2)
        return 0;
    unsigned moved = 0;
    for (size_t t = 1; t < threads; ++t) {
        if (atomic_load_explicit(&seat[t].cpu, memory_order_relaxed) != cpu)
            continue;
        cpu_set_t others = pool.allowed;
        CPU_CLR(cpu, &others);
        if (pthread_setaffinity_np(pool.workers[t], sizeof others, &others) == 0) {
            atomic_store_explicit(&seat[t].cpu, -1, memory_order_relaxed);
            ++moved;
        }
    }
    return moved;
}
#endif

void hg_parallel_for(size_t n, hg_task_fn fn, void *ctx)
{
    if (n < 2 || n > TICKET_TASKS_MAX || hg_threads_count() == 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        run_serially(n, fn, ctx);
        return;
    }
    /* the pool may have stopped between the count and the lock (hg_threads_shutdown holds `busy`) */
    if (!atomic_load_explicit(&pool.running, memory_order_acquire) ||
        atomic_load_explicit(&pool.threads, memory_order_relaxed) == 1) {
        pthread_mutex_unlock(&pool.busy);
        run_serially(n, fn, ctx);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    atomic_store_explicit(&pool.finished, 0, memory_order_relaxed);
#ifdef HG_THREADS_TRACE
    hg_threads_trace_record *record = trace_current();
    if (record != NULL) {
        *record = (hg_threads_trace_record){.tasks = (uint32_t)n};
        record->cpu[0] = sched_getcpu();
        for (size_t t = 1; t < TRACE_THREADS && t < atomic_load_explicit(&pool.threads, memory_order_relaxed); ++t) {
            record->worker_state[t] = (uint32_t)atomic_load_explicit(&seat[t].state, memory_order_relaxed);
            record->cpu[t] = atomic_load_explicit(&seat[t].cpu, memory_order_relaxed);
        }
    }
#endif
#if HG_THREADS_PLACE
    const unsigned moved = place_workers(atomic_load_explicit(&pool.threads, memory_order_relaxed));
    TRACE(if (record != NULL) record->moved = moved);
    (void)moved;
#endif
    TRACE(trace_publish_ns = trace_now_ns());
    const uint32_t generation =
        TICKET_GENERATION(atomic_load_explicit(&pool.ticket, memory_order_relaxed)) + 1u;
    atomic_store_explicit(&pool.ticket, TICKET(generation, 0, n), memory_order_seq_cst);
    /* a worker that checked the ticket under the lock before the store is asleep by now */
    pthread_mutex_lock(&pool.lock);
    if (pool.sleepers)
        pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.lock);
    run_tasks(generation, 0, pool.scratch[0]);
    TRACE(if (record != NULL) record->caller_done_ns = trace_now_ns() - trace_publish_ns);
    /* every task is claimed; wait for those that run on workers */
    spin_wait wait = {now_us(), 0, 0};
    while (atomic_load_explicit(&pool.finished, memory_order_acquire) != n) {
        if (spin_step(&wait))
            continue;
        pthread_mutex_lock(&pool.lock);
        while (atomic_load_explicit(&pool.finished, memory_order_acquire) != n)
            pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
#ifdef HG_THREADS_TRACE
    if (record != NULL) {
        record->all_done_ns = trace_now_ns() - trace_publish_ns;
        atomic_fetch_add_explicit(&trace_count, 1, memory_order_release);
    }
#endif
    pthread_mutex_unlock(&pool.busy);
}

/* hg_parallel_phases: each run's progress, a cache line each (its owner writes it every phase; the
   others read it at the barrier). `claimed`: the phases of the run that some thread has taken (the
   next one to take), by compare-and-swap, so each phase of each run runs exactly once; `done`: the
   phases of the run finished, stored with release after the phase's writes. */
typedef struct {
    _Alignas(64) atomic_size_t claimed;
    atomic_size_t done;
} phase_run;

typedef struct {
    hg_phase_fn fn;
    void *ctx;
    size_t runs, phases;
    phase_run run[HG_THREADS_MAX];
} phase_job;

/* One step of a wait at a phase barrier: what the thread waited for is a phase being run (it has
   been claimed), microseconds long, unless the OS has descheduled its thread; so spin_step's
   spin and yield first, then short naps instead of a busy wait of milliseconds. */
static void phase_wait_step(spin_wait *wait)
{
    if (spin_step(wait))
        return;
    const struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
}

/* Takes phase `phase` of run `run` if no thread has, and runs it. Looks before it swaps: a failed
   compare-and-swap still takes the cache line from the run's owner, which writes it next. */
static int phase_take(phase_job *job, size_t run, size_t phase)
{
    size_t expected = phase;
    if (atomic_load_explicit(&job->run[run].claimed, memory_order_relaxed) != phase ||
        !atomic_compare_exchange_strong_explicit(&job->run[run].claimed, &expected, phase + 1, memory_order_acq_rel,
                                                 memory_order_acquire))
        return 0;
    job->fn(job->ctx, run, phase);
    atomic_store_explicit(&job->run[run].done, phase + 1, memory_order_release);
    return 1;
}

/* Whether every run has finished `phases` phases. */
static int phases_done(phase_job *job, size_t phases)
{
    for (size_t r = 0; r < job->runs; ++r)
        if (atomic_load_explicit(&job->run[r].done, memory_order_acquire) < phases)
            return 0;
    return 1;
}

/* Run 0's task (the caller's, which claims first): each phase, its own run, then every run no
   thread has claimed, then a wait for the runs being run elsewhere. It waits only on claimed
   phases, and a claimed phase never waits (it was claimed past its barrier), so it always ends. */
static void phase_lead(phase_job *job)
{
    for (size_t p = 0; p < job->phases; ++p) {
        for (size_t r = 0; r < job->runs; ++r)
            phase_take(job, r, p);
        spin_wait wait = {now_us(), 0, 0};
        while (!phases_done(job, p + 1))
            phase_wait_step(&wait);
    }
}

/* Run `run`'s task: each phase once every run has finished the phase before, unless run 0's
   thread has taken it meanwhile (then on to the next one); ends once every phase is claimed. */
static void phase_follow(phase_job *job, size_t run)
{
    for (;;) {
        const size_t p = atomic_load_explicit(&job->run[run].claimed, memory_order_acquire);
        if (p >= job->phases)
            return;
        spin_wait wait = {now_us(), 0, 0};
        while (!phases_done(job, p) && atomic_load_explicit(&job->run[run].claimed, memory_order_acquire) == p)
            phase_wait_step(&wait);
        phase_take(job, run, p);
    }
}

static void phase_task(void *ctx, size_t task, void *scratch)
{
    (void)scratch;
    phase_job *job = (phase_job *)ctx;
    if (task == 0)
        phase_lead(job);
    else
        phase_follow(job, task);
}

void hg_parallel_phases(size_t runs, size_t phases, hg_phase_fn fn, void *ctx)
{
    if (runs < 2 || runs > HG_THREADS_MAX || hg_threads_count() == 1) {
        for (size_t phase = 0; phase < phases; ++phase)
            for (size_t run = 0; run < runs; ++run)
                fn(ctx, run, phase);
        return;
    }
    phase_job job = {.fn = fn, .ctx = ctx, .runs = runs, .phases = phases};
    for (size_t r = 0; r < runs; ++r) {
        atomic_init(&job.run[r].claimed, 0);
        atomic_init(&job.run[r].done, 0);
    }
    /* task 0 leads; where the pool is busy or the tasks run on the caller one after another, the
       lead runs every phase and the others find nothing left */
    hg_parallel_for(runs, phase_task, &job);
}

#endif
