/* hetgen VM: a bytecode interpreter for controller programs (see hg_runtime.h for the format).
 *
 * Every word is bounds-checked before it is read and every index, region, offset and size before
 * it is used, so a corrupt program ends in HG_ERR_BYTECODE, never in an out-of-bounds access. The
 * checks are a few compares per instruction, next to kernels that do thousands of operations. */
#include <string.h>

#include "hg_device.h"
#include "hg_runtime.h"

/* Words an instruction takes after its opcode word, or 0 for an unknown opcode. */
static size_t hg_vm_length(uint32_t op)
{
    switch (op) {
    case HG_OP_END:
        return 1;
    case HG_OP_CALL:
        return 3; /* and 4 per argument */
    case HG_OP_COPY:
        return 11;
    case HG_OP_COPY_IN:
    case HG_OP_COPY_OUT:
        return 10;
    case HG_OP_INVOKE:
        return 3;
    case HG_OP_WAIT:
        return 2;
    default:
        return 0;
    }
}

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

static int hg_vm_call(const uint32_t *code, size_t code_words, size_t pc, const hg_kernel_fn *kernels,
                      size_t num_kernels, const hg_memory *memory, size_t *length)
{
    void *resolved[HG_MAX_ARGS];
    const uint32_t kernel = code[pc + 1];
    const uint32_t num_args = code[pc + 2];
    if (kernel >= num_kernels || kernels[kernel] == NULL || num_args > HG_MAX_ARGS
        || 4 * (size_t)num_args > code_words - pc - 3) {
        return HG_ERR_BYTECODE;
    }
    for (uint32_t a = 0; a < num_args; ++a) {
        if (hg_resolve(memory, hg_ref(code + pc + 3 + 4 * (size_t)a), 0, &resolved[a]) != HG_OK) {
            return HG_ERR_BYTECODE;
        }
    }
    kernels[kernel](resolved);
    *length = 3 + 4 * (size_t)num_args;
    return HG_OK;
}

int hg_vm_run(const uint32_t *code, size_t code_words, const hg_kernel_fn *kernels, size_t num_kernels,
              const hg_memory *memory, struct hg_device *const *devices, size_t num_devices)
{
    size_t pc = 0;
    while (pc < code_words) {
        const uint32_t op = code[pc];
        size_t length = hg_vm_length(op);
        if (length == 0 || length > code_words - pc) {
            return HG_ERR_BYTECODE;
        }
        struct hg_device *device = NULL;
        if (op >= HG_OP_COPY_IN) { /* every device instruction names its device in word 1 */
            if (code[pc + 1] >= num_devices || devices[code[pc + 1]] == NULL) {
                return HG_ERR_BYTECODE;
            }
            device = devices[code[pc + 1]];
        }
        int status = HG_OK;
        switch (op) {
        case HG_OP_END:
            return HG_OK;
        case HG_OP_CALL:
            status = hg_vm_call(code, code_words, pc, kernels, num_kernels, memory, &length);
            break;
        case HG_OP_COPY: {
            const uint64_t bytes = hg_u64(code + pc + 9);
            void *src;
            void *dst;
            if (hg_resolve(memory, hg_ref(code + pc + 1), bytes, &src) != HG_OK
                || hg_resolve(memory, hg_ref(code + pc + 5), bytes, &dst) != HG_OK) {
                return HG_ERR_BYTECODE;
            }
            if (bytes && src != dst) {
                memmove(dst, src, (size_t)bytes);
            }
            break;
        }
        case HG_OP_COPY_IN: {
            const uint64_t bytes = hg_u64(code + pc + 8);
            void *src;
            if (hg_resolve(memory, hg_ref(code + pc + 2), bytes, &src) != HG_OK) {
                return HG_ERR_BYTECODE;
            }
            if (device->ops->copy_in(device, hg_u64(code + pc + 6), src, bytes) != HG_OK) {
                return HG_ERR_DEVICE;
            }
            break;
        }
        case HG_OP_COPY_OUT: {
            const uint64_t bytes = hg_u64(code + pc + 8);
            void *dst;
            if (hg_resolve(memory, hg_ref(code + pc + 4), bytes, &dst) != HG_OK) {
                return HG_ERR_BYTECODE;
            }
            if (device->ops->copy_out(device, dst, hg_u64(code + pc + 2), bytes) != HG_OK) {
                return HG_ERR_DEVICE;
            }
            break;
        }
        case HG_OP_INVOKE:
            if (device->ops->invoke(device, code[pc + 2]) != HG_OK) {
                return HG_ERR_DEVICE;
            }
            break;
        case HG_OP_WAIT:
            if (device->ops->wait(device) != HG_OK) {
                return HG_ERR_DEVICE;
            }
            break;
        default:
            return HG_ERR_BYTECODE;
        }
        if (status != HG_OK) {
            return status;
        }
        pc += length;
    }
    return HG_ERR_BYTECODE; /* ran off the end without END */
}
