/* Unit checks of templates/runtime/hg_frames.c, built by tests/test_throughput_build.py twice: with
 * threads (-DHG_THREADS_POOL=1, under ThreadSanitizer) and without (-DHG_THREADS_POOL=0, under
 * AddressSanitizer and UBSan). A fake device's batch for frame f does not finish before the root has
 * done the work of the step that submitted it (it waits for the root's progress counter to pass f,
 * which the root sets after that step's waits): with threads the pipeline below can only end if each
 * batch ran on a worker while the root went on, so the check of overlap is a rendezvous, not a timing. Prints "ok" (or the first failure, exit 1). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "hg_frames.h"

#include "unit_check.h"

#define FRAMES 9u
#define DEPTH 2u
#define DEVICES 2u
_Static_assert(FRAMES <= 10 && DEVICES <= 2, "started[][] holds every batch");
#define FAILING_FRAME 5u

static atomic_uint root_progress; /* the steps whose own work the root has done */
static atomic_int started[10][2]; /* a batch of frame f for device d has begun: FRAMES x DEVICES */
static pthread_t root_thread;

typedef struct {
    uint32_t queued;   /* invocations since the last batch */
    uint64_t frame;    /* the frame this block holds */
    uint32_t device;
    uint64_t result;   /* what its batches computed */
    int on_worker;     /* its last batch ran on another thread than the root */
    int fail;          /* its next batch fails */
} fake_state;

static int fake_alloc(struct hg_device *device, uint64_t bytes)
{
    (void)device;
    return bytes <= 64 ? HG_OK : HG_ERR_CAPACITY;
}

static int fake_copy_in(struct hg_device *device, uint64_t offset, const void *src, uint64_t bytes)
{
    fake_state *state = (fake_state *)device->state;
    (void)offset;
    (void)bytes;
    state->frame = *(const uint64_t *)src;
    return HG_OK;
}

static int fake_copy_out(struct hg_device *device, void *dst, uint64_t offset, uint64_t bytes)
{
    (void)offset;
    (void)bytes;
    *(uint64_t *)dst = ((fake_state *)device->state)->result;
    return HG_OK;
}

static int fake_invoke(struct hg_device *device, uint32_t program)
{
    fake_state *state = (fake_state *)device->state;
    state->queued += 1;
    state->result = state->result * 31u + program;
    return HG_OK;
}

/* The batch: with threads, it waits (at most 10 s) until the root has gone on past this frame. */
static int fake_wait(struct hg_device *device)
{
    fake_state *state = (fake_state *)device->state;
    if (state->queued == 0) {
        return HG_OK;
    }
    state->on_worker = !pthread_equal(pthread_self(), root_thread);
    if (HG_THREADS_POOL) {
        atomic_store(&started[state->frame][state->device], 1);
        const struct timespec pause = { 0, 1000000 };
        for (int tries = 0; atomic_load(&root_progress) <= state->frame && tries < 10000; ++tries) {
            nanosleep(&pause, NULL);
        }
        if (atomic_load(&root_progress) <= state->frame) {
            return HG_ERR_DEVICE; /* the root never went on: no overlap */
        }
    }
    state->result = state->result * 7u + state->frame;
    state->queued = 0;
    if (state->fail) {
        state->fail = 0;
        return HG_ERR_DEVICE;
    }
    return HG_OK;
}

static const hg_device_ops fake_ops = { fake_alloc, fake_copy_in, fake_copy_out, fake_invoke, fake_wait };

/* What frame f's result is when its batch runs once, wherever it runs. */
static uint64_t expected(uint64_t frame, uint32_t device)
{
    return ((uint64_t)(device + 1u)) * 7u + frame;
}

int main(void)
{
    root_thread = pthread_self();
    fake_state states[DEPTH][DEVICES] = { { { 0 } } };
    hg_frames pipeline;
    hg_frames_queue queues[DEVICES];
    hg_frames_slot slots[DEVICES * DEPTH];
    uint32_t rings[DEVICES * DEPTH];
    struct hg_device wrapped[DEPTH][DEVICES];
    hg_frames_start(&pipeline, queues, DEVICES, slots, rings, DEPTH);
    for (uint32_t slot = 0; slot < DEPTH; ++slot) {
        for (uint32_t d = 0; d < DEVICES; ++d) {
            const struct hg_device bound = { &fake_ops, NULL, &states[slot][d] };
            wrapped[slot][d] = hg_frames_device(&pipeline, d, slot, bound);
        }
    }
    uint64_t results[FRAMES][DEVICES];
    int failed_wait = HG_OK;
    /* The pipelined order of a two-stage program: at step t, stage 0 of frame t (copy in, invoke,
     * submit), then stage 1 of frame t-1 (wait, copy out). */
    for (uint64_t step = 0; step <= FRAMES; ++step) {
        if (step < FRAMES) {
            const uint32_t slot = (uint32_t)(step % DEPTH);
            for (uint32_t d = 0; d < DEVICES; ++d) {
                struct hg_device *device = &wrapped[slot][d];
                states[slot][d].result = 0;
                states[slot][d].device = d;
                states[slot][d].fail = step == FAILING_FRAME && d == 1;
                CHECK(device->ops->alloc(device, 64) == HG_OK);
                CHECK(device->ops->copy_in(device, 0, &step, sizeof step) == HG_OK);
                CHECK(device->ops->invoke(device, d + 1u) == HG_OK);
                CHECK(hg_frames_submit(&pipeline, d, slot) == HG_OK);
            }
        }
        if (step >= 1) {
            const uint64_t frame = step - 1;
            const uint32_t slot = (uint32_t)(frame % DEPTH);
            for (uint32_t d = 0; d < DEVICES; ++d) {
                struct hg_device *device = &wrapped[slot][d];
                const int status = device->ops->wait(device);
                if (frame == FAILING_FRAME && d == 1) {
                    failed_wait = status;
                } else {
                    CHECK(status == HG_OK);
                }
                CHECK(device->ops->copy_out(device, &results[frame][d], 0, sizeof results[frame][d]) == HG_OK);
                CHECK(states[slot][d].on_worker == HG_THREADS_POOL);
            }
        }
        /* The root's own work of this step, after its waits: it sees frame `step`'s batches begin, and
         * they end only after it, so each of them ran while the root went on. */
        for (uint32_t d = 0; HG_THREADS_POOL && step < FRAMES && d < DEVICES; ++d) {
            const struct timespec pause = { 0, 1000000 };
            for (int tries = 0; !atomic_load(&started[step][d]) && tries < 10000; ++tries) {
                nanosleep(&pause, NULL);
            }
            CHECK(atomic_load(&started[step][d]));
        }
        atomic_store(&root_progress, (unsigned)step + 1u);
    }
    hg_frames_stats stats;
    CHECK(hg_frames_stop(&pipeline, &stats) == HG_OK); /* the failure was reported by its wait */
    CHECK(failed_wait == HG_ERR_DEVICE);
    for (uint64_t frame = 0; frame < FRAMES; ++frame) {
        for (uint32_t d = 0; d < DEVICES; ++d) {
            CHECK(results[frame][d] == expected(frame, d));
        }
    }
    CHECK(stats.workers == (HG_THREADS_POOL ? DEVICES : 0u));
    CHECK(stats.jobs == (HG_THREADS_POOL ? FRAMES * DEVICES : 0u));
    /* each batch finished only after the root went on, so the root was not blocked throughout */
    CHECK(stats.overlapped_jobs == stats.jobs);
    CHECK((stats.root_cpu_ns > 0 && stats.busiest_worker_cpu_ns > 0) == HG_THREADS_POOL);
    /* a batch left unwaited is waited for by stop, and its failure reported there */
    hg_frames_start(&pipeline, queues, DEVICES, slots, rings, DEPTH);
    fake_state last = { 0 };
    last.frame = 0;
    last.fail = 1;
    const struct hg_device bound = { &fake_ops, NULL, &last };
    struct hg_device device = hg_frames_device(&pipeline, 0, 0, bound);
    CHECK(device.ops->invoke(&device, 1) == HG_OK);
    CHECK(hg_frames_submit(&pipeline, 0, 0) == HG_OK);
    atomic_store(&root_progress, 1000u);
    CHECK(hg_frames_stop(&pipeline, NULL) == HG_ERR_DEVICE);
    puts("ok");
    return 0;
}
