/* hetgen frames pipelined across a root's devices (hg_frames.h).
 *
 * A batch's fence is its sequence number on its device's queue: the worker runs batches in submission
 * order, so batch `fence` is done once `completed >= fence`. Overlap is counted from the root's side
 * of each batch: the root's blocking waits bump `blocks` on entry and on exit (odd: blocked), and a
 * batch during which `blocks` was not odd and unchanged throughout ran while the root went on with its
 * own work (its kernels, copies and submissions of other frames). */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <time.h>

#include "hg_frames.h"

static hg_frames_slot *hg_frames_slot_of(const struct hg_device *device)
{
    return (hg_frames_slot *)device->state;
}

static int hg_frames_alloc(struct hg_device *device, uint64_t bytes)
{
    struct hg_device *bound = &hg_frames_slot_of(device)->device;
    return bound->ops->alloc(bound, bytes);
}

static int hg_frames_copy_in(struct hg_device *device, uint64_t dst_offset, const void *src, uint64_t bytes)
{
    struct hg_device *bound = &hg_frames_slot_of(device)->device;
    return bound->ops->copy_in(bound, dst_offset, src, bytes);
}

static int hg_frames_copy_out(struct hg_device *device, void *dst, uint64_t src_offset, uint64_t bytes)
{
    struct hg_device *bound = &hg_frames_slot_of(device)->device;
    return bound->ops->copy_out(bound, dst, src_offset, bytes);
}

static int hg_frames_invoke(struct hg_device *device, uint32_t program)
{
    struct hg_device *bound = &hg_frames_slot_of(device)->device;
    return bound->ops->invoke(bound, program);
}

/* The batch: the bound device's own wait runs the invocations queued in its block. */
static int hg_frames_run_batch(hg_frames_slot *slot)
{
    return slot->device.ops->wait(&slot->device);
}

#if HG_THREADS_POOL

/* The calling thread's CPU time: where the pipeline's time goes, whatever else the machine runs
 * (on a host with a core free for each thread, a frame takes the busiest thread's share). */
static uint64_t hg_frames_thread_cpu_ns(void)
{
    struct timespec now;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0) {
        return 0;
    }
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static void *hg_frames_worker(void *arg)
{
    hg_frames_queue *queue = (hg_frames_queue *)arg;
    hg_frames *frames = queue->frames;
    pthread_mutex_lock(&queue->lock);
    for (;;) {
        while (queue->completed == queue->submitted && !queue->stop) {
            pthread_cond_wait(&queue->wake, &queue->lock);
        }
        if (queue->completed == queue->submitted) {
            break; /* stopped, with nothing left to run */
        }
        hg_frames_slot *slot = &queue->slots[queue->ring[queue->completed % queue->depth]];
        pthread_mutex_unlock(&queue->lock);
        const uint_fast64_t before = atomic_load(&frames->blocks);
        const int status = hg_frames_run_batch(slot);
        const uint_fast64_t after = atomic_load(&frames->blocks);
        atomic_fetch_add(&frames->jobs, 1);
        if (!(before % 2 == 1 && after == before)) {
            atomic_fetch_add(&frames->overlapped_jobs, 1);
        }
        pthread_mutex_lock(&queue->lock);
        slot->status = status;
        queue->completed += 1;
        pthread_cond_broadcast(&queue->done);
    }
    queue->cpu_ns = hg_frames_thread_cpu_ns(); /* read by the root after the join */
    pthread_mutex_unlock(&queue->lock);
    return NULL;
}

/* Wait until the slot's last batch is done; its status. */
static int hg_frames_fence(hg_frames_slot *slot)
{
    hg_frames_queue *queue = slot->queue;
    if (!queue->started) {
        return slot->status; /* its batches ran on the root */
    }
    hg_frames *frames = queue->frames;
    pthread_mutex_lock(&queue->lock);
    if (queue->completed < slot->fence) {
        frames->root_waits += 1;
        atomic_fetch_add(&frames->blocks, 1);
        while (queue->completed < slot->fence) {
            pthread_cond_wait(&queue->done, &queue->lock);
        }
        atomic_fetch_add(&frames->blocks, 1);
    }
    const int status = slot->status;
    pthread_mutex_unlock(&queue->lock);
    return status;
}

#else

static int hg_frames_fence(hg_frames_slot *slot)
{
    return slot->status;
}

#endif

static int hg_frames_wait(struct hg_device *device)
{
    hg_frames_slot *slot = hg_frames_slot_of(device);
    const int status = hg_frames_fence(slot);
    slot->status = HG_OK; /* reported once */
    if (status != HG_OK) {
        return status;
    }
    return hg_frames_run_batch(slot); /* what the frame queued since its batch, if anything */
}

static const hg_device_ops hg_frames_ops = { hg_frames_alloc, hg_frames_copy_in, hg_frames_copy_out, hg_frames_invoke,
                                             hg_frames_wait };

void hg_frames_start(hg_frames *frames, hg_frames_queue *queues, size_t count, hg_frames_slot *slots, uint32_t *rings,
                     uint32_t depth)
{
    memset(frames, 0, sizeof *frames);
    frames->queues = queues;
    frames->count = count;
#if HG_THREADS_POOL
    atomic_init(&frames->blocks, 0);
    atomic_init(&frames->jobs, 0);
    atomic_init(&frames->overlapped_jobs, 0);
    frames->root_cpu_ns = hg_frames_thread_cpu_ns();
#endif
    for (size_t d = 0; d < count; ++d) {
        hg_frames_queue *queue = &queues[d];
        memset(queue, 0, sizeof *queue);
        queue->slots = slots + d * depth;
        queue->depth = depth;
        queue->frames = frames;
        memset(queue->slots, 0, depth * sizeof *queue->slots);
        for (uint32_t s = 0; s < depth; ++s) {
            queue->slots[s].queue = queue;
            queue->slots[s].status = HG_OK;
        }
#if HG_THREADS_POOL
        queue->ring = rings + d * depth;
        pthread_mutex_init(&queue->lock, NULL);
        pthread_cond_init(&queue->wake, NULL);
        pthread_cond_init(&queue->done, NULL);
        queue->started = pthread_create(&queue->thread, NULL, hg_frames_worker, queue) == 0;
        frames->workers += queue->started ? 1u : 0u;
#else
        (void)rings;
#endif
    }
}

struct hg_device hg_frames_device(hg_frames *frames, size_t device, uint32_t slot, struct hg_device bound)
{
    hg_frames_slot *entry = &frames->queues[device].slots[slot];
    entry->device = bound;
    struct hg_device wrapped = { &hg_frames_ops, NULL, entry };
    return wrapped;
}

int hg_frames_submit(hg_frames *frames, size_t device, uint32_t slot)
{
    if (device >= frames->count || slot >= frames->queues[device].depth) {
        return HG_ERR_ARGUMENT;
    }
    hg_frames_queue *queue = &frames->queues[device];
    hg_frames_slot *entry = &queue->slots[slot];
    /* One batch per slot in flight: the frame's next wait on this device comes before its next batch. */
    int status = hg_frames_fence(entry);
    if (status != HG_OK) {
        return status;
    }
#if HG_THREADS_POOL
    if (queue->started) {
        pthread_mutex_lock(&queue->lock);
        queue->ring[queue->submitted % queue->depth] = slot;
        queue->submitted += 1;
        entry->fence = queue->submitted;
        pthread_cond_signal(&queue->wake);
        pthread_mutex_unlock(&queue->lock);
        return HG_OK;
    }
#endif
    entry->status = hg_frames_run_batch(entry);
    return HG_OK;
}

int hg_frames_stop(hg_frames *frames, hg_frames_stats *stats)
{
    int status = HG_OK;
    uint64_t busiest = 0;
    for (size_t d = 0; d < frames->count; ++d) {
        hg_frames_queue *queue = &frames->queues[d];
        for (uint32_t s = 0; s < queue->depth; ++s) {
            const int result = hg_frames_fence(&queue->slots[s]);
            queue->slots[s].status = HG_OK;
            status = status != HG_OK ? status : result;
        }
#if HG_THREADS_POOL
        if (queue->started) {
            pthread_mutex_lock(&queue->lock);
            queue->stop = 1;
            pthread_cond_signal(&queue->wake);
            pthread_mutex_unlock(&queue->lock);
            pthread_join(queue->thread, NULL);
            busiest = queue->cpu_ns > busiest ? queue->cpu_ns : busiest;
        }
        pthread_cond_destroy(&queue->done);
        pthread_cond_destroy(&queue->wake);
        pthread_mutex_destroy(&queue->lock);
#endif
    }
    if (stats != NULL) {
        memset(stats, 0, sizeof *stats);
        stats->workers = frames->workers;
        stats->root_waits = frames->root_waits;
#if HG_THREADS_POOL
        stats->jobs = atomic_load(&frames->jobs);
        stats->overlapped_jobs = atomic_load(&frames->overlapped_jobs);
        stats->root_cpu_ns = hg_frames_thread_cpu_ns() - frames->root_cpu_ns;
        stats->busiest_worker_cpu_ns = busiest;
#else
        (void)busiest;
#endif
    }
    return status;
}
