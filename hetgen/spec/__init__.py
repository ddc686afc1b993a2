"""The kernel table: every operator lowered once, before placement, into typed, frozen specs.

Entry point: `build_kernel_specs(graph, platform) -> KernelTable`. For each node it holds the spec
of the node as a kernel of its own, and for each head that can absorb activations (`fusion.py`) the
spec of every unit it can form: its nodes, resolved epilogue, the lowered kernel (or why the
operator cannot be lowered), the work the cost model prices (flops, bytes), the scratch the kernel
needs and the work descriptor a simulated accelerator counts; and, per accelerator with a bounded
SRAM, each unit's tiling there (`tiles.py`); and the multi-operator units a CPU controller runs as one
kernel (fused attention, a residual Add in a Conv: `patterns.py`), which placement prices as one
group and lowering emits for exactly such a group (a residual unit also on a tiled accelerator
whose pattern table offers it, with its tiling there). Placement reads costs and memory fit from it as data;
lowering takes its kernels and tilings from it; nothing re-runs an operator lowering or a tiling
to learn a number.
"""

from hetgen.spec.build import build_kernel_specs
from hetgen.spec.table import KernelSpec, KernelTable

__all__ = ["KernelSpec", "KernelTable", "build_kernel_specs"]
