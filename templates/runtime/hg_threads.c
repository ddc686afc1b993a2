/* hetgen's worker pool (see hg_threads.h). Workers sleep on a condition variable between calls;
   a call publishes its job under the lock and bumps the generation; the caller and the workers
   claim tasks one at a time, and the call returns when every task is done. No allocation after the
   pool starts. */
#define _POSIX_C_SOURCE 200809L
#include "hg_threads.h"

#if HG_THREADS_POOL
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static struct {
    pthread_once_t once;
    size_t threads;
    void *scratch[HG_THREADS_MAX];
    pthread_mutex_t busy; /* held by the one caller that owns the workers */
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t start, done;
    unsigned long generation;
    hg_task_fn fn;
    void *ctx;
    size_t n, next, finished; /* tasks, the next unclaimed one, those done */
} pool = {
    .once = PTHREAD_ONCE_INIT,
    .threads = 1,
    .busy = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .start = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};

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

/* Claims and runs tasks until none is left; called with the lock held, returns with it held. A
   worker that wakes late finds every task claimed (the caller ran them) and costs the call nothing:
   the caller waits only for tasks that were claimed, never for a worker to show up. */
static void run_tasks(size_t thread)
{
    while (pool.next < pool.n) {
        const size_t task = pool.next++;
        const hg_task_fn fn = pool.fn;
        void *ctx = pool.ctx;
        pthread_mutex_unlock(&pool.lock);
        fn(ctx, task, pool.scratch[thread]);
        pthread_mutex_lock(&pool.lock);
        if (++pool.finished == pool.n)
            pthread_cond_signal(&pool.done);
    }
}

static void *worker_main(void *arg)
{
    const size_t thread = (size_t)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.start, &pool.lock);
        seen = pool.generation;
        run_tasks(thread);
    }
    return NULL;
}

/* Scratch for every thread, then the workers; on any failure the pool stays at one thread. */
static void start_pool(void)
{
    const size_t wanted = requested_threads();
    for (size_t t = 0; t < wanted; ++t) {
        pool.scratch[t] = aligned_alloc(64, (HG_THREADS_SCRATCH_BYTES + 63u) & ~(size_t)63u);
        if (pool.scratch[t] == NULL)
            return;
    }
    size_t started = 1;
    for (; started < wanted; ++started) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, worker_main, (void *)started) != 0)
            break;
        pthread_detach(thread);
    }
    /* if a worker could not start, the pool runs with the ones that did */
    pool.threads = started;
}

size_t hg_threads_count(void)
{
    pthread_once(&pool.once, start_pool);
    return pool.threads;
}

void hg_parallel_for(size_t n, hg_task_fn fn, void *ctx)
{
    const size_t threads = hg_threads_count();
    if (threads == 1 || n < 2 || pthread_mutex_trylock(&pool.busy) != 0) {
        for (size_t task = 0; task < n; ++task)
            fn(ctx, task, NULL);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.next = 0;
    pool.finished = 0;
    ++pool.generation;
    pthread_cond_broadcast(&pool.start);
    run_tasks(0);
    while (pool.finished != pool.n)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.busy);
}

#endif
