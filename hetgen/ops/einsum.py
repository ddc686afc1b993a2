"""Einsum: any equation (explicit or implicit output, repeated labels for diagonals, ellipsis with
broadcasting), as one loop nest: the output's labels outside, the summed labels inside, each
operand read through the strides its labels give (a repeated label adds its strides: a diagonal;
a broadcast size-1 dimension has stride 0)."""

from __future__ import annotations

import string

from hetgen.ir import DType
from hetgen.ops._common import Loop, contiguous_strides, index_expr
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported

ACCEPTED = (DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64)
ELLIPSIS_LABELS = "0123456789"  # stand-ins for the ellipsis' dimensions, outermost first


def _terms(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Each operand's labels and the output's, ellipses spelled out."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Unsupported(f"Einsum equation {equation!r} names {len(terms)} operands for {len(ranks)} inputs")
    ellipsis_rank = 0
    for term, rank in zip(terms, ranks):
        if "..." in term:
            ellipsis_rank = max(ellipsis_rank, rank - len(term.replace("...", "")))
    spelled = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            own = rank - len(term.replace("...", ""))
            term = term.replace("...", ELLIPSIS_LABELS[ellipsis_rank - own : ellipsis_rank])
        if len(term) != rank:
            raise Unsupported(f"Einsum term {term!r} has {len(term)} labels for an operand of rank {rank}")
        spelled.append(term)
    if arrow:
        output = rhs.replace("...", ELLIPSIS_LABELS[:ellipsis_rank])
    else:  # implicit: the ellipsis, then labels seen once, alphabetically
        counts = {c: "".join(spelled).count(c) for c in "".join(spelled)}
        output = ELLIPSIS_LABELS[:ellipsis_rank] + "".join(
            sorted(c for c, n in counts.items() if n == 1 and c in string.ascii_letters)
        )
    return spelled, output


def lower(op: OpInstance) -> Kernel:
    types = list(op.input_types)
    dtype = op.output_types[0].dtype
    if dtype not in ACCEPTED or any(t.dtype is not dtype for t in types):
        raise Unsupported(f"Einsum on {dtype.label}; accepted: {', '.join(d.label for d in ACCEPTED)}")
    terms, output = _terms(str(op.attr("equation")), [t.rank for t in types])
    extents: dict[str, int] = {}
    for term, tensor in zip(terms, types):
        for label, extent in zip(term, tensor.shape):
            if extents.get(label, 1) not in (1, extent) and extent != 1:
                raise Unsupported(f"Einsum label {label!r} has extents {extents[label]} and {extent}")
            extents[label] = max(extents.get(label, 1), extent)
    summed = [label for label in dict.fromkeys("".join(terms)) if label not in output]
    labels = [*output, *summed]
    loops = [Loop(f"l{k}", extents.get(label, 1)) for k, label in enumerate(labels)]
    reads = []
    for arg, (term, tensor) in enumerate(zip(terms, types)):
        strides = dict.fromkeys(labels, 0)
        for label, extent, stride in zip(term, tensor.shape, contiguous_strides(tensor.shape)):
            if extent != 1:
                strides[label] += stride
        reads.append({"arg": arg, "index": index_expr(loops, [strides[label] for label in labels])})
    out_strides = dict(zip(output, contiguous_strides([extents[label] for label in output])))
    out_index = index_expr(loops[: len(output)], [out_strides[label] for label in output])
    size = op.output_types[0].size
    work = size
    for label in summed:
        work *= extents[label]
    return Kernel(
        template="kernels/einsum.c.j2",
        params={
            "ctype": dtype.c_type,
            "outer": loops[: len(output)],
            "inner": loops[len(output) :],
            "reads": reads,
            "product": " * ".join(f"in{read['arg']}[{read['index']}]" for read in reads),
            "out_arg": len(op.node.inputs),
            "out_index": out_index,
            "empty": size == 0,
        },
        flops=work * len(types),
        bytes_accessed=sum(t.nbytes for t in types) + op.output_types[0].nbytes,
    )


DEFS = (OpDef("Einsum", lower),)
