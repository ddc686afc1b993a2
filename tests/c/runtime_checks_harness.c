/* Runs one VM program or graph node table from a file against exactly-sized memory, so that
 * AddressSanitizer sees any access outside it. Used by tests/test_runtime_checks.py.
 *
 * The file is little-endian uint32 words:
 *   kind (0 = vm, 1 = graph)
 *   arena_bytes weights_bytes
 *   num_inputs input_bytes... num_outputs output_bytes...
 *   num_kernels
 *   num_devices (device_memory_bytes device_programs)...
 *   num_program_words, then the program:
 *     vm:    the bytecode
 *     graph: num_nodes (op device fn first_arg num_args bytes_lo bytes_hi)...
 *            num_args (region index offset_lo offset_hi)...
 * Everything before the program describes the memory and is never mutated. The kernels and the
 * devices' programs do nothing (a kernel's extent is not in the program: the memory plan's
 * _Static_asserts cover it). Prints the status; exits 0 unless the file itself is malformed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hg_device.h"
#include "hg_runtime.h"
#include "hg_sim.h"

#define MAX_BUFFERS 64
#define MAX_DEVICES 8
#define MAX_KERNELS 256

static int kernel_calls;

static void harness_kernel(void *const *args)
{
    (void)args;
    ++kernel_calls;
}

static uint32_t *words;
static size_t num_words;
static size_t cursor;

static uint32_t next_word(void)
{
    if (cursor >= num_words) {
        fprintf(stderr, "harness: the file ends early\n");
        exit(2);
    }
    return words[cursor++];
}

static void *exact(uint64_t bytes)
{
    void *block = malloc(bytes ? (size_t)bytes : 1);
    memset(block, 0x5a, bytes ? (size_t)bytes : 1);
    return block;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PROGRAM\n", argv[0]);
        return 2;
    }
    FILE *file = fopen(argv[1], "rb");
    if (file == NULL) {
        return 2;
    }
    static uint32_t buffer[1 << 20];
    num_words = fread(buffer, 4, 1 << 20, file);
    fclose(file);
    words = buffer;

    const uint32_t kind = next_word();
    hg_memory memory;
    memory.arena_size = next_word();
    memory.arena = exact(memory.arena_size);
    memory.weights_size = next_word();
    memory.weights = exact(memory.weights_size);
    static void *inputs[MAX_BUFFERS];
    static void *outputs[MAX_BUFFERS];
    static uint64_t input_bytes[MAX_BUFFERS];
    static uint64_t output_bytes[MAX_BUFFERS];
    memory.num_inputs = next_word() % MAX_BUFFERS;
    for (size_t i = 0; i < memory.num_inputs; ++i) {
        input_bytes[i] = next_word();
        inputs[i] = exact(input_bytes[i]);
    }
    memory.num_outputs = next_word() % MAX_BUFFERS;
    for (size_t i = 0; i < memory.num_outputs; ++i) {
        output_bytes[i] = next_word();
        outputs[i] = exact(output_bytes[i]);
    }
    memory.inputs = (const void *const *)inputs;
    memory.input_bytes = input_bytes;
    memory.outputs = outputs;
    memory.output_bytes = output_bytes;

    static hg_kernel_fn kernels[MAX_KERNELS];
    const uint32_t num_kernels = next_word() % MAX_KERNELS;
    for (uint32_t k = 0; k < num_kernels; ++k) {
        kernels[k] = harness_kernel;
    }

    /* Each device: a simulated accelerator whose programs are empty command lists. */
    static const hg_graph_node no_nodes[1];
    static const hg_buffer_ref no_args[1];
    static hg_sim_program programs[MAX_DEVICES][16];
    static hg_sim_config configs[MAX_DEVICES];
    static struct hg_device devices[MAX_DEVICES];
    static struct hg_device *pointers[MAX_DEVICES];
    const uint32_t num_devices = next_word() % MAX_DEVICES;
    for (uint32_t d = 0; d < num_devices; ++d) {
        const uint32_t memory_bytes = next_word();
        const uint32_t num_programs = next_word() % 16;
        for (uint32_t p = 0; p < num_programs; ++p) {
            programs[d][p] = (hg_sim_program){ no_nodes, 0, no_args, 0, NULL, 0 };
        }
        configs[d] = (hg_sim_config){ .memory_offset = sizeof(hg_sim_state), .memory_size = memory_bytes,
                                      .capacity = memory_bytes, .weights = memory.weights,
                                      .weights_size = memory.weights_size, .programs = programs[d],
                                      .num_programs = num_programs,
                                      .params = { .dma_bytes_per_cycle = 1.0, .sram_bytes_per_cycle = 1.0 } };
        void *state = exact(sizeof(hg_sim_state) + memory_bytes);
        hg_sim_reset(state, &configs[d]);
        devices[d] = (struct hg_device){ &hg_sim_ops, &configs[d], state };
        pointers[d] = &devices[d];
    }

    const uint32_t program_words = next_word();
    const size_t available = num_words - cursor;
    const size_t length = program_words < available ? program_words : available;
    const uint32_t *program = words + cursor;
    int status;
    if (kind == 0) {
        /* An exactly-sized copy, so a read past the end is caught. */
        uint32_t *code = malloc((length ? length : 1) * 4);
        memcpy(code, program, length * 4);
        status = hg_vm_run(code, length, kernels, num_kernels, &memory, pointers, num_devices);
        free(code);
    } else {
        size_t at = 0;
        const size_t num_nodes = length > 0 ? program[at++] % 4096 : 0;
        const size_t nodes_fit = (length - at) / 7 < num_nodes ? (length - at) / 7 : num_nodes;
        hg_graph_node *nodes = malloc((nodes_fit ? nodes_fit : 1) * sizeof *nodes);
        for (size_t n = 0; n < nodes_fit; ++n, at += 7) {
            nodes[n].op = program[at];
            nodes[n].device = program[at + 1];
            nodes[n].fn = program[at + 2] < num_kernels ? kernels[program[at + 2]] : NULL;
            nodes[n].first_arg = program[at + 3];
            nodes[n].num_args = program[at + 4];
            nodes[n].bytes = (uint64_t)program[at + 5] | ((uint64_t)program[at + 6] << 32);
        }
        const size_t num_args = at < length ? program[at++] % 65536 : 0;
        const size_t args_fit = (length - at) / 4 < num_args ? (length - at) / 4 : num_args;
        hg_buffer_ref *args = malloc((args_fit ? args_fit : 1) * sizeof *args);
        for (size_t a = 0; a < args_fit; ++a, at += 4) {
            args[a].region = program[at];
            args[a].index = program[at + 1];
            args[a].offset = (uint64_t)program[at + 2] | ((uint64_t)program[at + 3] << 32);
        }
        status = hg_graph_run(nodes, nodes_fit, args, args_fit, &memory, pointers, num_devices, NULL);
        free(nodes);
        free(args);
    }
    printf("status %d kernels %d\n", status, kernel_calls);
    return 0;
}
