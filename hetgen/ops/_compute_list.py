"""Registered compute operator modules (convolution, GEMM, pooling, normalisation)."""

MODULES: tuple = ()
