/* hetgen simulated accelerator: see hg_sim.c and docs/simulator.md. */
#ifndef HG_SIM_H
#define HG_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "hg_device.h"
#include "hg_runtime.h"

/* What one command asks of the device: the shape of its work, not its time. */
typedef struct {
    uint32_t engine;
    uint32_t after; /* this command waits for the one `after` commands back to finish (0: none) */
    uint64_t batch, m, n, k;
    uint64_t bytes; /* local-memory bytes the command reads and writes; DMA: bytes moved */
    /* (k of a DMA: the channels of the feature-map block it moves, 0: not a feature map) */
    uint64_t src_stride, dst_stride; /* a strided DMA: m segments of n bytes, these bytes apart */
    uint64_t taps; /* a dense convolution's kernel taps: k is its input channels x taps (0: not one) */
    /* a DMA of a tensor the controller writes or reads, kept in DRAM in its linear (NHWC) layout:
     * HG_SIM_LINEAR_READ or _WRITE; 0: another DMA */
    uint32_t linear;
    uint32_t element_bytes; /* a linear DMA's tensor's element size: an access is its channels (k) x it */
} hg_sim_work;

#define HG_SIM_LINEAR_READ 1u
#define HG_SIM_LINEAR_WRITE 2u

typedef struct {
    const hg_graph_node *nodes;
    size_t num_nodes;
    const hg_buffer_ref *args;
    size_t num_args;
    const hg_sim_work *work; /* one per node */
    uint64_t first_counter;  /* node n's cycles add up in counter first_counter + n */
} hg_sim_program;

/* The device's own micro-architecture (docs/simulator.md), from its kind's attributes. */
typedef struct {
    uint32_t mac_rows, mac_cols;  /* the MAC array: mac_rows x mac_cols multipliers */
    uint32_t vector_lanes;        /* elements the vector unit processes per cycle */
    uint32_t command_cycles;      /* decoding and starting one kernel command */
    uint32_t dma_setup_cycles;    /* before a DMA's first byte moves */
    uint32_t invoke_cycles;       /* each invocation: the controller's driver call, doorbell and completion interrupt */
    uint32_t int8_mac_cols;       /* the MAC array's columns on int8 operands (several int8 MACs per multiplier) */
    uint32_t dma_hidden_cycles;   /* setup a DMA queued behind another hides (reads kept in flight) */
    /* A DMA from the weights region where the weights sit in a memory of their own (Vela's
     * Shared_Sram, or Dedicated_Sram with the feature maps in its cache): its setup, the setup it
     * hides when queued, and its rate (0 bytes a cycle: the weights beside the arena, at the DMA's). */
    uint32_t weight_dma_setup_cycles;
    uint32_t weight_dma_hidden_cycles;
    double sram_bytes_per_cycle;  /* local memory bandwidth the engines see */
    double dma_bytes_per_cycle;
    double weight_dma_bytes_per_cycle;
    double output_cycles_per_element; /* the MAC array's output stage, per output element (0: not modelled) */
    hg_link link;                 /* from the controller, when the device sits behind one */
    uint32_t mac_depth_block;     /* input channels the MAC array takes a step per kernel tap (0: not modelled) */
    uint32_t dma_brick_channels;  /* a feature-map DMA fetches a pixel's channels in bricks of these (0: not modelled) */
    /* The controller's tensors in DRAM, linear: each access of a pixel's channels (rounded up to
     * mac_depth_block; a write's at most linear_write_bytes) takes a whole burst of these bytes, at
     * the weights' memory's (the DRAM's) rate and latency (0: not modelled). */
    uint32_t linear_burst_bytes;
    uint32_t linear_write_bytes;
    uint32_t int8_mac_depth; /* int8 products a multiplier sums along the depth (a dot-product unit; 0 or 1: one) */
} hg_sim_params;

/* What the device is: constant, shared by every run (hg_device.config). */
typedef struct {
    uint64_t memory_offset;     /* where local memory starts in the device's state block */
    uint64_t memory_size;       /* bytes planned */
    uint64_t capacity;          /* bytes the device has */
    const unsigned char *weights;
    uint64_t weights_size;
    const hg_sim_program *programs;
    size_t num_programs;
    uint64_t counters_offset;   /* where the per-command cycle counters start in the state block */
    uint64_t num_counters;
    hg_sim_params params;
    uint64_t sram_size;         /* kernels compute only on local memory below this offset (its SRAM) */
    uint64_t emulation_scratch; /* then the emulating C kernels' workspace (im2col, packing): not SRAM */
} hg_sim_config;

/* What one run changes: the head of the device's state block in the caller's workspace
 * (hg_device.state), then num_counters uint64_t cycle counters at config->counters_offset, then
 * local memory at config->memory_offset. Fixed-width fields, so its size is the same on every ABI. */
typedef struct {
    uint32_t queue[HG_SIM_QUEUE_DEPTH];
    uint32_t queued;
    uint32_t reserved;
    hg_device_stats stats;
} hg_sim_state;

extern const hg_device_ops hg_sim_ops;

/* The cycles one command takes on a device with these parameters. */
uint64_t hg_sim_command_cycles(const hg_sim_params *params, const hg_sim_work *work);

/* The cycles a DMA of `bytes` takes (weight loads, copies to and from the controller). */
uint64_t hg_sim_dma_cycles(const hg_sim_params *params, uint64_t bytes);

/* Empty the queue and zero the counters: the start of a run (`config`: NULL zeroes only the head). */
void hg_sim_reset(void *state, const hg_sim_config *config);

#endif /* HG_SIM_H */
