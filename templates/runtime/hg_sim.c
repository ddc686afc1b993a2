/* hetgen simulated accelerator: a device model with its own local memory, a command queue, DMA
 * and a cycle counter driven by the kind's figures. The arithmetic runs on the host CPU (the
 * kernels compiled for the device); time is what the counter says. */
#include <string.h>

#include "hg_sim.h"

static hg_sim *hg_sim_of(struct hg_device *device)
{
    return (hg_sim *)device->state;
}

static uint64_t hg_sim_dma_cycles(const hg_sim *sim, uint64_t bytes)
{
    return (uint64_t)((double)bytes / sim->dma_bytes_per_cycle + 0.999999);
}

static int hg_sim_alloc(struct hg_device *device, uint64_t bytes)
{
    hg_sim *sim = hg_sim_of(device);
    return bytes <= sim->capacity && bytes <= sim->memory_size ? HG_OK : HG_ERR_CAPACITY;
}

static int hg_sim_copy_in(struct hg_device *device, uint64_t dst_offset, const void *src, uint64_t bytes)
{
    hg_sim *sim = hg_sim_of(device);
    if (dst_offset > sim->memory_size || bytes > sim->memory_size - dst_offset) {
        return HG_ERR_CAPACITY;
    }
    memcpy(sim->memory + dst_offset, src, (size_t)bytes);
    sim->dma_cycles += hg_sim_dma_cycles(sim, bytes);
    return HG_OK;
}

static int hg_sim_copy_out(struct hg_device *device, void *dst, uint64_t src_offset, uint64_t bytes)
{
    hg_sim *sim = hg_sim_of(device);
    if (src_offset > sim->memory_size || bytes > sim->memory_size - src_offset) {
        return HG_ERR_CAPACITY;
    }
    memcpy(dst, sim->memory + src_offset, (size_t)bytes);
    sim->dma_cycles += hg_sim_dma_cycles(sim, bytes);
    return HG_OK;
}

static int hg_sim_invoke(struct hg_device *device, uint32_t program)
{
    hg_sim *sim = hg_sim_of(device);
    if (program >= sim->num_programs || sim->queued >= HG_SIM_QUEUE_DEPTH) {
        return HG_ERR_ARGUMENT;
    }
    sim->queue[sim->queued++] = program;
    return HG_OK;
}

static int hg_sim_wait(struct hg_device *device)
{
    hg_sim *sim = hg_sim_of(device);
    const hg_memory memory = { sim->memory, sim->weights, NULL, NULL };
    for (size_t q = 0; q < sim->queued; ++q) {
        const hg_sim_program *program = &sim->programs[sim->queue[q]];
        const int status = hg_graph_run(program->nodes, program->num_nodes, program->args, &memory, NULL, 0,
                                        &sim->compute_cycles);
        if (status != HG_OK) {
            sim->queued = 0;
            return status;
        }
        sim->load_cycles += program->load_cycles;
        sim->invocations += 1;
    }
    sim->queued = 0;
    return HG_OK;
}

const hg_device_ops hg_sim_ops = { hg_sim_alloc, hg_sim_copy_in, hg_sim_copy_out, hg_sim_invoke, hg_sim_wait };
