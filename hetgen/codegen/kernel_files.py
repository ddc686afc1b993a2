"""A program's kernels as C: identical kernels emitted once, grouped into a bounded number of files.

Two units whose kernels render to the same C text (same operator, shapes, attributes and target: the
arguments are pointers the caller passes) share one function, named after the first of them in the
program's order; every call of the others calls it. The key is the text itself, rendered under one
placeholder name, so units that the kernel table lowered separately but identically share too.

The functions are grouped into translation units of about `FILE_BYTES` of C, so a large model is not
one compiler process per node and ninja still has files to run in parallel. A function's file is a
hash of its name modulo a power of two: which file a kernel lands in does not depend on the others,
so changing one kernel recompiles one file, and the grouping changes only when the program's total
size crosses a power of two of `FILE_BYTES`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hetgen.codegen.kernels import kernel_definition
from hetgen.codegen.render import render
from hetgen.lower.program import Program
from hetgen.names import c_comment

FILE_BYTES = 64 * 1024  # C text per translation unit, about: compiler start-up stops dominating
KEY_NAME = "hg_shared_kernel"  # the name every kernel is rendered under to compare their texts
LABELLED_UNITS = 8  # a shared function's comment names this many of its units, then counts the rest


@dataclass(frozen=True)
class KernelFunction:
    name: str  # the C function
    labels: tuple[str, ...]  # the units it computes, in program order (model text: escape to print)
    text: str  # its definition


@dataclass(frozen=True)
class ProgramKernels:
    functions: tuple[KernelFunction, ...]  # distinct, in the order of their first unit
    names: Mapping[str, str]  # each unit's fn -> the function that computes it
    helpers: tuple[str, ...]  # runtime/*.c the kernels call

    def files(self, folder: str) -> tuple[tuple[str, str], ...]:
        """(path, C text) of each translation unit, `folder`/kernels/kernels_<i>.c."""
        count, groups = file_groups(self.functions)
        return tuple(
            (f"{folder}/kernels/kernels_{bucket}.c", _file_text(group, folder, bucket, count))
            for bucket, group in groups
        )


def program_kernels(program: Program, rendered: Callable[[int], None] | None = None) -> ProgramKernels:
    """`rendered(count)` hears of each `count` units done (the progress line of a long generation)."""
    kind = program.target.kind
    extra = (kind.templates,) if kind.templates else ()
    origin = f"kind '{kind.name}', declared at {kind.source.file}:{kind.source.line}"  # a refused template's
    device = program.target.attrs
    by_kernel: dict[int, int] = {}  # id(Kernel) -> index in found: the kernel table shares values
    by_text: dict[str, int] = {}
    found: list[tuple[str, list[str], object]] = []  # (name, labels, kernel)
    names: dict[str, str] = {}
    helpers: set[str] = set()
    for unit in program.units:
        index = by_kernel.get(id(unit.kernel))
        if index is None:
            key = kernel_definition(unit.kernel, KEY_NAME, extra, device, origin)
            index = by_text.setdefault(key, len(found))
            if index == len(found):
                found.append((unit.fn, [], unit.kernel))
            by_kernel[id(unit.kernel)] = index
        name, labels, _ = found[index]
        labels.append(unit.label)
        names[unit.fn] = name
        helpers.update(unit.kernel.helpers)
        if rendered is not None:
            rendered(1)
    functions = tuple(
        KernelFunction(name, tuple(labels), kernel_definition(kernel, name, extra, device, origin))
        for name, labels, kernel in found
    )
    return ProgramKernels(functions, names, tuple(sorted(helpers)))


def file_groups(
    functions: tuple[KernelFunction, ...],
) -> tuple[int, tuple[tuple[int, tuple[KernelFunction, ...]], ...]]:
    """The number of buckets, and (bucket, its functions in program order) of each file; an empty
    bucket has no file (and the others keep their numbers, so their files do not change)."""
    if not functions:
        return 0, ()
    wanted = math.ceil(sum(len(f.text) for f in functions) / FILE_BYTES)
    count = 1 << max(wanted - 1, 0).bit_length()  # a power of two: regrouped only when it doubles
    groups: list[list[KernelFunction]] = [[] for _ in range(count)]
    for function in functions:
        groups[zlib.crc32(function.name.encode()) % count].append(function)
    return count, tuple((bucket, tuple(group)) for bucket, group in enumerate(groups) if group)


def _file_text(group: tuple[KernelFunction, ...], folder: str, bucket: int, buckets: int) -> str:
    functions = [{"name": f.name, "label": c_comment(_label(f.labels)), "text": f.text} for f in group]
    return render(
        "kernels/_kernel_group.c.j2",
        target_path=c_comment(folder),
        bucket=bucket,
        buckets=buckets,
        functions=functions,
    )


def _label(labels: tuple[str, ...]) -> str:
    shown = "; ".join(labels[:LABELLED_UNITS])
    rest = len(labels) - LABELLED_UNITS
    return f"{shown}; and {rest} more" if rest > 0 else shown
