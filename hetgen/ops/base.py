"""The contract between an operator lowering and the rest of hetgen.

Each operator has one small module in `hetgen/ops/` with a `lower(op: OpInstance) -> Kernel`
function, registered in `hetgen/ops/registry.py`. The lowering decides everything (loop bounds,
strides, which template variant); its Jinja template under `templates/kernels/` only lays it out.

Every generated kernel is a C function `void <fn>(void *const *args)`. `args` holds, in order, one
pointer per node input (NULL for an omitted optional input), one per node output, and, when
`Kernel.scratch_bytes > 0`, a scratch buffer last. The uniform signature lets the `graph` and `vm`
runtimes call any kernel from a table.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetgen.ir import Graph, Node, TensorType
from hetgen.ops._activation import FUSABLE_ACTIVATIONS, Epilogue
from hetgen.ops._gemm_plan import DEFAULT_BLOCKS, GemmBlocks
from hetgen.ops._parallel import SERIAL, Parallel
from hetgen.ops._unsupported import Unsupported
from hetgen.ops.registers import VectorRegisters

__all__ = ["FUSABLE_ACTIVATIONS", "Epilogue", "Unsupported"]  # defined beside what they need, named here as before


@dataclass(frozen=True)
class OpInstance:
    """What a lowering sees: the node, its static types, compile-time constants, fused epilogue."""

    node: Node
    input_types: tuple[TensorType | None, ...]  # None for an omitted optional input
    output_types: tuple[TensorType, ...]
    constants: tuple[np.ndarray | None, ...]  # the value of each input known at compile time
    epilogue: tuple[Epilogue, ...] = ()
    # the GEMM's cache blocks on the CPU that runs it (the platform's `options.tuning`); sizes workspaces
    gemm_blocks: GemmBlocks = DEFAULT_BLOCKS

    @classmethod
    def of(cls, node: Node, graph: Graph, epilogue: tuple[Epilogue, ...] = (), outputs: tuple[str, ...] | None = None):
        """The instance of `node` in `graph`: its tensor types and constant inputs.

        `outputs` overrides the node's outputs (a fused unit writes its last activation's output)."""
        return cls(
            node=node,
            input_types=tuple(graph.types.get(name) if name else None for name in node.inputs),
            output_types=tuple(graph.types[name] for name in (node.outputs if outputs is None else outputs) if name),
            constants=tuple(graph.constants.get(name) if name else None for name in node.inputs),
            epilogue=epilogue,
        )

    def attr(self, key: str, default: Any = None) -> Any:
        return self.node.attr(key, default)

    def constant(self, index: int) -> np.ndarray | None:
        return self.constants[index] if index < len(self.constants) else None

    def has_input(self, index: int) -> bool:
        return index < len(self.node.inputs) and bool(self.node.inputs[index])


@dataclass(frozen=True)
class Prepacked:
    """A constant input that the kernel reads faster in a layout of its own, made at generate time.

    Lowering applies it where the unit runs on a CPU controller (accelerators load weights as the
    model has them): the input becomes `layout(value)` and the template gets `params` on top of
    the kernel's own. `layout` runs only then, so lowering for the cost model stays cheap. Offers for
    the same input are alternatives, the preferred first (hetgen/lower/prepack.py takes one)."""

    index: int  # which input
    layout: Callable[[np.ndarray], np.ndarray]  # the model's value -> the kernel's (float32) array
    params: Mapping[str, Any] = field(default_factory=dict)
    scratch_bytes: int | None = None  # the workspace the kernel needs then, when it differs
    # Bytes of workspace the offer frees from the kernel's (after `scratch_bytes`), where offers for
    # several inputs each free a region of their own (hetgen/ops/recurrent.py: W's and R's)
    scratch_saved: int = 0
    template: str | None = None  # the template that lays the kernel out then, when it differs
    # Taken on bare-metal targets only (never offered elsewhere): a kernel that reads the model's
    # layout where it is linked (flash) instead of packing it at run time (hetgen/ops/_in_place.py)
    bare_metal_only: bool = False
    # Taken on application cores only (never on bare metal): the packed int8 kernels, whose SIMD
    # paths (hg_qgemm.h) a Cortex-M lacks; its own in-place kernels are faster there
    hosted_only: bool = False
    # Taken only on CPUs with this register file (hetgen/platform/registers.py), where the kernel's
    # register blocking depends on it (hetgen/ops/_conv_small.py); None: on every CPU
    registers: VectorRegisters | None = None


@dataclass(frozen=True)
class Kernel:
    """A lowered operator: which template renders it and the view-model the template needs."""

    template: str  # path under templates/, e.g. "kernels/conv.c.j2"
    params: Mapping[str, Any] = field(default_factory=dict)
    scratch_bytes: int = 0  # workspace the kernel needs (im2col, transposes); passed last in args
    flops: int = 0  # arithmetic operations, for the cost model
    bytes_accessed: int = 0  # bytes read + written, for the cost model
    helpers: tuple[str, ...] = ()  # shared C sources under templates/runtime/ the kernel calls
    prepacked: tuple[Prepacked, ...] = ()  # constant inputs it can read in a generate-time layout
    parallel: Parallel = SERIAL  # how it shares the worker pool (hetgen/ops/_parallel.py), for the cost model


class WorkRule(enum.Enum):
    """How the device model shapes one call of the operator (hetgen/spec/work.py `shape_work`)."""

    VECTOR = "vector"  # the vector unit, one tap per output element (elementwise and the rest)
    CONV = "conv"  # the MAC array: groups x output pixels x output channels over the receptive field
    GEMM = "gemm"  # the MAC array: one 2-D product (transA decides the depth)
    MATMUL = "matmul"  # the MAC array: numpy's batched product
    WINDOW = "window"  # the vector unit, `kernel_shape` taps per output element
    GLOBAL = "global"  # the vector unit, every spatial element of input 0 per output element

    @property
    def mac(self) -> bool:
        return self in (WorkRule.CONV, WorkRule.GEMM, WorkRule.MATMUL)


class Tiling(enum.Enum):
    """How the device model may split the operator into tiles besides running it whole
    (hetgen/spec/tile_shapes.py `candidates`; instances with one output only; block sizes follow
    each tensor's element type, and an integer product's operands its `integer_mac` trait)."""

    WHOLE = "whole"  # one tile
    WINDOW = "window"  # a 4-D sliding window (Conv, window pools): rows and channels
    CHANNELS = "channels"  # a 4-D global pool: channel ranges
    MATRIX = "matrix"  # a 2-D product: rows, columns and depth
    CHUNKS = "chunks"  # elementwise on same-shaped (or scalar) operands: contiguous chunks


@dataclass(frozen=True)
class IntegerMac:
    """An integer kernel computing a float operator's product on int8 operands (the MAC array's
    int8 columns): the float operator whose shape rule it shares, and its (x, w) input indices."""

    like: str  # "Conv" or "MatMul"
    x: int
    w: int
    # Inputs holding one value per output channel (Conv) or column (MatMul) of the product, or one
    # for all (a bias, the weights' scale and zero point): a tile of output channels or columns
    # reads its slice of them (hetgen/spec/tile_shapes.py).
    per_channel: tuple[int, ...] = ()
    # Inputs holding one value per row of x (MatMul's A zero point), or one for all: a tile of rows
    # reads its slice. Every other input of the operator is one value (a scale, a zero point).
    per_row: tuple[int, ...] = ()


@dataclass(frozen=True)
class ResidualAdd:
    """A residual Add the operator's kernel can do in its epilogue (hetgen/spec/patterns.py forms the
    unit): the operator of that Add, and the input the kernel reads the Add's other operand from.
    A quantized Add's other operand comes with its scale and zero point, then the sum's scale and
    zero point (`QUANTIZED_OPERANDS` inputs in all, from `input` on)."""

    add: str  # "Add" (after a Conv) or "QLinearAdd" (after a QLinearConv)
    input: int  # after the operator's own inputs (omitted optional ones read as "")

    QUANTIZED_OPERANDS = 5  # the residual, its scale and zero point, the sum's scale and zero point

    @property
    def quantized(self) -> bool:
        return self.add != "Add"

    @property
    def operands(self) -> int:
        """How many inputs the fused kernel reads from `input` on."""
        return self.QUANTIZED_OPERANDS if self.quantized else 1


@dataclass(frozen=True)
class InputRoles:
    """What an integer model input may hold when it reaches this operator (hetgen/runtime/inputs.py
    keeps seeded random inputs valid)."""

    carries: str = ""  # "first": the output carries input 0's values on; "all": every input's
    indices: int | None = None  # the input that indexes input 0 (its values stay below the axis)
    indexed_axis: str | None = None  # the attribute naming that axis (None: the leading axes)
    divisor: int | None = None  # the input that divides (its values stay non-zero)


NO_ROLES = InputRoles()
CARRIES = InputRoles("first")  # reshapes, casts, copies: an index stays an index through them


@dataclass(frozen=True)
class Expanded:
    """An operator hetgen compiles through its ONNX function body (or one hetgen writes): the
    frontend replaces its nodes by the body's registered primitives (hetgen/frontend/functions.py)."""

    op: str
    const_inputs: tuple[int, ...] = ()  # inputs that must be known at compile time (they set an output's shape)


@dataclass(frozen=True)
class OpDef:
    """One operator's entry in the registry, with the facts other stages ask of it (its traits).

    Every trait has a default that most operators keep; docs/operators.md says which stage reads
    which."""

    op: str
    lower: Callable[[OpInstance], Kernel]
    # Output types for cases onnx shape inference leaves unknown; None = trust onnx.
    infer: Callable[[OpInstance], tuple[TensorType, ...]] | None = None
    fusable_epilogue: bool = False  # may absorb a following activation (see FUSABLE_ACTIVATIONS)
    # Inputs that must be known at compile time (Reshape's shape, Slice's starts, ...). The
    # frontend reports a clear error when one is not; the conformance backend freezes them.
    const_inputs: tuple[int, ...] = ()
    # -- traits --
    # The input holding a weight with spatial kernel dimensions (O, I, kH, kW...): platform
    # predicates read its kernel size and the node's `group` (hetgen/partition/predicates.py).
    weight_input: int | None = None
    # The output is input 0's bytes unchanged: lowering makes it a second name for the same buffer
    # and the cost model prices it as nothing (hetgen/spec/alias.py).
    alias: bool = False
    # Each output's element offset in input 0 where it is one contiguous run of input 0's elements
    # (None for one that is not): a reader may read it there, and the operator run nothing
    # (hetgen/spec/split_view.py; Split, Slice).
    ranges: Callable[[OpInstance], tuple[int | None, ...]] | None = None
    # The output is input 0's elements moved: applied to an array of input 0's shape, gives the
    # output (Transpose; an `alias` moves nothing). hetgen/frontend/fold_shuffle.py follows a chain of
    # them on element indices to find a channel permutation a convolution can absorb.
    moved: Callable[[OpInstance, np.ndarray], np.ndarray] | None = None
    integer_mac: IntegerMac | None = None  # an int8 product on the MAC array (hetgen/spec/work.py, invocation.py)
    residual: ResidualAdd | None = None  # a residual Add its kernel may fuse (hetgen/spec/patterns.py)
    # Elementwise on one rank-4 activation (its other inputs one value each): a cascade may run it
    # as a 1x1 window, stripe by stripe into the convolution after it (hetgen/spec/tile_shapes.py
    # `rowwise`). Declared where a cascade of it is tested (QuantizeLinear: tests/test_npu_int8_tiling.py).
    rowwise: bool = False
    work: WorkRule = WorkRule.VECTOR  # the device model's shape of one call
    tiling: Tiling = Tiling.WHOLE  # how the device model may tile it
    input_roles: InputRoles = NO_ROLES
    # Outputs from this index on are optional: the frontend drops trailing ones nothing reads
    # (hetgen/frontend/cleanup.py).
    optional_outputs_from: int | None = None
    # The output's length is known only at run time, up to a static bound (hetgen/bounded.py): the
    # frontend adds its actual shape as a second output (hetgen/frontend/bounded.py).
    bounded: bool = False
    # Lowered through its float32 kernel, converting float16 inputs and outputs at the kernel's
    # boundary (hetgen/ops/_float16.py); False where it handles float16 itself (Cast) or has none
    # (the quantized operators).
    float16_boundary: bool = True
    domain: str = ""  # the ONNX domain it is exported in (hetgen/frontend/export.py); "" is ONNX's own
    # Only selects or moves elements: on a quantized tensor it gives what quantizing its float result
    # gives when its inputs and output share one scale and zero point, so a QDQ island runs it on the
    # integers (hetgen/frontend/qdq_islands.py).
    quantized_passthrough: bool = False
    # The opset since which the axes are a constant input 1, not an attribute: the frontend rewrites
    # the older form (hetgen/frontend/normalize.py); None where the axes never were an attribute.
    axes_input_since: int | None = None
    # -- versions --
    # The first opset (of `domain`) whose semantics `lower` implements. An operator whose meaning
    # changed with an opset has one entry per meaning, each with its `since` and the same traits
    # (an opset changes the lowering, not the facts); the registry picks the entry for a node's
    # opset (hetgen/ops/registry.py `op_def`).
    since: int = 1

    @property
    def mac(self) -> bool:
        """Runs on the MAC array (float or int8)."""
        return self.work.mac or self.integer_mac is not None
