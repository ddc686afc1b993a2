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

/* The MAC array's output stage: ceil(elements * output_cycles_per_element); 0 where not modelled. */
static uint64_t hg_sim_output_cycles(const hg_sim_params *params, uint64_t elements)
{
    if (!(params->output_cycles_per_element > 0.0)) {
        return 0;
    }
    const double exact = (double)elements * params->output_cycles_per_element;
    uint64_t cycles = (uint64_t)exact;
    if ((double)cycles < exact) {
        ++cycles;
    }
    return cycles;
}

uint64_t hg_sim_dma_cycles(const hg_sim_params *params, uint64_t bytes)
{
    return params->dma_setup_cycles + hg_sim_ceil_div(bytes, params->dma_bytes_per_cycle);
}

/* A DMA from the weights region at the weights' own rate and setup, where they have one. */
static uint64_t hg_sim_weight_dma_cycles(const hg_sim_params *params, uint64_t bytes)
{
    if (!(params->weight_dma_bytes_per_cycle > 0.0)) {
        return hg_sim_dma_cycles(params, bytes);
    }
    return params->weight_dma_setup_cycles + hg_sim_ceil_div(bytes, params->weight_dma_bytes_per_cycle);
}

/* Whether a DMA command reads the weights region (a copy whose source is a constant). */
static int hg_sim_reads_weights(const hg_graph_node *node, const hg_buffer_ref *args, size_t num_args)
{
    return node->op == HG_OP_COPY && node->num_args == 2 && node->first_arg < num_args
           && args[node->first_arg].region == HG_REGION_WEIGHTS;
}

/* The depth the MAC array runs a product at: a dense convolution's input channels (k / taps) rounded
 * up to the array's depth block, per kernel tap; any other product's k as is. */
static uint64_t hg_sim_mac_depth(const hg_sim_params *params, const hg_sim_work *work)
{
    const uint64_t block = params->mac_depth_block;
    if (block == 0 || work->taps == 0 || work->k % work->taps != 0) {
        return work->k;
    }
    return work->taps * ((work->k / work->taps + block - 1) / block) * block;
}

/* An int8 product on the MAC array: output tiles of mac_rows x int8_mac_cols, each multiplier a
 * dot-product unit that sums int8_mac_depth products along the depth, so the depth takes
 * ceil(depth / int8_mac_depth) steps (a 3 x 3 depthwise channel at 4: 3 steps, not 9). */
static uint64_t hg_sim_int8_steps(const hg_sim_params *params, const hg_sim_work *work)
{
    const uint32_t cols = params->int8_mac_cols ? params->int8_mac_cols : params->mac_cols;
    return work->batch * hg_sim_steps(work->m, params->mac_rows) * hg_sim_steps(work->n, cols)
           * hg_sim_steps(hg_sim_mac_depth(params, work), params->int8_mac_depth);
}

/* A feature-map DMA on a device that fetches a pixel's channels in whole bricks: the bytes it takes,
 * its own x ceil(channels / brick) x brick / channels (work->k: the block's channels; 0: not a
 * feature map, as is). */
static uint64_t hg_sim_brick_bytes(const hg_sim_params *params, const hg_sim_work *work)
{
    const uint64_t brick = params->dma_brick_channels;
    if (brick == 0 || work->k == 0) {
        return work->bytes;
    }
    const uint64_t scaled = work->bytes * ((work->k + brick - 1) / brick) * brick;
    return (scaled + work->k - 1) / work->k;
}

/* A DMA of a tensor the controller writes or reads, in DRAM in its linear layout: the bytes it
 * takes, each access (a pixel's channels rounded up to the depth block, element_bytes each; a write's at most
 * linear_write_bytes) a whole burst of linear_burst_bytes: its own x burst / min(burst, access). */
static uint64_t hg_sim_linear_bytes(const hg_sim_params *params, const hg_sim_work *work)
{
    const uint64_t burst = params->linear_burst_bytes;
    if (burst == 0 || work->k == 0 || work->linear == 0) {
        return work->bytes;
    }
    const uint64_t block = params->mac_depth_block;
    const uint64_t element = work->element_bytes ? work->element_bytes : 1u;
    uint64_t access = (block ? (work->k + block - 1) / block * block : work->k) * element;
    if (work->linear == HG_SIM_LINEAR_WRITE && params->linear_write_bytes != 0 && access > params->linear_write_bytes) {
        access = params->linear_write_bytes;
    }
    if (access > burst) {
        access = burst;
    }
    return (work->bytes * burst + access - 1) / access;
}

uint64_t hg_sim_command_cycles(const hg_sim_params *params, const hg_sim_work *work)
{
    uint64_t compute;
    switch (work->engine) {
    case HG_SIM_MAC_ARRAY: /* output tiles of mac_rows x mac_cols, one step per tile and depth */
        compute = work->batch * hg_sim_steps(work->m, params->mac_rows) * hg_sim_steps(work->n, params->mac_cols)
                  * hg_sim_mac_depth(params, work);
        break;
    case HG_SIM_MAC_ARRAY_RESIDUAL: /* the same, then the vector unit adds the residual to every output */
        compute = work->batch * hg_sim_steps(work->m, params->mac_rows) * hg_sim_steps(work->n, params->mac_cols)
                      * hg_sim_mac_depth(params, work)
                  + hg_sim_steps(work->batch * work->m * work->n, params->vector_lanes);
        break;
    case HG_SIM_MAC_ARRAY_INT8: /* the same tiling, int8_mac_cols wide, int8_mac_depth products a step */
        compute = hg_sim_int8_steps(params, work);
        break;
    case HG_SIM_MAC_ARRAY_INT8_RESIDUAL: /* int8 products, then the vector unit adds the residual to every output */
        compute = hg_sim_int8_steps(params, work) + hg_sim_steps(work->batch * work->m * work->n, params->vector_lanes);
        break;
    case HG_SIM_VECTOR: /* vector_lanes element-taps per cycle */
        compute = hg_sim_steps(work->batch * work->m * work->k, params->vector_lanes);
        break;
    case HG_SIM_DMA:
        return hg_sim_dma_cycles(params, hg_sim_brick_bytes(params, work));
    case HG_SIM_MOVE: /* an SRAM-to-SRAM copy: the engines' SRAM bandwidth */
        return params->command_cycles + hg_sim_ceil_div(work->bytes, params->sram_bytes_per_cycle);
    default:
        return 0;
    }
    if (work->engine != HG_SIM_VECTOR) { /* the output stage drains the array's results, overlapped with it */
        const uint64_t output = hg_sim_output_cycles(params, work->batch * work->m * work->n);
        compute = compute > output ? compute : output;
    }
    /* The engines stream their operands from local memory: a command waits for the slower of the two. */
    const uint64_t memory = hg_sim_ceil_div(work->bytes, params->sram_bytes_per_cycle);
    return params->command_cycles + (compute > memory ? compute : memory);
}

/* A strided copy: m segments of n bytes, src_stride and dst_stride bytes apart (a tile's block of a
 * tensor to or from SRAM by DMA; a MOVE within SRAM). Both spans are bounds-checked before a byte
 * moves. Within one buffer (a cascade's kept rows moved to its window's top) the segments are
 * copied in the order that reads each before another's copy overwrites it: last first where the
 * destination's stride is the larger (the window grew), or, at equal strides, where the
 * destination lies above the source; each segment is a memmove. */
static int hg_sim_strided_copy(const hg_memory *memory, const hg_graph_node *node, const hg_buffer_ref *args,
                               size_t num_args, const hg_sim_work *work)
{
    void *src;
    void *dst;
    if (node->op != HG_OP_COPY || node->num_args != 2 || node->first_arg > num_args
        || num_args - node->first_arg < 2 || work->m == 0 || work->m * work->n != node->bytes) {
        return HG_ERR_BYTECODE;
    }
    const uint64_t src_span = (work->m - 1) * work->src_stride + work->n;
    const uint64_t dst_span = (work->m - 1) * work->dst_stride + work->n;
    if (hg_resolve(memory, args[node->first_arg], src_span, &src) != HG_OK
        || hg_resolve(memory, args[node->first_arg + 1], dst_span, &dst) != HG_OK) {
        return HG_ERR_BYTECODE;
    }
    unsigned char *const to = (unsigned char *)dst;
    const unsigned char *const from = (const unsigned char *)src;
    const int backwards = work->dst_stride > work->src_stride || (work->dst_stride == work->src_stride && to > from);
    for (uint64_t i = 0; i < work->m; ++i) {
        const uint64_t s = backwards ? work->m - 1 - i : i;
        memmove(to + s * work->dst_stride, from + s * work->src_stride, (size_t)work->n);
    }
    return HG_OK;
}

/* A kernel computes from SRAM only: every local-memory argument lies below the SRAM's end, or in
 * the emulating kernels' workspace right after it. */
static int hg_sim_in_sram(const hg_sim_config *config, const hg_graph_node *node, const hg_buffer_ref *args,
                          size_t num_args)
{
    if (node->op != HG_OP_CALL || node->first_arg > num_args || node->num_args > num_args - node->first_arg) {
        return 1; /* not a call, or malformed: hg_graph_run refuses the latter */
    }
    for (uint32_t a = 0; a < node->num_args; ++a) {
        const hg_buffer_ref ref = args[node->first_arg + a];
        if (config->sram_size != 0 && ref.region == HG_REGION_ARENA
            && ref.offset >= config->sram_size + config->emulation_scratch) {
            return 0;
        }
    }
    return 1;
}

/* Run one program command by command. The DMA engine and the compute engines (MAC array, vector
 * unit) each run their commands in order; a command starts when its engine is free and the command
 * it waits for (work->after) has finished. Each command's counter gets the cycles by which it moved
 * the program's end, so a program's counters add up to its elapsed cycles, overlap included. */
static int hg_sim_run_program(const hg_sim_config *config, hg_sim_state *sim, const hg_sim_program *program,
                              const hg_memory *memory, uint64_t *counters)
{
    uint64_t finish[HG_SIM_RING] = { 0 };
    uint64_t dma_free = 0;
    uint64_t compute_free = 0;
    uint64_t end = 0;
    for (size_t n = 0; n < program->num_nodes; ++n) {
        const hg_graph_node *node = &program->nodes[n];
        const hg_sim_work *work = program->work != NULL ? &program->work[n] : NULL;
        int status;
        if (work != NULL && (work->engine == HG_SIM_MOVE || (work->engine == HG_SIM_DMA && work->m > 1))) {
            status = hg_sim_strided_copy(memory, node, program->args, program->num_args, work);
        } else if (!hg_sim_in_sram(config, node, program->args, program->num_args)) {
            status = HG_ERR_CAPACITY;
        } else {
            status = hg_graph_run(node, 1, program->args, program->num_args, memory, NULL, 0, NULL);
        }
        if (status != HG_OK) {
            return status;
        }
        if (work == NULL || work->engine == HG_SIM_NONE) {
            continue;
        }
        /* a DMA of weights from a memory of their own goes at its rate and latency; so does one of
         * a tensor the controller shares, kept in that memory (DRAM) in its linear layout */
        const int linear = work->engine == HG_SIM_DMA && work->linear != 0 && config->params.linear_burst_bytes != 0;
        const int weights = work->engine == HG_SIM_DMA && config->params.weight_dma_bytes_per_cycle > 0.0
                            && (linear || hg_sim_reads_weights(node, program->args, program->num_args));
        uint64_t cycles = linear    ? hg_sim_weight_dma_cycles(&config->params, hg_sim_linear_bytes(&config->params, work))
                          : weights ? hg_sim_weight_dma_cycles(&config->params, work->bytes)
                                    : hg_sim_command_cycles(&config->params, work);
        const uint64_t ready = work->after != 0 && work->after <= n && work->after < HG_SIM_RING
                                   ? finish[(n - work->after) % HG_SIM_RING]
                                   : 0;
        if (work->engine == HG_SIM_DMA && dma_free > 0 && ready <= dma_free) {
            /* queued behind another DMA: its reads were issued while that one's data streamed */
            const uint64_t setup = weights ? config->params.weight_dma_setup_cycles : config->params.dma_setup_cycles;
            const uint64_t kept = weights ? config->params.weight_dma_hidden_cycles : config->params.dma_hidden_cycles;
            cycles -= kept < setup ? kept : setup;
        }
        uint64_t *engine_free = work->engine == HG_SIM_DMA ? &dma_free : &compute_free;
        const uint64_t done = (*engine_free > ready ? *engine_free : ready) + cycles;
        *engine_free = done;
        finish[n % HG_SIM_RING] = done;
        const uint64_t advance = done > end ? done - end : 0;
        end = done > end ? done : end;
        sim->stats.compute_cycles += advance;
        if (work->engine == HG_SIM_DMA) {
            sim->stats.load_cycles += advance;
            sim->stats.dma_bytes += work->bytes; /* what it was asked to move, command by command */
        }
        const uint64_t counter = program->first_counter + n;
        if (counter < config->num_counters) {
            counters[counter] += advance;
        }
    }
    return HG_OK;
}

static int hg_sim_alloc(struct hg_device *device, uint64_t bytes)
{
    const hg_sim_config *config = hg_sim_config_of(device);
    /* Local memory is the SRAM (at most `capacity`) and, past it, where activations live. */
    return config->sram_size <= config->capacity && bytes <= config->memory_size ? HG_OK : HG_ERR_CAPACITY;
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
    hg_link_account(&config->params.link, &hg_sim_state_of(device)->stats, bytes);
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
    hg_link_account(&config->params.link, &hg_sim_state_of(device)->stats, bytes);
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
        status = hg_sim_run_program(config, sim, program, &memory,
                                    (uint64_t *)((unsigned char *)device->state + config->counters_offset));
        if (status == HG_OK) {
            sim->stats.invocations += 1;
            sim->stats.invoke_cycles += config->params.invoke_cycles;
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
