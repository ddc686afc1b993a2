"""Outputs whose length is known only at run time, up to a static bound (NonZero, NonMaxSuppression).

hetgen plans every buffer statically, so such an output gets a buffer of its bound (NonZero of n
elements: at most n indices) and its kernel writes the actual result compactly at the buffer's
start, as the row-major array of its actual shape. The actual shape travels as a second output of
the node, an int64 vector named `shape_output(name)`, that the frontend makes a graph output too
(hetgen/frontend/bounded.py). The C API returns both buffers; the Python loaders (`trimmed`) cut
the result to its shape and drop the shape outputs, so users see exactly onnxruntime's outputs.

Only graph outputs may have a run-time length: an operator reading one would need run-time shapes,
which hetgen's kernels do not have; the frontend refuses that, naming both nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

SHAPE_SUFFIX = "::run_time_shape"  # no ONNX exporter makes such names; the frontend checks it is free


def shape_output(name: str) -> str:
    """The name of the int64 vector that holds the actual shape of bounded output `name`."""
    return name + SHAPE_SUFFIX


def is_shape_output(name: str) -> bool:
    return name.endswith(SHAPE_SUFFIX)


def bounded_note(name: str) -> str:
    """What the generated header says beside output `name` ("" for an ordinary one)."""
    if is_shape_output(name):
        base = name.removesuffix(SHAPE_SUFFIX)
        return f': the shape of "{base}" at run time; "{base}" holds its values row-major at its buffer\'s start'
    return ""


def trimmed(outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs as the model defines them: each bounded one cut to the actual shape its kernel
    reported, the shape outputs dropped."""
    result = {}
    for name, array in outputs.items():
        if is_shape_output(name):
            continue
        shape = outputs.get(shape_output(name))
        if shape is not None:
            actual = tuple(int(d) for d in np.asarray(shape).reshape(-1))
            array = array.reshape(-1)[: math.prod(actual)].reshape(actual).copy()
        result[name] = array
    return result
