/* hetgen graph executor: walks a static node table, resolving each node's arguments. */
#include "hg_runtime.h"

int hg_graph_run(const hg_graph_node *nodes, size_t num_nodes, const hg_buffer_ref *args,
                 const hg_memory *memory)
{
    void *resolved[HG_MAX_ARGS];
    for (size_t n = 0; n < num_nodes; ++n) {
        const hg_graph_node *node = &nodes[n];
        if (node->num_args > HG_MAX_ARGS) {
            return HG_ERR_BYTECODE;
        }
        for (uint32_t a = 0; a < node->num_args; ++a) {
            resolved[a] = hg_resolve(memory, args[node->first_arg + a]);
        }
        node->fn(resolved);
    }
    return HG_OK;
}
