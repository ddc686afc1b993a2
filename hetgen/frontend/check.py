"""The frontend's last word on a model: everything hetgen cannot compile, reported at once.

In order, each a single `ModelError` listing every instance: operators hetgen does not support,
tensors whose type could not be inferred, inputs a lowering needs at compile time that are computed
at run time, and tensors of element types hetgen does not generate code for.
"""

from __future__ import annotations

from hetgen.errors import ModelError
from hetgen.frontend.integrity import MAX_TENSOR_BYTES
from hetgen.frontend.rules import check_rank
from hetgen.frontend.work import Work, WorkNode
from hetgen.ir import DType
from hetgen.ops.registry import op_def, supported_ops

INPUT_ROLES = {  # names for messages: (op, input index) -> what the input is
    ("Reshape", 1): "shape",
    ("Expand", 1): "shape",
    ("ConstantOfShape", 0): "shape",
    ("Tile", 1): "repeats",
    ("Slice", 1): "starts",
    ("Slice", 2): "ends",
    ("Slice", 3): "axes",
    ("Slice", 4): "steps",
    ("Split", 1): "split",
    ("Squeeze", 1): "axes",
    ("Unsqueeze", 1): "axes",
    ("Pad", 1): "pads",
    ("Resize", 2): "scales",
    ("Resize", 3): "sizes",
    ("TopK", 1): "k",
    ("Range", 0): "start",
    ("Range", 1): "limit",
    ("Range", 2): "delta",
    ("OneHot", 1): "depth",
}


def check(work: Work) -> None:
    _check_operators(work)
    _check_constant_inputs(work)
    _check_typed(work)
    _check_dtypes(work)
    _check_ranks(work)
    _check_sizes(work)


def _check_ranks(work: Work) -> None:
    """Any tensor may become a program's input or output, whose descriptor has HG_MAX_RANK dimensions."""
    producers = work.producers()
    for name, value_type in sorted(work.types.items()):
        where = "an input" if name in work.inputs else "a constant"
        check_rank(name, value_type, f"output of {producers[name].label}" if name in producers else where, work.source)


def _check_sizes(work: Work) -> None:
    """No tensor may be too large for 64-bit size arithmetic; each target judges its own limits later."""
    producers = work.producers()
    for name, value_type in sorted(work.types.items()):
        if value_type.nbytes > MAX_TENSOR_BYTES:
            where = f"output of {producers[name].label}" if name in producers else "an input or constant"
            raise ModelError(
                f"{work.source}: tensor {name!r} ({where}) has shape {value_type.shape}: {value_type.nbytes} bytes "
                f"of {value_type.label}, past the {MAX_TENSOR_BYTES} bytes any 64-bit target can index"
            )


def _check_operators(work: Work) -> None:
    supported = supported_ops()
    found: dict[tuple[str, str], list[WorkNode]] = {}
    for node in work.nodes:
        if not node.is_default_domain or node.op not in supported:
            found.setdefault((node.domain, node.op), []).append(node)
    if not found:
        return
    lines = []
    for (domain, op), nodes in sorted(found.items()):
        where = f" (domain {domain})" if domain else ""
        count = f"{len(nodes)} node{'s' if len(nodes) > 1 else ''}"
        first = f"'{nodes[0].source_name}'" if nodes[0].source_name else f"unnamed, output {nodes[0].outputs[0]!r}"
        lines.append(f"{op}{where}: {count}, first {first}")
    noun = "operator is" if len(lines) == 1 else "operators are"
    accepted = ", ".join(sorted(supported)) or "none yet"
    raise ModelError(
        f"{work.source}: {len(lines)} {noun} not supported by hetgen:\n  "
        + "\n  ".join(lines)
        + f"\nsupported operators (default domain): {accepted}"
    )


def _check_typed(work: Work) -> None:
    for node in work.nodes:
        missing = [n for n in node.outputs if n and n not in work.types]
        if missing:
            raise ModelError(
                f"{work.source}: cannot infer the shape of {missing[0]!r}, output of {node.label}; "
                "hetgen needs static shapes (fix the input shapes with --shape NAME=DIMS, or shapes= in hetgen.compile)"
            )
    for name in work.outputs:
        if name not in work.types:
            raise ModelError(f"{work.source}: cannot infer the shape of graph output {name!r}")


def _check_constant_inputs(work: Work) -> None:
    problems = []
    for node in work.nodes:
        definition = op_def(node.op)
        for index in definition.const_inputs if definition else ():
            if index < len(node.inputs) and node.inputs[index] and node.inputs[index] not in work.constants:
                role = INPUT_ROLES.get((node.op, index))
                what = f"input {index} ({role})" if role else f"input {index}"
                problems.append(f"{node.label}: {what} must be a compile-time constant; hetgen needs static shapes")
    if problems:
        raise ModelError(f"{work.source}: " + (problems[0] if len(problems) == 1 else "\n  " + "\n  ".join(problems)))


def _check_dtypes(work: Work) -> None:
    producers = work.producers()
    problems = []
    for name, value_type in sorted(work.types.items()):
        if DType.from_onnx(value_type.elem) is None:
            where = f"output of {producers[name].label}" if name in producers else "a constant"
            problems.append(f"tensor {name!r} ({where}) has element type {value_type.label}")
    if problems:
        accepted = ", ".join(d.label for d in DType)
        shown = problems[:10] + ([f"... and {len(problems) - 10} more"] if len(problems) > 10 else [])
        raise ModelError(
            f"{work.source}: element types hetgen does not support:\n  "
            + "\n  ".join(shown)
            + f"\naccepted: {accepted}"
        )
