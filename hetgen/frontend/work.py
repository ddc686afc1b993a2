"""The frontend's private working graph: mutable, with ONNX element types, turned into a Graph last.

The frontend's passes rewrite one model many times (folding, opset normalisation, cleanup,
pattern rewrites). They do it on this small mutable form, owned by one `import_model` call and never
seen outside the frontend; only `to_graph` produces the frozen `Graph` the rest of hetgen reads.
Element types stay ONNX codes here because folding may go through types hetgen does not generate
code for (a float16 weight cast to float32 is fine; a float16 tensor left in the graph is not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hetgen.ir import DType, Graph, Node, TensorType
from hetgen.names import c_identifier

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class ValueType:
    """A tensor's ONNX element type and static shape."""

    elem: int
    shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # Python ints: a hostile shape cannot wrap around

    @property
    def nbytes(self) -> int:
        return self.size * self.numpy.itemsize

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(self.elem))

    @property
    def label(self) -> str:
        return helper.tensor_dtype_to_string(self.elem).removeprefix("TensorProto.").lower()

    @classmethod
    def of(cls, array: np.ndarray) -> ValueType:
        return cls(helper.np_dtype_to_tensor_dtype(array.dtype), tuple(int(d) for d in array.shape))


@dataclass
class WorkNode:
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    domain: str = ""
    opset: int = 0  # version of its domain's opset whose semantics the node follows
    source_name: str = ""

    @property
    def is_default_domain(self) -> bool:
        return self.domain in DEFAULT_DOMAINS

    @property
    def label(self) -> str:
        return f"{self.op} '{self.source_name}'" if self.source_name else f"{self.op} (output {self.outputs[0]!r})"

    def derive(self, op: str, inputs, outputs, attrs=None, opset: int | None = None) -> WorkNode:
        """A node that replaces (part of) this one: same domain and source name."""
        return WorkNode(
            op, list(inputs), list(outputs), dict(attrs or {}), self.domain, opset or self.opset, self.source_name
        )


@dataclass
class Work:
    source: str  # how messages name the model: its file, or "model 'name'"
    name: str
    inputs: list[str]
    outputs: list[str]
    nodes: list[WorkNode]
    constants: dict[str, np.ndarray]
    types: dict[str, ValueType]
    opsets: dict[str, int]  # domain -> version imported by the model
    # folded constants much larger than what produced them: name -> (producing node, its input values)
    recipes: dict[str, tuple[WorkNode, dict[str, np.ndarray]]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)  # every tensor name the model uses (see fresh_name)
    source_names: set[str] = field(default_factory=set)  # the ONNX node names of the model as read

    @property
    def opset(self) -> int:
        return self.opsets.get("", 0)

    def fresh_name(self, base: str) -> str:
        """A tensor name not used anywhere in the model yet, derived from `base`; now reserved."""
        name, index = base, 0
        while name in self.names:
            index += 1
            name = f"{base}_{index}"
        self.names.add(name)
        return name

    def add_constant(self, base: str, value: np.ndarray) -> str:
        name = self.fresh_name(base)
        value = np.asarray(value)
        self.constants[name] = value
        self.types[name] = ValueType.of(value)
        return name

    def consumers(self) -> dict[str, list[WorkNode]]:
        users: dict[str, list[WorkNode]] = {}
        for node in self.nodes:
            for name in (*node.inputs, *subgraph_inputs(node)):
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def producers(self) -> dict[str, WorkNode]:
        return {out: node for node in self.nodes for out in node.outputs if out}


def subgraph_inputs(node: WorkNode) -> set[str]:
    """Outer-scope names that the node's subgraphs (If, Loop, Scan bodies) read."""
    names: set[str] = set()
    for value in node.attrs.values():
        graphs = [value] if isinstance(value, onnx.GraphProto) else []
        if isinstance(value, tuple):
            graphs = [v for v in value if isinstance(v, onnx.GraphProto)]
        for graph in graphs:
            local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
            for inner in graph.node:
                local.update(inner.output)
            for inner in graph.node:
                names.update(n for n in inner.input if n and n not in local)
    return names


def attr_value(attr: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
    return value


MAX_NAME_SUFFIX = 24


def node_name(index: int, node: WorkNode) -> str:
    """`n{index}_{op}`, plus the node's sanitised ONNX name when that is short."""
    name = f"n{index}_{c_identifier(node.op.lower(), 'op')}"
    suffix = c_identifier(node.source_name, "")
    if suffix and len(suffix) <= MAX_NAME_SUFFIX:
        name += f"_{suffix.lstrip('_')}"
    return name


def to_graph(work: Work, name: str) -> Graph:
    """The frozen Graph of a cleaned, fully typed working graph (dtypes already checked)."""
    types = {n: TensorType(DType.from_onnx(t.elem), t.shape) for n, t in work.types.items()}
    nodes = []
    for index, node in enumerate(work.nodes):
        nodes.append(
            Node(
                node_name(index, node),
                node.op,
                tuple(node.inputs),
                tuple(node.outputs),
                tuple(sorted(node.attrs.items())),
                node.source_name,
                node.opset,
            )
        )
    constants = {n: np.require(a, requirements="C") for n, a in work.constants.items()}
    removed = frozenset(work.source_names - {node.source_name for node in nodes})
    return Graph(
        name,
        tuple(work.inputs),
        tuple(work.outputs),
        tuple(nodes),
        types,
        constants,
        work.opset,
        work.source,
        removed,
    )


def to_attribute(name: str, value: Any) -> onnx.AttributeProto:
    """The AttributeProto of a working-graph attribute value (the inverse of `attr_value`)."""
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, tuple) and not value:
        return helper.make_attribute(name, [], attr_type=onnx.AttributeProto.INTS)
    return helper.make_attribute(name, list(value) if isinstance(value, tuple) else value)


def to_node_proto(node: WorkNode, name: str = "") -> onnx.NodeProto:
    proto = helper.make_node(node.op, node.inputs, node.outputs, name=name, domain=node.domain)
    proto.attribute.extend(to_attribute(k, v) for k, v in sorted(node.attrs.items()) if not k.startswith("_"))
    return proto
