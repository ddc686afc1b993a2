"""Float kernels that read their weights where they are linked, for bare-metal targets.

On a microcontroller the weights sit in flash and RAM is the scarce memory: the GEMM's run-time
packing (conv weights into A panels, a small final layer's B into panels padded to 32 columns)
copies them into a workspace each call, and its blocks are sized for application cores. These
offers (`Prepacked(bare_metal_only=True)`, the layout unchanged) switch a Conv, Gemm or MatMul with
constant weights to a template that reads the model's layout in place: a convolution unfolds two
output pixels at a time into a float buffer (8 * k bytes) and multiplies them with four weight rows
at a time; a product reads A and B through their strides, four output columns at a time, with no
workspace. hetgen/partition/prepack.py takes them on bare-metal targets only.
"""

from __future__ import annotations

import numpy as np

from hetgen.ops.base import Prepacked

CONV_TEMPLATE = "kernels/conv_in_place.c.j2"
PRODUCT_TEMPLATE = "kernels/product_in_place.c.j2"


def _as_stored(value: np.ndarray) -> np.ndarray:
    return np.asarray(value, np.float32)


def conv_offer(k_dim: int) -> Prepacked:
    """A Conv (one GEMM per image and group) reading its weights [cout, cin / groups, *kernel] in place."""
    return Prepacked(1, _as_stored, {"in_place": True}, 2 * 4 * k_dim, template=CONV_TEMPLATE, bare_metal_only=True)


def product_offer(
    m: int,
    n: int,
    k: int,
    a_strides: tuple[int, int],
    b_strides: tuple[int, int],
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    bias: tuple[int, int, int] | None = None,
) -> Prepacked:
    """Y[m x n] = alpha * A B (+ beta * C) reading A and B (input 1, constant) through their
    (row, column) strides; `bias`: (C's input index, row stride, column stride)."""
    params = {
        "ip_m": m,
        "ip_n": n,
        "ip_k": k,
        "ip_a_rs": a_strides[0],
        "ip_a_cs": a_strides[1],
        "ip_b_rs": b_strides[0],
        "ip_b_cs": b_strides[1],
        "ip_alpha": alpha,
        "ip_beta": beta,
        "ip_has_bias": bias is not None,
        "ip_bias_index": bias[0] if bias else 0,
        "ip_bias_rs": bias[1] if bias else 0,
        "ip_bias_cs": bias[2] if bias else 0,
        # the vector forms (hg_sdot.h) need A's row contiguous: B's rows hold four columns side by
        # side, or B's columns are contiguous (transposed); else strided scalar loops
        "ip_columns": a_strides[1] == 1 and b_strides[1] == 1,
        "ip_rows": a_strides[1] == 1 and b_strides[0] == 1 and b_strides[1] != 1,
    }
    return Prepacked(1, _as_stored, params, 0, template=PRODUCT_TEMPLATE, bare_metal_only=True)
