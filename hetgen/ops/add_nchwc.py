"""A residual Add on blocked channels (NCHW[V]c) where it is not fused into the Conv before it.

hetgen/lower/blocked_layout.py runs an Add blocked when both operands are blocked with the same
width and have the output's shape (no broadcasting): the sum of two blocked tensors, element by
element over the whole buffer (padded channels included: their values are finite, and no reader
uses them), with its fused activations.
"""

from __future__ import annotations

from hetgen.ir import DType
from hetgen.ops import _parallel
from hetgen.ops._common import input_arg_count
from hetgen.ops.base import Kernel, OpInstance
from hetgen.ops.conv_nchwc import POOL_HELPER, REORDER_TASK_BYTES, blocked_shape, task_count

# A task adds at least this many floats (a multiple of every block width, so tasks end on vectors).
CHUNK = 4096


def blockable(op: OpInstance) -> bool:
    """Add of two rank-4 float32 tensors of the output's shape."""
    if op.node.op != "Add" or len(op.input_types) != 2:
        return False
    y_type = op.output_types[0]
    return all(
        t is not None and t.rank == 4 and t.dtype is DType.FLOAT32 and t.shape == y_type.shape
        for t in (*op.input_types, y_type)
    )


def lower(op: OpInstance, v: int) -> Kernel:
    y_type = op.output_types[0]
    size = 1
    for extent in blocked_shape(tuple(y_type.shape), v):
        size *= extent
    chunks = -(-size // CHUNK)
    tasks = task_count(chunks, 12 * size // REORDER_TASK_BYTES)
    params = {
        "V": v,
        "size": size,
        "chunks": chunks,
        "chunk": CHUNK,
        "tasks": tasks,
        "out_index": input_arg_count(op),
        "epilogue": op.epilogue,
    }
    return Kernel(
        template="kernels/add_nchwc.c.j2",
        params=params,
        flops=size,
        bytes_accessed=12 * size,
        helpers=(POOL_HELPER,) if tasks > 1 else (),
        parallel=_parallel.tasks_of(tasks),
    )
