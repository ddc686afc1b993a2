/* hetgen simulated accelerator: a device model with its own local memory, a command queue, a DMA
 * engine, a MAC array and a vector unit. The arithmetic runs on the host CPU (the kernels compiled
 * for the device); time is what the counters say, and they count it from what each command asks
 * (its work descriptor: shapes and bytes) and the device's own parameters - never from the cost
 * model's figures. docs/simulator.md describes the micro-architecture.
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

/* ceil(amount / per_cycle) for a positive rate; 0 for none. */
static uint64_t hg_sim_ceil_div(uint64_t amount, double per_cycle)
{
    if (amount == 0 || !(per_cycle > 0.0)) {
        return 0;
    }
    uint64_t cycles = (uint64_t)((double)amount / per_cycle);
    while ((double)cycles * per_cycle < (double)amount) {
        ++cycles;
    }
    return cycles;
}

static uint64_t hg_sim_steps(uint64_t extent, uint32_t lanes)
{
    return lanes ? (extent + lanes - 1) / lanes : extent;
}

uint64_t hg_sim_dma_cycles(const hg_sim_params *params, uint64_t bytes)
{
    return params->dma_setup_cycles + hg_sim_ceil_div(bytes, params->dma_bytes_per_cycle);
}

uint64_t hg_sim_command_cycles(const hg_sim_params *params, const hg_sim_work *work)
{
    uint64_t compute;
    switch (work->engine) {
    case HG_SIM_MAC_ARRAY: /* output tiles of mac_rows x mac_cols, one step per tile and depth */
        compute = work->batch * hg_sim_steps(work->m, params->mac_rows) * hg_sim_steps(work->n, params->mac_cols)
                  * work->k;
        break;
    case HG_SIM_MAC_ARRAY_INT8: /* the same tiling, int8_mac_cols wide */
        compute = work->batch * hg_sim_steps(work->m, params->mac_rows)
                  * hg_sim_steps(work->n, params->int8_mac_cols ? params->int8_mac_cols : params->mac_cols) * work->k;
        break;
    case HG_SIM_VECTOR: /* vector_lanes element-taps per cycle */
        compute = hg_sim_steps(work->batch * work->m * work->k, params->vector_lanes);
        break;
    case HG_SIM_DMA:
        return hg_sim_dma_cycles(params, work->bytes);
    default:
        return 0;
    }
    /* The engines stream their operands from local memory: a command waits for the slower of the two. */
    const uint64_t memory = hg_sim_ceil_div(work->bytes, params->sram_bytes_per_cycle);
    return params->command_cycles + (compute > memory ? compute : memory);
}

/* The accounting hook the graph executor calls after each command of a program ran. */
typedef struct {
    const hg_sim_config *config;
    const hg_sim_program *program;
    hg_sim_state *sim;
    uint64_t *counters;
} hg_sim_run;

static void hg_sim_account(void *context, size_t node)
{
    hg_sim_run *run = (hg_sim_run *)context;
    if (run->program->work == NULL || node >= run->program->num_nodes) {
        return;
    }
    const hg_sim_work *work = &run->program->work[node];
    const uint64_t cycles = hg_sim_command_cycles(&run->config->params, work);
    run->sim->stats.compute_cycles += cycles;
    if (work->engine == HG_SIM_DMA) {
        run->sim->stats.load_cycles += cycles;
    }
    const uint64_t counter = run->program->first_counter + node;
    if (counter < run->config->num_counters) {
        run->counters[counter] += cycles;
    }
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
    hg_sim_state_of(device)->stats.dma_cycles += hg_sim_dma_cycles(&config->params, bytes);
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
    hg_sim_state_of(device)->stats.dma_cycles += hg_sim_dma_cycles(&config->params, bytes);
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
        hg_sim_run run = { config, program, sim, (uint64_t *)((unsigned char *)device->state + config->counters_offset) };
        const hg_graph_hook hook = { hg_sim_account, &run };
        status = hg_graph_run(program->nodes, program->num_nodes, program->args, program->num_args, &memory, NULL, 0,
                              &hook);
        if (status == HG_OK) {
            sim->stats.invocations += 1;
        }
    }
    sim->queued = 0;
    return status;
}

void hg_sim_reset(void *state, const hg_sim_config *config)
{
    memset(state, 0, sizeof(hg_sim_state));
    if (config != NULL && config->num_counters) {
        memset((unsigned char *)state + config->counters_offset, 0, (size_t)config->num_counters * sizeof(uint64_t));
    }
}

const hg_device_ops hg_sim_ops = { hg_sim_alloc, hg_sim_copy_in, hg_sim_copy_out, hg_sim_invoke, hg_sim_wait };
