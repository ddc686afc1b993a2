/* hetgen simulated accelerator: see hg_sim.c. */
#ifndef HG_SIM_H
#define HG_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "hg_device.h"
#include "hg_runtime.h"

#define HG_SIM_QUEUE_DEPTH 16

typedef struct {
    const hg_graph_node *nodes;
    size_t num_nodes;
    const hg_buffer_ref *args;
    size_t num_args;
    uint64_t load_cycles;       /* of those nodes, the weight loads into local memory */
} hg_sim_program;

/* What the device is: constant, shared by every run (hg_device.config). */
typedef struct {
    uint64_t memory_offset;     /* where local memory starts in the device's state block */
    uint64_t memory_size;       /* bytes planned */
    uint64_t capacity;          /* bytes the device has */
    const unsigned char *weights;
    uint64_t weights_size;
    const hg_sim_program *programs;
    size_t num_programs;
    double dma_bytes_per_cycle;
} hg_sim_config;

/* What one run changes: the head of the device's state block in the caller's workspace
 * (hg_device.state), followed by local memory at config->memory_offset. Fixed-width fields, so
 * its size is the same on every ABI. */
typedef struct {
    uint32_t queue[HG_SIM_QUEUE_DEPTH];
    uint32_t queued;
    uint32_t reserved;
    hg_device_stats stats;
} hg_sim_state;

extern const hg_device_ops hg_sim_ops;

/* Empty the queue and zero the counters: the start of a run. */
void hg_sim_reset(void *state);

#endif /* HG_SIM_H */
