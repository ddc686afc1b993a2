"""A unit's kernel variants on a CPU controller, each with its own work: what the cost model prices
when the kernel choice stage (hetgen/partition/choices.py) takes one.

A kernel (the table's) may offer its constants in layouts of its own (`Kernel.prepacked`: GEMM
panels, Winograd's transformed weights). Taking an offer gives another kernel: its template,
parameters and workspace, and, where the offer changes the arithmetic, its work. GEMM panels only
pad the weights: the work is the GEMM's. Winograd F(2x2, 3x3) (hetgen/ops/_winograd.py) is another
computation: per 2x2 block of output and (input, output) channel pair 16 multiply-adds instead of
36, plus the input and output transforms, its GEMMs the 16 products per chunk of tile rows that
the template calls (conv_winograd.c.j2), and the transformed weights (16/9 of the model's) read.
The direct kernel of small planes (hetgen/ops/_conv_small.py) does the GEMM's multiply-adds on one thread.
The blocked layout's kernels (hetgen/ops/conv_nchwc.py) count their own work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from hetgen.ops import _gemm_plan, _parallel
from hetgen.ops.base import Kernel, Prepacked
from hetgen.ops.conv import ConvVariant

# Additions per 4x4 tile and channel of each transform: V = B^T d B (two passes of 16) on every input
# channel, Y = A^T M A (16 for A^T M, 16 with the bias for the 2x2 outputs) on every output channel.
TRANSFORM_FLOPS = 32


def winograd(offer: Prepacked) -> bool:
    return offer.params.get("variant") == ConvVariant.WINOGRAD


def with_offers(kernel: Kernel, offers: Iterable[Prepacked]) -> Kernel:
    """`kernel` reading its constants in the offers' layouts: their parameters, template and
    workspace, and the variant's work (Winograd's own; the same work otherwise)."""
    offers = tuple(offers)
    if not offers:
        return kernel
    params, scratch, template = dict(kernel.params), kernel.scratch_bytes, kernel.template
    for offer in offers:
        params.update(offer.params)
        scratch = scratch if offer.scratch_bytes is None else offer.scratch_bytes
        scratch -= offer.scratch_saved
        template = template if offer.template is None else offer.template
    taken = dataclasses.replace(kernel, template=template, params=params, scratch_bytes=scratch, prepacked=())
    if any(winograd(offer) for offer in offers):
        return winograd_kernel(taken)
    if any(offer.params.get("variant") == ConvVariant.SMALL for offer in offers):
        # one loop on the calling thread, no GEMM (hetgen/ops/_conv_small.py)
        helpers = tuple(helper for helper in taken.helpers if helper != _gemm_plan.HELPER)
        return dataclasses.replace(taken, parallel=_parallel.SERIAL, helpers=helpers)
    return taken


def winograd_kernel(kernel: Kernel) -> Kernel:
    """A Conv kernel with Winograd's parameters, its work Winograd's (module doc)."""
    p = kernel.params
    batch, cin, cout = int(p["batch"]), int(p["in_channels"]), int(p["out_channels"])
    tiles_h, tiles_w, chunk_rows = int(p["tiles_h"]), int(p["tiles_w"]), int(p["chunk_rows"])
    tiles = tiles_h * tiles_w
    flops = batch * tiles * (2 * 16 * cin * cout + TRANSFORM_FLOPS * (cin + cout))
    model_weights = 4 * cout * cin * 9
    transformed = 4 * 16 * cout * cin
    chunks = -(-tiles_h // chunk_rows)
    call = _parallel.GemmCall(cout, int(p["tiles"]), cin, 16 * batch * chunks, a_packed=True)
    return dataclasses.replace(
        kernel,
        flops=flops,
        bytes_accessed=kernel.bytes_accessed + transformed - model_weights,
        parallel=_parallel.gemm(call),
    )


def variant_name(kernel: Kernel, blocked: int | None = None) -> str:
    """What explain and the tests call the kernel a unit runs: `nchw8c`, `winograd`, `implicit`, ..."""
    if blocked is not None:
        return f"nchw{blocked}c"
    variant = kernel.params.get("variant")
    if variant is not None:
        return str(variant)
    return kernel.template.rsplit("/", 1)[-1].removesuffix(".c.j2")
