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
    uint64_t load_cycles;       /* of those nodes, the weight loads into local memory */
} hg_sim_program;

typedef struct {
    unsigned char *memory;      /* local memory (SRAM) */
    uint64_t memory_size;       /* bytes planned */
    uint64_t capacity;          /* bytes the device has */
    const unsigned char *weights;
    const hg_sim_program *programs;
    size_t num_programs;
    double dma_bytes_per_cycle;
    uint32_t queue[HG_SIM_QUEUE_DEPTH];
    size_t queued;
    uint64_t compute_cycles;    /* kernels and weight loads */
    uint64_t load_cycles;       /* weight loads alone */
    uint64_t dma_cycles;        /* copies to and from the controller */
    uint64_t invocations;
} hg_sim;

extern const hg_device_ops hg_sim_ops;

#endif /* HG_SIM_H */
