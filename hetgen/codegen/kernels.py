"""Render one lowered kernel into a self-contained C translation unit."""

from __future__ import annotations

from hetgen.codegen.render import render
from hetgen.names import c_comment
from hetgen.ops.base import Kernel


def kernel_source(
    kernel: Kernel, fn: str, label: str, extra_dirs: tuple[str, ...] = (), device=None, origin: str = ""
) -> str:
    """The C text of `kernel` as function `fn`; `label` says which model node(s) it computes (any text: it
    is escaped here for the file's opening comment).

    `device` holds the target's attributes, for a kind's own templates (e.g. a vector unit's lanes);
    `origin` names where `extra_dirs` came from, for a refused template's message.
    """
    params = dict(kernel.params)
    inner = params.pop("inner_kernel", None)
    if inner is not None:  # a kernel around another one (float16 storage around a float32 kernel)
        params["inner_source"] = kernel_source(inner, f"{fn}_f32", label, extra_dirs, device, origin)
    return render(
        "kernels/_kernel_file.c.j2",
        extra_dirs,
        origin=origin,
        kernel_template=kernel.template,
        fn=fn,
        label=c_comment(label),
        scratch_bytes=kernel.scratch_bytes,
        device=dict(device or {}),
        **params,
    )
