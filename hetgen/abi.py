"""The numbers Python and the C runtime share, declared once, here.

`hetgen/codegen/constants.py` writes them into `runtime/hg_constants.h` of every generated project
(and `templates/runtime/hg_constants.h`, the same bytes, for the runtime sources compiled on their
own); the C runtime includes that header instead of spelling a number itself. The stages import
these names from here: the VM's opcodes and the buffer regions (codegen), the simulator's engines
(the kernel table's work descriptors), its queue and wait-ring depths (lowering, tiling), the GEMM's
panels and thread split (the GEMM's packing and the cost model's threads) and the layout of
`hg_device_stats` (the loader, the board program's report).
"""

from __future__ import annotations

import enum


class Opcode(enum.IntEnum):
    """`enum hg_opcode`: the VM's bytecode and the graph node table both encode with these numbers."""

    END = 0
    CALL = 1
    COPY = 2
    COPY_IN = 3
    COPY_OUT = 4
    INVOKE = 5
    WAIT = 6

    @property
    def c_name(self) -> str:
        return f"HG_OP_{self.name}"


class Region(enum.Enum):
    """`enum hg_region`: where a buffer lives, as the runtimes see it."""

    NONE = 0  # an omitted optional input: NULL
    ARENA = 1  # offset into the target's workspace
    WEIGHTS = 2  # offset into the weights blob
    INPUT = 3  # index of a caller-provided input buffer
    OUTPUT = 4  # index of a caller-provided output buffer
    DEVICE = 5  # offset into a child device's local memory (device programs only)


class Engine(enum.Enum):
    """`enum hg_sim_engine`: the unit of a simulated device that executes a command (0: none)."""

    MAC_ARRAY = 1  # `batch` matrix products of m x n outputs over a depth of k
    VECTOR = 2  # m output elements, each reducing k taps (k = 1: elementwise)
    DMA = 3  # `bytes` moved between the device's weights and its local memory
    MAC_ARRAY_INT8 = 4  # as MAC_ARRAY, on int8 operands (the array's int8 columns: int8_mac_cols)
    # as MAC_ARRAY, then the vector unit adds a residual tensor to each of its batch x m x n outputs
    # (a Conv with its residual Add fused: hetgen/spec/patterns.py)
    MAC_ARRAY_RESIDUAL = 5
    # an SRAM-to-SRAM copy of m segments of n bytes, src_stride and dst_stride bytes apart (a
    # cascade's kept and new rows: hetgen/spec/cascade_program.py), on the compute side at the
    # engines' SRAM bandwidth
    MOVE = 6
    # as MAC_ARRAY_INT8, then the vector unit adds a residual to each output (a QLinearConv with its
    # QLinearAdd fused: requantized, added and requantized again, one element a lane)
    MAC_ARRAY_INT8_RESIDUAL = 7


# A device behind hg_device.h, a simulated one (hg_sim.c) or a co-processor (hg_coproc.c), queues at
# most this many invocations between two waits.
QUEUE_DEPTH = 16
# The devices one controller drives at most: the platform loader refuses more, so a co-processor's
# driver (hg_coproc.c) binds them in fixed arrays on its stack rather than variable-length ones.
MAX_DEVICES = 64
# The simulator remembers when the last WAIT_RING commands finished; a command waits for one of them
# (hg_sim_work.after < WAIT_RING; hetgen/spec/tiling.py plans within it).
WAIT_RING = 64

# A bare-metal board program (templates/baremetal/main.c.j2) reads its command line through
# semihosting into a static buffer of this many bytes, counted in its RAM: the host's side
# (hetgen/runtime/emulate.py) refuses a longer one (short temporary paths fit easily).
BOARD_COMMAND_LINE = 512

# The GEMM (hg_gemm.c): A panels of GEMM_PANEL_M rows, B panels of GEMM_PANEL_N columns (the packing
# contract with hetgen/ops/_gemm_plan.py, the same for every ISA); a product of fewer than
# GEMM_SPLIT_MACS multiply-adds runs on the caller's thread, a larger one is split between the pool's.
GEMM_PANEL_M = 8
GEMM_PANEL_N = 32
GEMM_SPLIT_MACS = 1 << 18
# ... into up to GEMM_PARTS_PER_THREAD parts per thread, each of at least GEMM_PART_MIN rows (or
# columns) per read of the operand every part reads again (A when it splits columns, B rows; a pack
# counts as three reads): the caller and the workers claim parts one at a time, so a worker the OS
# runs late leaves its parts to the others instead of making the caller wait for its one half, and
# each part's repeated read stays within one float per GEMM_PART_MIN multiply-adds.
GEMM_PARTS_PER_THREAD = 4
GEMM_PART_MIN = 64

# hg_device_stats: a simulated device's counters over the last run (cycles at its clock), uint64_t
# each, in this order; a co-processor behind a link counts only the link fields.
STATS_FIELDS: tuple[tuple[str, str], ...] = (
    ("compute_cycles", "kernels and weight loads"),
    ("load_cycles", "weight loads alone"),
    ("dma_cycles", "copies to and from the controller"),
    ("invocations", ""),
    ("invoke_cycles", "each invocation's overhead: driver, doorbell, completion interrupt"),
    ("link_cycles", "copies over the link from the controller: its latency, then its bandwidth"),
    ("link_bytes", ""),
    ("link_copies", ""),
    ("dma_bytes", "bytes the DMA engine moved for the device's own commands (tile and cascade loads and stores)"),
)
STATS_NAMES: tuple[str, ...] = tuple(name for name, _ in STATS_FIELDS)

# hg_frames_stats: what a root's `_run_frames` did with its device workers (hg_frames.c), uint64_t
# each, in this order.
FRAMES_STATS_FIELDS: tuple[tuple[str, str], ...] = (
    ("workers", "device worker threads started (0: no threads here; the root ran every device itself)"),
    ("jobs", "batches of invocations the workers ran, each behind a fence of its frame"),
    ("overlapped_jobs", "of them, those during which the root went on with its own work (not blocked on a fence)"),
    ("root_waits", "waits of the root that blocked on a device's fence"),
    ("root_cpu_ns", "CPU time of the root's thread over the call (0: no threads here)"),
    ("busiest_worker_cpu_ns", "CPU time of the busiest device worker over the call"),
)
FRAMES_STATS_NAMES: tuple[str, ...] = tuple(name for name, _ in FRAMES_STATS_FIELDS)
