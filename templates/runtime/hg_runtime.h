/* hetgen runtime: buffer references, the graph executor and the VM interpreter.
 *
 * Every generated kernel has the signature `void kernel(void *const *args)`; a runtime resolves
 * each argument from a (region, position) pair against the memory of the current invocation.
 */
#ifndef HG_RUNTIME_H
#define HG_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "hg_constants.h" /* generated from hetgen/abi.py: opcodes, regions, hg_device_stats */

#define HG_RUNTIME_VERSION 2

/* Error codes returned by every runtime entry point. */
#define HG_OK 0
#define HG_ERR_ARGUMENT (-1)  /* a NULL or misaligned buffer was passed */
#define HG_ERR_BYTECODE (-2)  /* a corrupt program (bad opcode, index, region, offset or size): a hetgen bug */
#define HG_ERR_DEVICE (-3)    /* a child device reported a failure */
#define HG_ERR_CAPACITY (-4)  /* a device allocation exceeded its memory */

/* The most arguments one kernel takes (inputs + outputs + scratch). */
#define HG_MAX_ARGS 64

typedef void (*hg_kernel_fn)(void *const *args);

typedef struct {
    uint32_t region;
    uint32_t index;   /* INPUT/OUTPUT: buffer index; otherwise 0 */
    uint64_t offset;  /* ARENA/WEIGHTS/DEVICE: byte offset */
} hg_buffer_ref;

/* The memory one invocation of a program sees, with the size of every region, so the runtimes
 * can refuse a reference outside it. */
typedef struct {
    unsigned char *arena;
    uint64_t arena_size;
    const unsigned char *weights;
    uint64_t weights_size;
    const void *const *inputs;
    const uint64_t *input_bytes;  /* the size of each input buffer */
    size_t num_inputs;
    void *const *outputs;
    const uint64_t *output_bytes;
    size_t num_outputs;
} hg_memory;

struct hg_device;

/* Describes one model input or output; dtype is the ONNX TensorProto code (1 = float32). */
#define HG_MAX_RANK 8
typedef struct {
    const char *name;
    int32_t dtype;
    uint32_t rank;
    int64_t shape[HG_MAX_RANK];
    uint64_t nbytes;
} hg_tensor_info;

/* The link from a device's controller to the device, in the device's cycles; bytes_per_cycle 0:
 * no link (the controller shares its memory). */
typedef struct {
    double latency_cycles;
    double bytes_per_cycle;
} hg_link;

/* Count one copy of `bytes` over `link` (copy_in and copy_out of a device behind a link). */
static inline void hg_link_account(const hg_link *link, hg_device_stats *stats, uint64_t bytes)
{
    if (!(link->bytes_per_cycle > 0.0)) {
        return;
    }
    const double cycles = link->latency_cycles + (double)bytes / link->bytes_per_cycle;
    stats->link_cycles += (uint64_t)(cycles + 0.5);
    stats->link_bytes += bytes;
    stats->link_copies += 1;
}

/* The address of `bytes` bytes at `ref`, stored in *address, or HG_ERR_BYTECODE when any of them
 * lies outside the region (or the reference is malformed). NONE resolves to NULL. */
static inline int hg_resolve(const hg_memory *memory, hg_buffer_ref ref, uint64_t bytes, void **address)
{
    *address = NULL;
    switch (ref.region) {
    case HG_REGION_NONE:
        return ref.index == 0 && ref.offset == 0 && bytes == 0 ? HG_OK : HG_ERR_BYTECODE;
    case HG_REGION_ARENA:
        if (ref.index != 0 || memory->arena == NULL || ref.offset > memory->arena_size
            || bytes > memory->arena_size - ref.offset) {
            return HG_ERR_BYTECODE;
        }
        *address = memory->arena + ref.offset;
        return HG_OK;
    case HG_REGION_WEIGHTS:
        if (ref.index != 0 || memory->weights == NULL || ref.offset > memory->weights_size
            || bytes > memory->weights_size - ref.offset) {
            return HG_ERR_BYTECODE;
        }
        *address = (void *)(uintptr_t)(memory->weights + ref.offset);
        return HG_OK;
    case HG_REGION_INPUT:
        if (ref.offset != 0 || ref.index >= memory->num_inputs || bytes > memory->input_bytes[ref.index]) {
            return HG_ERR_BYTECODE;
        }
        *address = (void *)(uintptr_t)memory->inputs[ref.index];
        return HG_OK;
    case HG_REGION_OUTPUT:
        if (ref.offset != 0 || ref.index >= memory->num_outputs || bytes > memory->output_bytes[ref.index]) {
            return HG_ERR_BYTECODE;
        }
        *address = memory->outputs[ref.index];
        return HG_OK;
    default: /* DEVICE memory is reached through the device's ops, never by address */
        return HG_ERR_BYTECODE;
    }
}

/* graph runtime: a static node table walked in order. A node calls a kernel, copies between
 * buffers, or drives a child device (copy in/out, invoke, wait), so the same table format serves
 * controllers and the simulated accelerators' command lists. */
typedef struct {
    uint32_t op;         /* enum hg_opcode */
    uint32_t device;     /* COPY_IN/COPY_OUT/INVOKE/WAIT: child device index; INVOKE: program in first_arg */
    hg_kernel_fn fn;     /* CALL */
    uint32_t first_arg;  /* index into the argument table: CALL args; COPY*: source then destination */
    uint32_t num_args;
    uint64_t bytes;      /* COPY, COPY_IN, COPY_OUT */
} hg_graph_node;

/* Called after each node that ran without error, with its index in the table: how a simulated
 * device accounts for the work it was given (hg_sim.c). Controllers pass none. */
typedef struct {
    void (*node_done)(void *context, size_t node);
    void *context;
} hg_graph_hook;

/* Every node is checked before it runs (opcode, device, argument range, regions, offsets and sizes);
 * a corrupt table returns HG_ERR_BYTECODE. A kernel's argument is checked to start inside its region;
 * its extent is the memory plan's, which the generated C asserts at compile time. */
int hg_graph_run(const hg_graph_node *nodes, size_t num_nodes, const hg_buffer_ref *args, size_t num_args,
                 const hg_memory *memory, struct hg_device *const *devices, size_t num_devices,
                 const hg_graph_hook *hook);

/* vm runtime: a bytecode program of 32-bit words run by a small interpreter.
 *   CALL k n (region index offset_lo offset_hi)*n   call kernel k
 *   COPY src(4 words) dst(4 words) bytes_lo bytes_hi copy between buffers
 *   COPY_IN d src(4 words) dst_lo dst_hi bytes_lo bytes_hi     host buffer -> device d memory
 *   COPY_OUT d src_lo src_hi dst(4 words) bytes_lo bytes_hi    device d memory -> host buffer
 *   INVOKE d p                                 start sub-program p on device d
 *   WAIT d                                     wait for device d
 *   END
 * (enum hg_opcode: hg_constants.h) */

/* Every instruction is checked as it is read (opcode, word count, kernel and device indices,
 * regions, offsets and sizes); a corrupt program returns HG_ERR_BYTECODE. */
int hg_vm_run(const uint32_t *code, size_t code_words, const hg_kernel_fn *kernels, size_t num_kernels,
              const hg_memory *memory, struct hg_device *const *devices, size_t num_devices);

#endif /* HG_RUNTIME_H */
