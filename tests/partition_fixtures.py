"""Small platforms and graphs for the partition tests and the placement benchmark.

Platforms are built directly as `Platform`/`Target`/`Kind` values (no YAML loader), graphs directly
as `Graph` values (no ONNX frontend), so these tests only exercise the partition stage.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hetgen.ir import DType, Graph, Node, TensorType
from hetgen.platform.model import (
    CostFigures,
    Kind,
    Link,
    Pattern,
    PatternStep,
    Platform,
    Role,
    Runtime,
    Target,
    Toolchain,
)

CPU = CostFigures(peak_gflops=20.0, bandwidth_gbps=10.0, launch_us=1.0)
RISCV = CostFigures(peak_gflops=4.0, bandwidth_gbps=4.0, launch_us=2.0)
NPU = CostFigures(peak_gflops=500.0, bandwidth_gbps=50.0, launch_us=5.0)
DSP = CostFigures(peak_gflops=80.0, bandwidth_gbps=20.0, launch_us=3.0)
NPU_LINK = Link(bandwidth_gbps=8.0, latency_us=10.0)


def pattern(label: str, *steps: str, where: Mapping[str, Any] | None = None, efficiency: float = 1.0) -> Pattern:
    """`pattern("conv_relu", "Conv", "Relu?")`: a step is `Op|Op...`, a trailing `?` makes it optional."""
    chain = tuple(PatternStep(tuple(step.rstrip("?").split("|")), optional=step.endswith("?")) for step in steps)
    return Pattern(label, chain, dict(where or {}), efficiency)


NPU_PATTERNS = (
    pattern("conv_relu", "Conv", "Relu?", where={"dtype": ["float32"], "max_kernel": 7}),
    pattern("add_relu", "Add", "Relu?", where={"dtype": ["float32"]}),
    pattern("matmul", "MatMul", "Relu?", where={"dtype": ["float32"]}, efficiency=0.8),
)
DSP_PATTERNS = (
    pattern("eltwise", "Add|Mul|Relu|Sigmoid"),
    pattern("conv", "Conv", where={"max_kernel": 3}, efficiency=0.5),
)


def kind(name: str, role: Role, patterns: Sequence[Pattern] = ()) -> Kind:
    return Kind(name=name, role=role, patterns=tuple(patterns))


def target(
    path: Sequence[str],
    kind_: Kind,
    figures: CostFigures = CPU,
    *,
    devices: Sequence[Target] = (),
    host: Target | None = None,
    link: Link | None = None,
    memory_bytes: int | None = None,
) -> Target:
    runtime = Runtime.VM if kind_.role is Role.CONTROLLER else None
    return Target(
        name=path[-1],
        path=tuple(path),
        kind=kind_,
        attrs={},
        figures=figures,
        toolchain=Toolchain(),
        runtime=runtime,
        host=host,
        devices=tuple(devices),
        link=link,
        memory_bytes=memory_bytes,
    )


def soc(
    *,
    link_gbps: float = 4.0,
    latency_us: float = 20.0,
    npu_link: Link | None = None,
    npu_memory: int | None = 512 * 1024,
    npu_patterns: Sequence[Pattern] = NPU_PATTERNS,
    npu_figures: CostFigures = NPU,
    options: Mapping[str, Any] | None = None,
) -> Platform:
    """soc (aarch64, vm) -> vdevice0 (accelerator-with-coprocessor: riscv64 host) -> npu0."""
    npu = target(
        ("soc", "vdevice0", "npu0"),
        kind("npu", Role.ACCELERATOR, npu_patterns),
        npu_figures,
        link=npu_link,
        memory_bytes=npu_memory,
    )
    host = target(("soc", "vdevice0", "host"), kind("riscv64", Role.CONTROLLER), RISCV)
    vdevice = target(
        ("soc", "vdevice0"),
        kind("accelerator-with-coprocessor", Role.COMPOSITE),
        CPU,
        host=host,
        devices=(npu,),
        link=Link(bandwidth_gbps=link_gbps, latency_us=latency_us),
    )
    root = target(("soc",), kind("aarch64", Role.CONTROLLER), CPU, devices=(vdevice,))
    return Platform(name="soc", file="<test>", root=root, options=dict(options or {}))


def flat(
    *,
    npu_link: Link | None = NPU_LINK,
    dsp_link: Link | None = None,
    npu_patterns: Sequence[Pattern] = NPU_PATTERNS,
    npu_memory: int | None = None,
    with_dsp: bool = True,
    cpu_patterns: Sequence[Pattern] = (),
    npu_figures: CostFigures = NPU,
) -> Platform:
    """cpu (controller) driving npu (over `npu_link`) and, optionally, dsp (over `dsp_link`)."""
    devices = [
        target(
            ("cpu", "npu"),
            kind("npu", Role.ACCELERATOR, npu_patterns),
            npu_figures,
            link=npu_link,
            memory_bytes=npu_memory,
        )
    ]
    if with_dsp:
        devices.append(target(("cpu", "dsp"), kind("dsp", Role.ACCELERATOR, DSP_PATTERNS), DSP, link=dsp_link))
    root = target(("cpu",), kind("cpu", Role.CONTROLLER, cpu_patterns), CPU, devices=devices)
    return Platform(name="flat", file="<test>", root=root)


class GraphBuilder:
    """Builds a Graph node by node; weights are zero-stride arrays so big graphs stay cheap."""

    def __init__(self, name: str = "model", dtype: DType = DType.FLOAT32):
        self.name, self.dtype = name, dtype
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.nodes: list[Node] = []
        self.types: dict[str, TensorType] = {}
        self.constants: dict[str, np.ndarray] = {}

    def input(self, name: str, shape: Sequence[int], dtype: DType | None = None) -> str:
        self.inputs.append(name)
        self.types[name] = TensorType(dtype or self.dtype, tuple(shape))
        return name

    def constant(self, name: str, shape: Sequence[int], dtype: DType | None = None) -> str:
        dtype = dtype or self.dtype
        self.types[name] = TensorType(dtype, tuple(shape))
        self.constants[name] = np.broadcast_to(np.zeros((), dtype.numpy), tuple(shape))
        return name

    def node(
        self, op: str, inputs: Sequence[str], shape: Sequence[int], *, attrs=(), source: str = "", dtype=None
    ) -> str:
        name = f"{op.lower()}{len(self.nodes)}"
        output = f"{name}_out"
        self.types[output] = TensorType(dtype or self.types[inputs[0]].dtype, tuple(shape))
        self.nodes.append(Node(name, op, tuple(inputs), (output,), tuple(attrs), source))
        return output

    def conv(self, x: str, channels: int, kernel: int = 3, *, group: int = 1, source: str = "") -> str:
        n, c, h, w = self.types[x].shape
        weight = self.constant(f"w{len(self.nodes)}", (channels, c // group, kernel, kernel), self.types[x].dtype)
        pad = kernel // 2
        attrs = (("kernel_shape", (kernel, kernel)), ("pads", (pad,) * 4), ("group", group))
        return self.node("Conv", (x, weight), (n, channels, h, w), attrs=attrs, source=source)

    def unary(self, op: str, x: str, source: str = "") -> str:
        return self.node(op, (x,), self.types[x].shape, source=source)

    def binary(self, op: str, a: str, b: str, source: str = "") -> str:
        return self.node(op, (a, b), self.types[a].shape, source=source)

    def matmul(self, x: str, columns: int, *, bias: bool = False) -> str:
        *batch, rows, inner = self.types[x].shape
        weight = self.constant(f"w{len(self.nodes)}", (inner, columns))
        y = self.node("MatMul", (x, weight), (*batch, rows, columns))
        if bias:
            y = self.node("Add", (y, self.constant(f"b{len(self.nodes)}", (columns,))), (*batch, rows, columns))
        return y

    def layer_norm(self, x: str) -> str:
        """LayerNormalization over the last axis, with its (required) scale and a bias."""
        dim = self.types[x].shape[-1]
        scale, bias = (self.constant(f"{what}{len(self.nodes)}", (dim,)) for what in ("s", "b"))
        return self.node("LayerNormalization", (x, scale, bias), self.types[x].shape)

    def output(self, name: str) -> str:
        self.outputs.append(name)
        return name

    def build(self) -> Graph:
        return Graph(self.name, tuple(self.inputs), tuple(self.outputs), tuple(self.nodes), self.types, self.constants)


def conv_relu_net(layers: int = 3, channels: int = 8, size: int = 8) -> Graph:
    b = GraphBuilder("convnet")
    x = b.input("x", (1, channels, size, size))
    for _ in range(layers):
        x = b.unary("Relu", b.conv(x, channels))
    b.output(x)
    return b.build()


def residual_net(blocks: int, channels: int = 32, size: int = 28) -> Graph:
    """Conv-Relu-Conv-Add-Relu residual blocks: 5 nodes each."""
    b = GraphBuilder("resnet")
    x = b.input("x", (1, channels, size, size))
    for _ in range(blocks):
        y = b.unary("Relu", b.conv(x, channels))
        y = b.conv(y, channels)
        x = b.unary("Relu", b.binary("Add", y, x))
    b.output(x)
    return b.build()


def transformer(layers: int, seq: int = 64, dim: int = 128) -> Graph:
    """Attention (Q/K/V projections, scores, softmax, context) and an MLP, with residuals: 21 nodes a layer."""
    b = GraphBuilder("transformer")
    x = b.input("x", (seq, dim))
    for _ in range(layers):
        q, k, v = (b.matmul(x, dim, bias=True) for _ in range(3))
        kt = b.node("Transpose", (k,), (dim, seq), attrs=(("perm", (1, 0)),))
        scores = b.unary("Softmax", b.node("MatMul", (q, kt), (seq, seq)))
        context = b.node("MatMul", (scores, v), (seq, dim))
        x = b.layer_norm(b.binary("Add", b.matmul(context, dim, bias=True), x))
        hidden = b.unary("Relu", b.matmul(x, 4 * dim, bias=True))
        x = b.layer_norm(b.binary("Add", b.matmul(hidden, dim, bias=True), x))
    b.output(x)
    return b.build()


def random_dag(rng: random.Random, size: int) -> Graph:
    """A random DAG of `size` nodes over same-shaped tensors: fan-out, joins, mid-graph outputs."""
    channels, spatial = rng.choice((4, 8, 16, 32)), rng.choice((4, 8, 16, 32))
    b = GraphBuilder(f"random{size}")
    pool = [b.input(f"x{k}", (1, channels, spatial, spatial)) for k in range(rng.choice((1, 1, 2)))]
    for _ in range(size):
        recent = pool[-3:]
        op = rng.choice(("Conv", "Conv", "Relu", "Relu", "Add", "Add", "Mul", "Sigmoid"))
        if op == "Conv":
            out = b.conv(rng.choice(recent), channels, rng.choice((1, 3, 5)))
        elif op in ("Add", "Mul"):
            out = b.binary(op, rng.choice(recent), rng.choice(pool))
        else:  # mostly right after the last node, so chains (Conv -> Relu) form and fuse
            out = b.unary(op, pool[-1] if rng.random() < 0.7 else rng.choice(recent))
        pool.append(out)
    read = {name for node in b.nodes for name in node.inputs}
    for name in pool[len(b.inputs) :]:
        if name not in read or rng.random() < 0.15:
            b.output(name)
    return b.build()


def random_platform(rng: random.Random) -> Platform:
    """One of three platform shapes with random links and accelerator speeds."""

    def link() -> Link:
        return Link(bandwidth_gbps=rng.choice((0.05, 0.5, 4.0, 40.0)), latency_us=rng.choice((0.5, 5.0, 50.0)))

    npu_figures = CostFigures(rng.choice((50.0, 500.0)), rng.choice((5.0, 50.0)), rng.choice((0.5, 5.0)))
    choice = rng.choice(("flat3", "flat2", "soc"))
    if choice == "flat3":
        return flat(npu_link=link(), dsp_link=rng.choice((None, link())), npu_figures=npu_figures)
    if choice == "flat2":
        cpu_patterns = (pattern("add_relu_cpu", "Add", "Relu", efficiency=2.0),)
        return flat(npu_link=link(), with_dsp=False, cpu_patterns=cpu_patterns, npu_figures=npu_figures)
    return soc(
        link_gbps=rng.choice((0.5, 4.0, 40.0)),
        latency_us=rng.choice((1.0, 20.0)),
        npu_link=rng.choice((None, link())),
        npu_figures=npu_figures,
    )


def wide_dag(nodes: int, branches: int, *, channels: int = 32, size: int = 28, depth: int = 4) -> Graph:
    """Inception-like stages: `branches` parallel Conv-Relu chains of `depth` units read one tensor
    and are summed back into it, so `branches` tensors are live at once across each stage."""
    b = GraphBuilder(f"wide{branches}")
    x = b.input("x", (1, channels, size, size))
    while len(b.nodes) < nodes:
        tails = []
        for _ in range(branches):
            y = x
            for _ in range(depth):
                y = b.unary("Relu", b.conv(y, channels, 1))
            tails.append(y)
        total = tails[0]
        for tail in tails[1:]:
            total = b.binary("Add", total, tail)
        x = total
    b.output(x)
    return b.build()


def wide_random_dag(rng: random.Random, nodes: int, frontier: int, *, channels: int = 32, size: int = 28) -> Graph:
    """A random DAG whose every node reads from a window of the last `frontier` tensors, so about
    that many tensors are live at once."""
    b = GraphBuilder(f"widerandom{frontier}")
    pool = [b.input("x", (1, channels, size, size))]
    for _ in range(nodes):
        window = pool[-frontier:]
        op = rng.choice(("Conv", "Conv", "Relu", "Add", "Mul"))
        if op == "Conv":
            out = b.conv(rng.choice(window), channels, 1)
        elif op in ("Add", "Mul"):
            out = b.binary(op, rng.choice(window), rng.choice(window))
        else:
            out = b.unary(op, rng.choice(window))
        pool.append(out)
    read = {name for node in b.nodes for name in node.inputs}
    for name in pool[1:]:
        if name not in read:
            b.output(name)
    return b.build()


def cascade_chain_model():
    """An ONNX chain a tiled npu cascades (tests/test_cascade*.py): a 3x3 convolution, a depthwise
    3x3 and a 1x1 on a 32 x 32 map, 16, 32, 32 and 16 KiB float maps."""
    from hetgen.models._builder import Builder

    b = Builder("chain", 17, 0)
    x = b.input("input", (1, 4, 32, 32))
    h = b.op("Relu", [b.conv(x, 4, 8, 3)])
    h = b.op("Relu", [b.conv(h, 8, 8, 3, group=8)])
    b.output(b.conv(h, 8, 4, 1), (1, 4, 32, 32))
    return b.model()
