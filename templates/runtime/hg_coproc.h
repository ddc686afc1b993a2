/* hetgen co-processor device: a controller below the root, driven by its parent through the device
 * interface (hg_device.h) over the in-process transport. Its program's entries are sub-programs the
 * parent invokes; `wait` runs the queued ones, each with this co-processor's own devices bound in its
 * state block. Each program's model.c lays out an hg_coproc_config (its arena, weights, entry table,
 * link and its devices' binding); this file is the one driver all of them share. */
#ifndef HG_COPROC_H
#define HG_COPROC_H

#include "hg_device.h"
#include "hg_runtime.h"

/* The head of the co-processor's state block; its arena and its own devices' blocks follow. */
typedef struct {
    uint32_t pending[HG_COPROC_QUEUE_DEPTH];
    uint32_t num_pending;
    uint32_t reserved;
    hg_device_stats stats; /* the copies over the link from this co-processor's controller */
} hg_coproc_state;

/* One sub-program: a generated entry of the co-processor's program. */
typedef int (*hg_coproc_entry)(const hg_memory *memory, struct hg_device *const *devices);

typedef struct {
    uint64_t arena_offset; /* in the state block */
    uint64_t arena_size;
    const unsigned char *weights;
    uint64_t weights_size;
    const hg_coproc_entry *entries;
    uint32_t num_entries;
    uint32_t device_slots; /* 1 to HG_MAX_DEVICES: how many entries bind_devices fills */
    hg_link link;          /* from this co-processor's controller (0: none) */
    /* Check the co-processor's own devices' memory (init only; no state is touched). */
    int (*devices_init)(void);
    /* Its own devices, each working in its part of `block`. */
    void (*bind_devices)(unsigned char *block, struct hg_device *devices, struct hg_device **pointers);
    /* Empty its own devices' queues in `block`. */
    void (*reset_devices)(unsigned char *block);
} hg_coproc_config;

extern const hg_device_ops hg_coproc_ops;

/* Empty the queue and zero the link counters of the state block, and those of its devices. */
void hg_coproc_reset(void *state, const hg_coproc_config *config);

/* The copies counted over the link from the controller. */
void hg_coproc_stats(const void *state, hg_device_stats *stats);

#endif /* HG_COPROC_H */
