"""The kernel table lowers each distinct unit once (hetgen/spec/signature.py): a big graph repeats
its layers, and placing 5,000 nodes must stay fast. Sharing must never hand a layer another
layer's kernel: the price and the generated code would then be those of the other layer."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hetgen.ir import DType, TensorType
from hetgen.spec import build_kernel_specs
from hetgen.spec.build import unit_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from partition_fixtures import GraphBuilder  # noqa: E402


def layers():
    """Three Conv layers, the last with other pads (same shapes); three Pow layers, the last with
    another exponent (a constant input: squaring is a multiply, cubing calls powf)."""
    b = GraphBuilder("layers")
    x = b.input("x", (1, 8, 8, 8))
    for pads in ((1, 1, 1, 1), (1, 1, 1, 1), (2, 0, 2, 0)):
        weight = b.constant(f"w{len(b.nodes)}", (8, 8, 3, 3))
        attrs = (("kernel_shape", (3, 3)), ("pads", pads), ("group", 1))
        x = b.node("Conv", (x, weight), (1, 8, 8, 8), attrs=attrs)
    for exponent in (2.0, 2.0, 3.0):
        name = f"e{len(b.nodes)}"
        b.types[name] = TensorType(DType.FLOAT32, ())
        b.constants[name] = np.array(exponent, np.float32)
        x = b.node("Pow", (x, name), (1, 8, 8, 8))
    b.output(x)
    return b.build()


def kernel_view(spec):
    """What a spec says, its kernel by value (a kernel's prepacking layouts are fresh functions)."""
    kernel = spec.kernel
    fields = (kernel.template, kernel.params, kernel.scratch_bytes, kernel.flops, kernel.bytes_accessed)
    return (spec.nodes, spec.op, spec.epilogue, fields, spec.flops, spec.bytes, spec.scratch_bytes, spec.device_work)


def test_layers_that_differ_in_an_attribute_or_a_constant_get_their_own_kernels(counted):
    graph = layers()
    kernels = build_kernel_specs(graph)
    assert counted == {"Conv": 2, "Pow": 2}  # the repeated layer is lowered once
    for names, spec in kernels.units.items():
        members = [graph.node(name) for name in names]
        assert kernel_view(spec) == kernel_view(unit_spec(members, list(spec.epilogue), graph))
    convs = [kernels.node(node.name).kernel for node in graph.nodes if node.op == "Conv"]
    assert convs[0] is convs[1] and convs[2].params != convs[0].params
    pows = [kernels.node(node.name).kernel for node in graph.nodes if node.op == "Pow"]
    assert pows[0] is pows[1] and pows[2].params != pows[0].params
