/* hetgen VM: a bytecode interpreter for controller programs (see hg_runtime.h for the format). */
#include <string.h>

#include "hg_device.h"
#include "hg_runtime.h"

static uint64_t hg_u64(const uint32_t *words)
{
    return (uint64_t)words[0] | ((uint64_t)words[1] << 32);
}

static hg_buffer_ref hg_ref(const uint32_t *words)
{
    hg_buffer_ref ref;
    ref.region = words[0];
    ref.index = words[1];
    ref.offset = hg_u64(words + 2);
    return ref;
}

static struct hg_device *hg_vm_device(struct hg_device *const *devices, size_t num_devices, uint32_t index)
{
    return index < num_devices ? devices[index] : NULL;
}

int hg_vm_run(const uint32_t *code, size_t code_words, const hg_kernel_fn *kernels, size_t num_kernels,
              const hg_memory *memory, struct hg_device *const *devices, size_t num_devices)
{
    void *resolved[HG_MAX_ARGS];
    size_t pc = 0;
    while (pc < code_words) {
        const uint32_t op = code[pc];
        switch (op) {
        case HG_OP_END:
            return HG_OK;
        case HG_OP_CALL: {
            if (pc + 3 > code_words) {
                return HG_ERR_BYTECODE;
            }
            const uint32_t kernel = code[pc + 1];
            const uint32_t num_args = code[pc + 2];
            if (kernel >= num_kernels || num_args > HG_MAX_ARGS || pc + 3 + 4 * (size_t)num_args > code_words) {
                return HG_ERR_BYTECODE;
            }
            for (uint32_t a = 0; a < num_args; ++a) {
                resolved[a] = hg_resolve(memory, hg_ref(code + pc + 3 + 4 * a));
            }
            kernels[kernel](resolved);
            pc += 3 + 4 * (size_t)num_args;
            break;
        }
        case HG_OP_COPY: {
            if (pc + 11 > code_words) {
                return HG_ERR_BYTECODE;
            }
            const void *src = hg_resolve(memory, hg_ref(code + pc + 1));
            void *dst = hg_resolve(memory, hg_ref(code + pc + 5));
            const uint64_t bytes = hg_u64(code + pc + 9);
            if (bytes && src != dst) {
                memmove(dst, src, (size_t)bytes);
            }
            pc += 11;
            break;
        }
        case HG_OP_COPY_IN: {
            if (pc + 10 > code_words) {
                return HG_ERR_BYTECODE;
            }
            struct hg_device *device = hg_vm_device(devices, num_devices, code[pc + 1]);
            if (device == NULL) {
                return HG_ERR_BYTECODE;
            }
            const void *src = hg_resolve(memory, hg_ref(code + pc + 2));
            if (device->ops->copy_in(device, hg_u64(code + pc + 6), src, hg_u64(code + pc + 8)) != HG_OK) {
                return HG_ERR_DEVICE;
            }
            pc += 10;
            break;
        }
        case HG_OP_COPY_OUT: {
            if (pc + 10 > code_words) {
                return HG_ERR_BYTECODE;
            }
            struct hg_device *device = hg_vm_device(devices, num_devices, code[pc + 1]);
            if (device == NULL) {
                return HG_ERR_BYTECODE;
            }
            void *dst = hg_resolve(memory, hg_ref(code + pc + 4));
            if (device->ops->copy_out(device, dst, hg_u64(code + pc + 2), hg_u64(code + pc + 8)) != HG_OK) {
                return HG_ERR_DEVICE;
            }
            pc += 10;
            break;
        }
        case HG_OP_INVOKE:
        case HG_OP_WAIT: {
            if (pc + (op == HG_OP_INVOKE ? 3u : 2u) > code_words) {
                return HG_ERR_BYTECODE;
            }
            struct hg_device *device = hg_vm_device(devices, num_devices, code[pc + 1]);
            if (device == NULL) {
                return HG_ERR_BYTECODE;
            }
            const int status = op == HG_OP_INVOKE ? device->ops->invoke(device, code[pc + 2])
                                                  : device->ops->wait(device);
            if (status != HG_OK) {
                return HG_ERR_DEVICE;
            }
            pc += op == HG_OP_INVOKE ? 3 : 2;
            break;
        }
        default:
            return HG_ERR_BYTECODE;
        }
    }
    return HG_ERR_BYTECODE;
}
