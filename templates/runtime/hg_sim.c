/* hetgen simulated accelerator: a device model with its own local memory, a command queue, DMA
 * and a cycle counter driven by the kind's figures. The arithmetic runs on the host CPU (the
 * kernels compiled for the device); time is what the counter says.
 *
 * Re-entrant: the constant description is hg_device.config; the queue, counters and local memory
 * live in hg_device.state, a block of the caller's workspace. */
#include <string.h>

#include "hg_sim.h"

static const hg_sim_config *hg_sim_config_of(const struct hg_device *device)
{
    return (const hg_sim_config *)device->config;
}

static hg_sim_state *hg_sim_state_of(struct hg_device *device)
{
    return (hg_sim_state *)device->state;
}

static unsigned char *hg_sim_memory(struct hg_device *device)
{
    return (unsigned char *)device->state + hg_sim_config_of(device)->memory_offset;
}

static uint64_t hg_sim_dma_cycles(const hg_sim_config *config, uint64_t bytes)
{
    return (uint64_t)((double)bytes / config->dma_bytes_per_cycle + 0.999999);
}

static int hg_sim_alloc(struct hg_device *device, uint64_t bytes)
{
    const hg_sim_config *config = hg_sim_config_of(device);
    return bytes <= config->capacity && bytes <= config->memory_size ? HG_OK : HG_ERR_CAPACITY;
}

static int hg_sim_copy_in(struct hg_device *device, uint64_t dst_offset, const void *src, uint64_t bytes)
{
    const hg_sim_config *config = hg_sim_config_of(device);
    if (device->state == NULL || src == NULL) {
        return HG_ERR_ARGUMENT;
    }
    if (dst_offset > config->memory_size || bytes > config->memory_size - dst_offset) {
        return HG_ERR_CAPACITY;
    }
    memcpy(hg_sim_memory(device) + dst_offset, src, (size_t)bytes);
    hg_sim_state_of(device)->stats.dma_cycles += hg_sim_dma_cycles(config, bytes);
    return HG_OK;
}

static int hg_sim_copy_out(struct hg_device *device, void *dst, uint64_t src_offset, uint64_t bytes)
{
    const hg_sim_config *config = hg_sim_config_of(device);
    if (device->state == NULL || dst == NULL) {
        return HG_ERR_ARGUMENT;
    }
    if (src_offset > config->memory_size || bytes > config->memory_size - src_offset) {
        return HG_ERR_CAPACITY;
    }
    memcpy(dst, hg_sim_memory(device) + src_offset, (size_t)bytes);
    hg_sim_state_of(device)->stats.dma_cycles += hg_sim_dma_cycles(config, bytes);
    return HG_OK;
}

static int hg_sim_invoke(struct hg_device *device, uint32_t program)
{
    hg_sim_state *sim = hg_sim_state_of(device);
    if (sim == NULL || program >= hg_sim_config_of(device)->num_programs || sim->queued >= HG_SIM_QUEUE_DEPTH) {
        return HG_ERR_ARGUMENT;
    }
    sim->queue[sim->queued++] = program;
    return HG_OK;
}

static int hg_sim_wait(struct hg_device *device)
{
    const hg_sim_config *config = hg_sim_config_of(device);
    hg_sim_state *sim = hg_sim_state_of(device);
    if (sim == NULL) {
        return HG_ERR_ARGUMENT;
    }
    const hg_memory memory = {
        hg_sim_memory(device), config->memory_size, config->weights, config->weights_size, NULL, NULL, 0, NULL, NULL, 0,
    };
    int status = HG_OK;
    for (uint32_t q = 0; q < sim->queued && q < HG_SIM_QUEUE_DEPTH && status == HG_OK; ++q) {
        if (sim->queue[q] >= config->num_programs) {
            status = HG_ERR_ARGUMENT;
            break;
        }
        const hg_sim_program *program = &config->programs[sim->queue[q]];
        status = hg_graph_run(program->nodes, program->num_nodes, program->args, program->num_args, &memory, NULL, 0,
                              &sim->stats.compute_cycles);
        if (status == HG_OK) {
            sim->stats.load_cycles += program->load_cycles;
            sim->stats.invocations += 1;
        }
    }
    sim->queued = 0;
    return status;
}

void hg_sim_reset(void *state)
{
    memset(state, 0, sizeof(hg_sim_state));
}

const hg_device_ops hg_sim_ops = { hg_sim_alloc, hg_sim_copy_in, hg_sim_copy_out, hg_sim_invoke, hg_sim_wait };
