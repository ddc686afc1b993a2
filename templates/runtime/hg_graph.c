/* hetgen graph executor: walks a static node table, resolving each node's arguments. */
#include <string.h>

#include "hg_device.h"
#include "hg_runtime.h"

int hg_graph_run(const hg_graph_node *nodes, size_t num_nodes, const hg_buffer_ref *args, const hg_memory *memory,
                 struct hg_device *const *devices, size_t num_devices, uint64_t *cycles)
{
    void *resolved[HG_MAX_ARGS];
    for (size_t n = 0; n < num_nodes; ++n) {
        const hg_graph_node *node = &nodes[n];
        struct hg_device *device = node->device < num_devices ? devices[node->device] : NULL;
        int status = HG_OK;
        switch (node->op) {
        case HG_OP_CALL:
            if (node->num_args > HG_MAX_ARGS) {
                return HG_ERR_BYTECODE;
            }
            for (uint32_t a = 0; a < node->num_args; ++a) {
                resolved[a] = hg_resolve(memory, args[node->first_arg + a]);
            }
            node->fn(resolved);
            break;
        case HG_OP_COPY: {
            const void *src = hg_resolve(memory, args[node->first_arg]);
            void *dst = hg_resolve(memory, args[node->first_arg + 1]);
            if (node->bytes && src != dst) {
                memmove(dst, src, (size_t)node->bytes);
            }
            break;
        }
        case HG_OP_COPY_IN:
            if (device == NULL) {
                return HG_ERR_BYTECODE;
            }
            status = device->ops->copy_in(device, args[node->first_arg + 1].offset,
                                          hg_resolve(memory, args[node->first_arg]), node->bytes);
            break;
        case HG_OP_COPY_OUT:
            if (device == NULL) {
                return HG_ERR_BYTECODE;
            }
            status = device->ops->copy_out(device, hg_resolve(memory, args[node->first_arg + 1]),
                                           args[node->first_arg].offset, node->bytes);
            break;
        case HG_OP_INVOKE:
            if (device == NULL) {
                return HG_ERR_BYTECODE;
            }
            status = device->ops->invoke(device, node->first_arg);
            break;
        case HG_OP_WAIT:
            if (device == NULL) {
                return HG_ERR_BYTECODE;
            }
            status = device->ops->wait(device);
            break;
        default:
            return HG_ERR_BYTECODE;
        }
        if (status != HG_OK) {
            return HG_ERR_DEVICE;
        }
        if (cycles != NULL) {
            *cycles += node->cycles;
        }
    }
    return HG_OK;
}
