"""Render one lowered kernel into C: a function definition, or a self-contained translation unit."""

from __future__ import annotations

from hetgen.codegen.render import render
from hetgen.names import c_comment
from hetgen.ops.base import Kernel


def kernel_source(
    kernel: Kernel, fn: str, label: str, extra_dirs: tuple[str, ...] = (), device=None, origin: str = ""
) -> str:
    """The C text of `kernel` as function `fn`, a file of its own; `label` says which model node(s) it
    computes (any text: it is escaped here for the file's opening comment).

    `device` holds the target's attributes, for a kind's own templates (e.g. a vector unit's lanes);
    `origin` names where `extra_dirs` came from, for a refused template's message.
    """
    return _render("kernels/_kernel_file.c.j2", kernel, fn, extra_dirs, device, origin, label=c_comment(label))


def kernel_definition(kernel: Kernel, fn: str, extra_dirs: tuple[str, ...] = (), device=None, origin: str = "") -> str:
    """The C definition of `kernel` as function `fn` (and its static helpers), without a file's
    opening comment and includes: what hetgen/codegen/kernel_files.py groups and compares."""
    return _render("kernels/_kernel.c.j2", kernel, fn, extra_dirs, device, origin)


def _render(template: str, kernel: Kernel, fn: str, extra_dirs, device, origin: str, **extra) -> str:
    params = dict(kernel.params)
    inner = params.pop("inner_kernel", None)
    if inner is not None:  # a kernel around another one (float16 storage around a float32 kernel)
        params["inner_source"] = kernel_definition(inner, f"{fn}_f32", extra_dirs, device, origin)
    # a template that renders the kernel's own (whichever variant it took) inside a function of its
    # own: a QLinearConv doing its residual QLinearAdd (hetgen/ops/qlinear.py with_quantized_residual)
    wrapper = params.pop("wrapper_template", None)
    if wrapper is not None:
        params["inner_fn"] = f"{fn}_conv"  # the wrapped kernel's own function
    return render(
        template,
        extra_dirs,
        origin=origin,
        kernel_template=kernel.template,
        entry_template=wrapper or kernel.template,
        fn=fn,
        scratch_bytes=kernel.scratch_bytes,
        device=dict(device or {}),
        **extra,
        **params,
    )
