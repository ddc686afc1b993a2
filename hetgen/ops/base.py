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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetgen.ir import Graph, Node, TensorType
from hetgen.ops._activation import FUSABLE_ACTIVATIONS, Epilogue
from hetgen.ops._gemm_plan import DEFAULT_BLOCKS, GemmBlocks
from hetgen.ops._parallel import SERIAL, Parallel
from hetgen.ops._unsupported import Unsupported

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
    template: str | None = None  # the template that lays the kernel out then, when it differs


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


@dataclass(frozen=True)
class OpDef:
    """One operator's entry in the registry."""

    op: str
    lower: Callable[[OpInstance], Kernel]
    # Output types for cases onnx shape inference leaves unknown; None = trust onnx.
    infer: Callable[[OpInstance], tuple[TensorType, ...]] | None = None
    fusable_epilogue: bool = False  # may absorb a following activation (see FUSABLE_ACTIVATIONS)
    # Inputs that must be known at compile time (Reshape's shape, Slice's starts, ...). The
    # frontend reports a clear error when one is not; the conformance backend freezes them.
    const_inputs: tuple[int, ...] = ()
