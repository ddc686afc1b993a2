"""Registered compute operator modules (convolution, GEMM, pooling, normalisation)."""

from hetgen.ops import (
    batchnorm,
    conv,
    conv_transpose,
    gemm,
    grid_sample,
    instancenorm,
    layernorm,
    lrn,
    matmul,
    pool,
    recurrent,
    softmax,
)

MODULES: tuple = (batchnorm, conv, conv_transpose, gemm, instancenorm, layernorm, lrn, matmul, pool, softmax)
MODULES += (recurrent, grid_sample)  # RNN, GRU, LSTM; GridSample
