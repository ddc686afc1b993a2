"""Which hg_qgemm.h kernels packed int8 weights take (hetgen/ops/qlinear.py `packed_kernels`): plain
NEON sums two int8 products in int16 (smull + smlal) before sadalp widens them, which is exact only
while no weight is -128; weights holding one take the *_w128 forms. The bound itself is checked here
in numpy, as the int16 lanes compute it."""

from __future__ import annotations

import numpy as np

from hetgen.ops.qlinear import packed_kernels


def pair_sums_int16(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x[0] * w[0] + x[1] * w[1] as smull then smlal compute it: wrapped to int16."""
    products = x.astype(np.int32) * w.astype(np.int32)
    return (products[0] + products[1]).astype(np.int16)


def test_weights_in_symmetric_range_take_the_mlal_kernels():
    w = np.random.default_rng(0).integers(-127, 128, (16, 8, 3, 3)).astype(np.int8)
    assert packed_kernels(w) == {"block_fn": "hg_qg_block", "gemv_fn": "hg_qg_gemv", "gemm_rows_fn": "hg_qg_gemm_rows"}


def test_a_single_minus_128_takes_the_widening_kernels():
    w = np.zeros((4, 5), np.int8)
    w[3, 4] = -128
    assert packed_kernels(w) == {
        "block_fn": "hg_qg_block_w128",
        "gemv_fn": "hg_qg_gemv_w128",
        "gemm_rows_fn": "hg_qg_gemm_rows_w128",
    }
    w[3, 4] = 127
    assert packed_kernels(w)["block_fn"] == "hg_qg_block"


def test_the_int16_pair_bound():
    """Every activation (-128..127) against every weight in [-127, 127]: a pair's sum is exact in int16;
    with -128 the extreme pair wraps, which is why those weights are routed to the *_w128 kernels."""
    x = np.arange(-128, 128)
    w = np.arange(-127, 128)
    xs, ws = np.meshgrid(x, w)
    exact = 2 * xs.astype(np.int64) * ws
    assert np.array_equal(pair_sums_int16(np.stack([xs, xs]), np.stack([ws, ws])), exact)
    assert np.abs(exact).max() == 2 * 128 * 127
    worst = pair_sums_int16(np.array([[-128], [-128]]), np.array([[-128], [-128]]))
    assert int(worst[0]) != 2 * 128 * 128
