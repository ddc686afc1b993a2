"""A unit's kernel variants on a CPU controller, each with its own work: what the cost model prices
when the kernel choice stage (hetgen/partition/choices.py) takes one.

A kernel (the table's) may offer its constants in layouts of its own (`Kernel.prepacked`: GEMM
panels, Winograd's transformed weights). Taking an offer gives another kernel: its template,
parameters and workspace, and, where the offer changes the arithmetic, its work. GEMM panels only
pad the weights: the work is the GEMM's. Winograd F(2x2, 3x3) (hetgen/ops/_winograd.py) is another
computation: per 2x2 block of output and (input, output) channel pair 16 multiply-adds instead of
36, plus the input and output transforms, and the transformed weights (16/9 of the model's) read;
each chunk of tile rows runs three steps; the chunks are the pool's tasks where
`_winograd.tile_tasks` allows, else each step is shared as `_winograd.splits` cuts it
(conv_winograd.c.j2), and the cost model prices what runs.
The direct kernel of small planes (hetgen/ops/_conv_small.py) does the GEMM's multiply-adds in
blocks of output channels, the pool's tasks where the layer is large enough.
The blocked layout's kernels (hetgen/ops/conv_nchwc.py) count their own work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from hetgen.ops import _gemm_plan, _parallel
from hetgen.ops._winograd import PRODUCTS, TRANSFORM_FLOPS
from hetgen.ops.base import Kernel, Prepacked
from hetgen.ops.conv import ConvVariant


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
        # no GEMM: blocks of output channels, shared by the pool where large enough (hetgen/ops/_conv_small.py)
        split = taken.params["sp_split"]
        helpers = tuple(helper for helper in taken.helpers if helper not in (_gemm_plan.HELPER, _parallel.HELPER))
        helpers += (_parallel.HELPER,) if split else ()
        return dataclasses.replace(taken, parallel=_parallel.tasks_of(split), helpers=helpers)
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
    calls = batch * -(-tiles_h // chunk_rows)  # each step once per chunk

    def phase(work: int, split: _parallel.Split | None) -> _parallel.Phase:
        return _parallel.Phase(batch * tiles * work, split.tasks if split else 1, calls)

    # rows of tiles as the tasks, each all three steps (one pool call), or each step shared on its own
    parallel = (
        _parallel.tasks_of(p["tile_tasks"])
        if p["tile_tasks"]
        else _parallel.phased(
            phase(TRANSFORM_FLOPS * cin, p["input_split"]),
            phase(2 * PRODUCTS * cin * cout, p["product_split"]),
            phase(TRANSFORM_FLOPS * cout, p["output_split"]),
        )
    )
    helpers = tuple(helper for helper in kernel.helpers if helper != _parallel.HELPER)  # the table's bands: not here
    helpers += (_parallel.HELPER,) if parallel != _parallel.SERIAL else ()
    return dataclasses.replace(
        kernel,
        flops=flops,
        bytes_accessed=kernel.bytes_accessed + transformed - model_weights,
        parallel=parallel,
        helpers=helpers,
    )


def variant_name(kernel: Kernel, blocked: int | None = None) -> str:
    """What explain and the tests call the kernel a unit runs: `nchw8c`, `winograd`, `implicit`, ..."""
    if blocked is not None:
        return f"nchw{blocked}c"
    variant = kernel.params.get("variant")
    if variant is not None:
        return str(variant)
    return kernel.template.rsplit("/", 1)[-1].removesuffix(".c.j2")
