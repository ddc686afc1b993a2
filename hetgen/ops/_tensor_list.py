"""Registered elementwise, reduction and data-movement operator modules."""

from hetgen.ops import unary

MODULES: tuple = (unary,)
