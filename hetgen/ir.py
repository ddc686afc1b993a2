"""The graph IR: typed tensors with static shapes, nodes in topological order, folded constants.

Produced by `hetgen.frontend`, consumed by every later stage. Values are frozen; a transform returns
a new Graph. `Graph.verify()` is the cheap invariant check run between stages.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from hetgen.errors import InternalError


class DType(enum.Enum):
    """Element types hetgen generates code for; value = (name, C type, numpy dtype, ONNX code)."""

    FLOAT32 = ("float32", "float", np.float32, 1)
    UINT8 = ("uint8", "uint8_t", np.uint8, 2)
    INT8 = ("int8", "int8_t", np.int8, 3)
    INT32 = ("int32", "int32_t", np.int32, 6)
    INT64 = ("int64", "int64_t", np.int64, 7)
    BOOL = ("bool", "uint8_t", np.bool_, 9)
    FLOAT64 = ("float64", "double", np.float64, 11)
    FLOAT16 = ("float16", "uint16_t", np.float16, 10)  # stored as its bits; kernels compute in float32
    INT16 = ("int16", "int16_t", np.int16, 5)
    UINT16 = ("uint16", "uint16_t", np.uint16, 4)
    UINT32 = ("uint32", "uint32_t", np.uint32, 12)
    UINT64 = ("uint64", "uint64_t", np.uint64, 13)

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def c_type(self) -> str:
        return self.value[1]

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value[2])

    @property
    def onnx_code(self) -> int:
        return self.value[3]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT64)

    @classmethod
    def from_onnx(cls, code: int) -> DType | None:
        for dtype in cls:
            if dtype.onnx_code == code:
                return dtype
        return None

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DType | None:
        for member in cls:
            if member.numpy == np.dtype(dtype):
                return member
        return None


# The most dimensions a tensor may have: `hg_tensor_info` describes each program input and output
# in `int64_t shape[HG_MAX_RANK]` (templates/runtime/hg_runtime.h; tests/test_onnx_checks.py
# compiles a check that both agree). The frontend refuses a model with a larger rank.
MAX_RANK = 8


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.label}[{'x'.join(map(str, self.shape))}]"


AttrValue = Any  # int | float | str | tuple[int|float|str, ...] | np.ndarray (tensor attributes)


@dataclass(frozen=True)
class Node:
    """One ONNX operator. `name` is unique in the graph and a valid C identifier."""

    name: str
    op: str
    inputs: tuple[str, ...]  # "" marks an omitted optional input
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    source_name: str = ""  # the node's name in the ONNX file, for messages
    # The version of its domain's opset whose semantics the node follows (hetgen/frontend/normalize.py);
    # the registry picks the operator's entry for it (hetgen/ops/registry.py `op_def`). None: the newest.
    opset: int | None = None

    def attr(self, key: str, default: AttrValue = None) -> AttrValue:
        for name, value in self.attrs:
            if name == key:
                return value
        return default

    def has_attr(self, key: str) -> bool:
        return any(name == key for name, _ in self.attrs)

    @property
    def label(self) -> str:
        """How messages refer to the node: its ONNX name when it has one."""
        return f"{self.op} '{self.source_name}'" if self.source_name else f"{self.op} ({self.name})"


def _frozen_mapping(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Graph:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]  # topological order
    types: Mapping[str, TensorType]  # every tensor: inputs, constants, intermediates, outputs
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)  # read-only arrays
    opset: int = 17
    source: str = ""  # how messages name the model: its file, or "model 'name'"
    # ONNX node names of the model that no node carries any more: folded into constants or into
    # another operator, or removed (Identity, Dropout, dead code); a pin naming one is told so.
    removed_sources: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "types", _frozen_mapping(self.types))
        for array in self.constants.values():
            array.setflags(write=False)
        object.__setattr__(self, "constants", _frozen_mapping(self.constants))

    def type_of(self, name: str) -> TensorType:
        return self.types[name]

    def is_constant(self, name: str) -> bool:
        return name in self.constants

    def producers(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def verify(self) -> Graph:
        """Check the IR's invariants; raise InternalError (a hetgen bug) when one is broken."""
        known = set(self.inputs) | set(self.constants)
        names: set[str] = set()
        for node in self.nodes:
            if node.name in names:
                raise InternalError(f"duplicate node name {node.name}")
            names.add(node.name)
            for name in node.inputs:
                if name and name not in known:
                    raise InternalError(f"{node.label} reads {name!r} before it is produced")
            for name in node.outputs:
                if name:
                    if name not in self.types:
                        raise InternalError(f"{node.label} output {name!r} has no type")
                    known.add(name)
        for name in self.outputs:
            if name not in known:
                raise InternalError(f"graph output {name!r} is never produced")
        for name, array in self.constants.items():
            tensor_type = self.types.get(name)
            if tensor_type is None or tuple(array.shape) != tensor_type.shape:
                raise InternalError(f"constant {name!r} does not match its type {tensor_type}")
        return self
