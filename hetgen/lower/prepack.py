"""Constant operands in the layout their kernel reads fastest, made once at generate time.

A lowering may offer `Kernel.prepacked` (e.g. a convolution's weights as GEMM panels). Where the
unit runs on a CPU controller, the constant is replaced by a new constant in that layout and the
kernel reads it with the offered template parameters; accelerators keep the model's layout (they
load weights as the model has them, and their own templates read it). On a bare-metal target,
whose weights sit in a small flash, an offer whose layout is much larger than the model's (Winograd's
transformed 4x4 taps are 16/9 of the 3x3 ones) is declined: the kernel then reads the model's layout
as it reads weights given at run time.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hetgen.ir import DType, Graph, TensorType
from hetgen.lower.fuse import Unit
from hetgen.ops.base import Kernel
from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.model import Platform, Role

# How much larger than the model's a packed constant may be on a bare-metal target (panel padding).
BARE_METAL_GROWTH = 1.15


def _growth(offer, value: np.ndarray) -> float:
    return offer.layout(value).size / max(value.size, 1)


def packed_name(tensor: str, unit: Unit) -> str:
    """The name of `tensor` packed for `unit`: unique, and says where it comes from."""
    return f"{tensor}.packed_for_{unit.head.name}"


def apply_prepacked(
    graph: Graph,
    units: tuple[Unit, ...],
    kernels: tuple[Kernel, ...],
    unit_inputs: list[tuple[str, ...]],
    assignment: dict[str, str],
    platform: Platform,
) -> tuple[Graph, tuple[Kernel, ...], list[tuple[str, ...]]]:
    """The graph with the packed constants added, the kernels reading them, each unit's inputs."""
    controllers = {t.path_str for t in platform.targets() if t.role is Role.CONTROLLER}
    small_flash = {t.path_str for t in platform.targets() if t.role is Role.CONTROLLER and is_bare_metal(t)}
    constants, types = dict(graph.constants), dict(graph.types)
    new_kernels, new_inputs = [], []
    for unit, kernel, inputs in zip(units, kernels, unit_inputs):
        target = assignment[unit.head.name]
        offers = kernel.prepacked
        if target in small_flash:
            offers = tuple(o for o in offers if _growth(o, graph.constants[inputs[o.index]]) <= BARE_METAL_GROWTH)
        if not offers or target not in controllers:
            new_kernels.append(kernel)
            new_inputs.append(inputs)
            continue
        inputs, params, scratch = list(inputs), dict(kernel.params), kernel.scratch_bytes
        for offer in offers:
            source = inputs[offer.index]
            value = np.ascontiguousarray(offer.layout(graph.constants[source]), dtype=np.float32).reshape(-1)
            name = packed_name(source, unit)
            constants[name] = value
            types[name] = TensorType(DType.FLOAT32, value.shape)
            inputs[offer.index] = name
            params.update(offer.params)
            scratch = scratch if offer.scratch_bytes is None else offer.scratch_bytes
        new_kernels.append(dataclasses.replace(kernel, params=params, scratch_bytes=scratch, prepacked=()))
        new_inputs.append(tuple(inputs))
    if len(constants) == len(graph.constants):
        return graph, tuple(new_kernels), new_inputs
    return dataclasses.replace(graph, constants=constants, types=types), tuple(new_kernels), new_inputs
