"""Arithmetic over a kind's attributes, for cost figures and memory sizes in kind files.

`peak_gflops: "2 * macs_per_cycle * clock_mhz / 1000"` lets a kind's figures follow the attributes
a platform file sets. Kind files may come from users, so expressions are parsed with `ast` and only
numbers, attribute names, + - * / // % **, parentheses and min()/max() are evaluated: never `eval`.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"min": min, "max": max}
ACCEPTED = "numbers, attribute names, + - * / // % **, parentheses, min() and max()"


class ExpressionError(ValueError):
    """An expression outside the accepted grammar, or one that cannot be evaluated."""


def expression_names(text: str) -> frozenset[str]:
    """The attribute names an expression reads; raises ExpressionError if it is not accepted."""
    return frozenset(_names(_parse(text).body))


def evaluate(value: float | int | str, attributes: Mapping[str, float]) -> float:
    """A figure's value: numbers pass through, strings are evaluated over `attributes`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        result = _evaluate(_parse(str(value)).body, attributes)
    except ZeroDivisionError:
        raise ExpressionError(f"'{value}' divides by zero") from None
    except OverflowError:
        raise ExpressionError(f"'{value}' overflows") from None
    if not math.isfinite(result):
        raise ExpressionError(f"'{value}' is not a finite number")
    return float(result)


def _parse(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ExpressionError(f"'{text}' is not an arithmetic expression; accepted: {ACCEPTED}") from None
    _names(tree.body)  # validates the grammar
    return tree


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return []
    if isinstance(node, ast.Name):
        if node.id in _FUNCTIONS:
            raise ExpressionError(f"'{node.id}' is a function; call it")
        return [node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _names(node.left) + _names(node.right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _names(node.operand)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and node.args
        and not node.keywords
    ):
        return [name for arg in node.args for name in _names(arg)]
    raise ExpressionError(f"'{ast.unparse(node)}' is not accepted in an expression; accepted: {ACCEPTED}")


def _evaluate(node: ast.AST, attributes: Mapping[str, float]) -> float:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in attributes:
            raise ExpressionError(f"'{node.id}' is not an attribute")
        return attributes[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, attributes), _evaluate(node.right, attributes)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ExpressionError("exponents above 64 are not accepted")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, attributes))
    if isinstance(node, ast.Call):
        return _FUNCTIONS[node.func.id](*(_evaluate(arg, attributes) for arg in node.args))
    raise ExpressionError(f"'{ast.unparse(node)}' is not accepted in an expression")  # unreachable after _parse
