/* hetgen co-processor device (hg_coproc.h): the device interface of a controller below the root.
 *
 * Re-entrant: the constant description is hg_device.config; the queue, counters, arena and the
 * co-processor's own devices' blocks live in hg_device.state, a block of the caller's workspace. */
#include <string.h>

#include "hg_coproc.h"

static const hg_coproc_config *hg_coproc_config_of(const struct hg_device *device)
{
    return (const hg_coproc_config *)device->config;
}

static int hg_coproc_alloc(struct hg_device *device, uint64_t bytes)
{
    const hg_coproc_config *config = hg_coproc_config_of(device);
    if (bytes > config->arena_size) {
        return HG_ERR_CAPACITY;
    }
    return config->devices_init();
}

static int hg_coproc_copy_in(struct hg_device *device, uint64_t dst_offset, const void *src, uint64_t bytes)
{
    const hg_coproc_config *config = hg_coproc_config_of(device);
    if (device->state == NULL || src == NULL) {
        return HG_ERR_ARGUMENT;
    }
    if (dst_offset > config->arena_size || bytes > config->arena_size - dst_offset) {
        return HG_ERR_CAPACITY;
    }
    memcpy((unsigned char *)device->state + config->arena_offset + dst_offset, src, (size_t)bytes);
    hg_link_account(&config->link, &((hg_coproc_state *)device->state)->stats, bytes);
    return HG_OK;
}

static int hg_coproc_copy_out(struct hg_device *device, void *dst, uint64_t src_offset, uint64_t bytes)
{
    const hg_coproc_config *config = hg_coproc_config_of(device);
    if (device->state == NULL || dst == NULL) {
        return HG_ERR_ARGUMENT;
    }
    if (src_offset > config->arena_size || bytes > config->arena_size - src_offset) {
        return HG_ERR_CAPACITY;
    }
    memcpy(dst, (const unsigned char *)device->state + config->arena_offset + src_offset, (size_t)bytes);
    hg_link_account(&config->link, &((hg_coproc_state *)device->state)->stats, bytes);
    return HG_OK;
}

static int hg_coproc_invoke(struct hg_device *device, uint32_t program)
{
    hg_coproc_state *state = (hg_coproc_state *)device->state;
    if (state == NULL || program >= hg_coproc_config_of(device)->num_entries
        || state->num_pending >= HG_COPROC_QUEUE_DEPTH) {
        return HG_ERR_ARGUMENT;
    }
    state->pending[state->num_pending++] = program;
    return HG_OK;
}

static int hg_coproc_wait(struct hg_device *device)
{
    const hg_coproc_config *config = hg_coproc_config_of(device);
    unsigned char *block = (unsigned char *)device->state;
    hg_coproc_state *state = (hg_coproc_state *)block;
    if (state == NULL || config->device_slots > HG_MAX_DEVICES) {
        return HG_ERR_ARGUMENT;
    }
    struct hg_device devices[HG_MAX_DEVICES];
    struct hg_device *pointers[HG_MAX_DEVICES];
    config->bind_devices(block, devices, pointers);
    const hg_memory memory = {
        block + config->arena_offset, config->arena_size, config->weights, config->weights_size,
        NULL, NULL, 0, NULL, NULL, 0,
    };
    int status = HG_OK;
    for (uint32_t p = 0; p < state->num_pending && p < HG_COPROC_QUEUE_DEPTH && status == HG_OK; ++p) {
        const uint32_t entry = state->pending[p];
        status = entry < config->num_entries ? config->entries[entry](&memory, pointers) : HG_ERR_ARGUMENT;
    }
    state->num_pending = 0;
    return status;
}

const hg_device_ops hg_coproc_ops = { hg_coproc_alloc, hg_coproc_copy_in, hg_coproc_copy_out, hg_coproc_invoke,
                                      hg_coproc_wait };

void hg_coproc_reset(void *state, const hg_coproc_config *config)
{
    memset(state, 0, sizeof(hg_coproc_state));
    config->reset_devices((unsigned char *)state);
}

void hg_coproc_stats(const void *state, hg_device_stats *stats)
{
    memcpy(stats, &((const hg_coproc_state *)state)->stats, sizeof *stats);
}
