"""Bounded outputs (hetgen/bounded.py): NonZero and NonMaxSuppression nodes left after folding (their
inputs are computed at run time) get their actual shape as a second output, a graph output too.

Their output has a static bound but no static shape, so it may only be a graph output: a node that
reads it would need run-time shapes. That case is refused here, naming the node, its output and the
reader, before `check` would report a less specific "untyped tensor".
"""

from __future__ import annotations

import numpy as np

from hetgen.bounded import shape_output
from hetgen.errors import ModelError
from hetgen.frontend.resolve import _registry_types as bound_types
from hetgen.frontend.work import ValueType, Work
from hetgen.ops.registry import op_def


def add_shape_outputs(work: Work) -> None:
    consumers = work.consumers()
    problems = []
    for node in work.nodes:
        definition = op_def(node.op)
        if definition is None or not definition.bounded or not node.is_default_domain:
            continue
        output = node.outputs[0]
        # the buffer is the bound, whatever shape the model declares (onnx's inference takes a
        # declared output shape as the truth; the count at run time may be anything up to the bound)
        bound = bound_types(node, work).get(output)
        if bound is None:
            continue  # untyped: check.py reports it
        work.types[output] = bound
        readers = consumers.get(output, [])
        if readers:
            problems.append(
                f"{node.label}: its output '{output}' has a length known only at run time (its shape "
                f"is at most {'x'.join(map(str, bound.shape))}), and {', '.join(r.label for r in readers)} reads it; hetgen compiles static "
                f"shapes, so a run-time-length tensor can only be a graph output (make its input a "
                f"constant so the node folds, or end the graph at '{output}')"
            )
            continue
        shape = shape_output(output)
        if shape in work.names or shape in work.types:
            problems.append(f"{node.label}: hetgen needs the tensor name '{shape}' for its run-time shape; rename it")
            continue
        work.names.add(shape)
        node.outputs = [output, shape]
        work.types[shape] = ValueType.of(np.zeros(len(work.types[output].shape), np.int64))
        if output in work.outputs:
            work.outputs.append(shape)
    if problems:
        raise ModelError(f"{work.source}: " + (problems[0] if len(problems) == 1 else "\n  " + "\n  ".join(problems)))
