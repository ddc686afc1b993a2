"""Registered quantized-arithmetic operator modules (int8/uint8)."""

from hetgen.ops import qelementwise, qlinear, quantize

MODULES: tuple = (quantize, qlinear, qelementwise)
