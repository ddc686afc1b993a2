"""Registered compute operator modules (convolution, GEMM, pooling, normalisation)."""

from hetgen.ops import (
    batchnorm,
    col2im,
    conv,
    conv_transpose,
    deform_conv,
    det,
    dft,
    gemm,
    grid_sample,
    instancenorm,
    layernorm,
    lrn,
    matmul,
    pool,
    recurrent,
    roi_align,
    softmax,
)

MODULES: tuple = (batchnorm, conv, conv_transpose, gemm, instancenorm, layernorm, lrn, matmul, pool, softmax)
MODULES += (
    recurrent,
    grid_sample,
    det,
    col2im,
    roi_align,
    dft,
    deform_conv,
)  # RNN, GRU, LSTM; GridSample; Det; Col2Im; RoiAlign; DFT, STFT; DeformConv
