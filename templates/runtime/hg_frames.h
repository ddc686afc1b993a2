/* hetgen frames pipelined across a root's devices: a worker thread per device (hetgen/spec/frames.py,
 * the root's `_run_frames` in templates/model/model.c.j2).
 *
 * The root's program is cut into stages; at step t the root runs stage 0 of frame t, then stage 1 of
 * frame t-1, and so on, each frame in its own workspace block. Where a stage leaves a device with
 * queued invocations that the frame waits for next, the root submits them to that device's worker
 * (one batch: the device's own `wait`, run on the worker) behind a fence, and goes on with the next
 * stage of another frame; the frame's next wait on the device waits for that fence only. A device's
 * worker runs its batches one after another in the order they were submitted, as a device's command
 * queue does, and each frame works in its own block, so every frame computes exactly what a run of it
 * alone computes.
 *
 * Where this program has no threads (HG_THREADS_POOL 0: bare metal, hg_threads_config.h), a batch
 * runs at once on the root, and `_run_frames` is a frame-by-frame run in the pipelined order. */
#ifndef HG_FRAMES_H
#define HG_FRAMES_H

#include "hg_device.h"
#include "hg_runtime.h"
#include "hg_threads.h"

#if HG_THREADS_POOL
#include <pthread.h>
#include <stdatomic.h>
#endif

struct hg_frames_queue;

/* One frame slot of one device: the device as bound in that frame's block, and its batch in flight. */
typedef struct {
    struct hg_frames_queue *queue;
    struct hg_device device;
    uint64_t fence; /* the sequence number of its last batch submitted (0: none yet) */
    int status;     /* that batch's result, valid once the worker has completed it */
} hg_frames_slot;

/* One device's worker and its queue of batches (at most one per frame slot in flight). */
typedef struct hg_frames_queue {
    hg_frames_slot *slots; /* one per frame in flight */
    uint32_t depth;
    struct hg_frames *frames;
#if HG_THREADS_POOL
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a batch was submitted, or the worker must stop */
    pthread_cond_t done; /* a batch was completed */
    uint32_t *ring; /* `depth` slot indices: the batches in flight, in submission order */
    uint64_t submitted, completed;
    int stop;
    uint64_t cpu_ns; /* the worker's CPU time, as it returned */
#endif
} hg_frames_queue;

/* A root's devices while `_run_frames` runs. */
typedef struct hg_frames {
    hg_frames_queue *queues;
    size_t count;
#if HG_THREADS_POOL
    atomic_uint_fast64_t blocks; /* the root's blocking waits, entered and left: odd while it is blocked */
    atomic_uint_fast64_t jobs, overlapped_jobs;
    uint64_t root_cpu_ns; /* the root thread's CPU time when the workers started */
#endif
    uint64_t workers, root_waits;
} hg_frames;

/* Bind `count` queues over `slots` and `rings` (count * depth of each, device-major) and start a
 * worker for each (where threads exist; a queue whose thread could not start runs its batches on the
 * root). */
void hg_frames_start(hg_frames *frames, hg_frames_queue *queues, size_t count, hg_frames_slot *slots, uint32_t *rings,
                     uint32_t depth);

/* The root's device `device` for frame slot `slot`, bound as `bound` (its block's device): what the
 * VM drives. Copies and invocations go to the bound device at once; a wait first waits for the slot's
 * batch in flight, then runs whatever the frame queued since on the root. */
struct hg_device hg_frames_device(hg_frames *frames, size_t device, uint32_t slot, struct hg_device bound);

/* Hand the invocations queued on device `device` for frame slot `slot` to its worker, behind a fence. */
int hg_frames_submit(hg_frames *frames, size_t device, uint32_t slot);

/* Wait for every batch in flight, stop and join the workers, and fill `stats` (where not NULL).
 * Returns the first failed batch's status not yet reported by a wait, else HG_OK. */
int hg_frames_stop(hg_frames *frames, hg_frames_stats *stats);

#endif /* HG_FRAMES_H */
