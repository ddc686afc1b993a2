/* hetgen graph executor: walks a static node table, resolving each node's arguments.
 *
 * Every node is checked before it runs: opcode, device index, its slice of the argument table,
 * regions, offsets and sizes. A corrupt table ends in HG_ERR_BYTECODE, never in an out-of-bounds
 * access. */
#include <string.h>

#include "hg_device.h"
#include "hg_runtime.h"

static int hg_graph_device_ref(hg_buffer_ref ref)
{
    return ref.region == HG_REGION_DEVICE && ref.index == 0;
}

static int hg_graph_node_run(const hg_graph_node *node, const hg_buffer_ref *args, const hg_memory *memory,
                             struct hg_device *device)
{
    void *resolved[HG_MAX_ARGS];
    void *src;
    void *dst;
    switch (node->op) {
    case HG_OP_CALL:
        if (node->fn == NULL || node->num_args > HG_MAX_ARGS) {
            return HG_ERR_BYTECODE;
        }
        for (uint32_t a = 0; a < node->num_args; ++a) {
            if (hg_resolve(memory, args[a], 0, &resolved[a]) != HG_OK) {
                return HG_ERR_BYTECODE;
            }
        }
        node->fn(resolved);
        return HG_OK;
    case HG_OP_COPY:
        if (node->num_args != 2 || hg_resolve(memory, args[0], node->bytes, &src) != HG_OK
            || hg_resolve(memory, args[1], node->bytes, &dst) != HG_OK) {
            return HG_ERR_BYTECODE;
        }
        if (node->bytes && src != dst) {
            memmove(dst, src, (size_t)node->bytes);
        }
        return HG_OK;
    case HG_OP_COPY_IN:
        if (device == NULL || node->num_args != 2 || !hg_graph_device_ref(args[1])
            || hg_resolve(memory, args[0], node->bytes, &src) != HG_OK) {
            return HG_ERR_BYTECODE;
        }
        return device->ops->copy_in(device, args[1].offset, src, node->bytes) == HG_OK ? HG_OK : HG_ERR_DEVICE;
    case HG_OP_COPY_OUT:
        if (device == NULL || node->num_args != 2 || !hg_graph_device_ref(args[0])
            || hg_resolve(memory, args[1], node->bytes, &dst) != HG_OK) {
            return HG_ERR_BYTECODE;
        }
        return device->ops->copy_out(device, dst, args[0].offset, node->bytes) == HG_OK ? HG_OK : HG_ERR_DEVICE;
    case HG_OP_INVOKE: /* the program index travels in first_arg */
        if (device == NULL) {
            return HG_ERR_BYTECODE;
        }
        return device->ops->invoke(device, node->first_arg) == HG_OK ? HG_OK : HG_ERR_DEVICE;
    case HG_OP_WAIT:
        if (device == NULL) {
            return HG_ERR_BYTECODE;
        }
        return device->ops->wait(device) == HG_OK ? HG_OK : HG_ERR_DEVICE;
    default:
        return HG_ERR_BYTECODE;
    }
}

int hg_graph_run(const hg_graph_node *nodes, size_t num_nodes, const hg_buffer_ref *args, size_t num_args,
                 const hg_memory *memory, struct hg_device *const *devices, size_t num_devices,
                 const hg_graph_hook *hook)
{
    for (size_t n = 0; n < num_nodes; ++n) {
        const hg_graph_node *node = &nodes[n];
        const int uses_args = node->op == HG_OP_CALL || node->op == HG_OP_COPY || node->op == HG_OP_COPY_IN
                              || node->op == HG_OP_COPY_OUT;
        if (uses_args && (node->first_arg > num_args || node->num_args > num_args - node->first_arg)) {
            return HG_ERR_BYTECODE;
        }
        const int uses_device = node->op >= HG_OP_COPY_IN && node->op <= HG_OP_WAIT;
        struct hg_device *device = NULL;
        if (uses_device) {
            if (node->device >= num_devices || devices[node->device] == NULL) {
                return HG_ERR_BYTECODE;
            }
            device = devices[node->device];
        }
        const int status = hg_graph_node_run(node, uses_args ? args + node->first_arg : args, memory, device);
        if (status != HG_OK) {
            return status;
        }
        if (hook != NULL && hook->node_done != NULL) {
            hook->node_done(hook->context, n);
        }
    }
    return HG_OK;
}
