"""Arithmetic over a kind's attributes, for cost figures and memory sizes in kind files.

`peak_gflops: "2 * macs_per_cycle * clock_mhz / 1000"` lets a kind's figures follow the attributes
a platform file sets. Kind files may come from users, so expressions are parsed with `ast` and only
numbers, attribute names, + - * / // % **, parentheses and min()/max() are evaluated: never `eval`.

Opening a kind file must be as cheap as reading it, so an expression is bounded before and while it
is evaluated: its text, node count and nesting are capped before any arithmetic, and every
intermediate value must stay a finite real number of magnitude at most MAX_MAGNITUDE. With Python's
integers unbounded, a chain of powers each below the exponent cap (`((9**64)**64)**64`) would
otherwise grow to millions of digits and keep `hetgen check` busy for minutes; with the bound, every
step works on numbers of at most ~100 bits, so evaluation takes microseconds per node.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping

from hetgen.platform.schema import MAX_NUMBER

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

# One bound for numbers written and numbers computed: far past any figure or memory size (2**64
# bytes is 1.8e19), far below where arithmetic gets slow.
MAX_MAGNITUDE = MAX_NUMBER
MAX_EXPONENT = 64
MAX_TEXT = 500  # characters
MAX_NODES = 200  # ast nodes, operators and operands each count
MAX_DEPTH = 32  # nesting of operators, calls and parentheses


class ExpressionError(ValueError):
    """An expression outside the accepted grammar, or one that cannot be evaluated."""


def expression_names(text: str) -> frozenset[str]:
    """The attribute names an expression reads; raises ExpressionError if it is not accepted."""
    return frozenset(_names(_parse(text).body))


def evaluate(value: float | int | str, attributes: Mapping[str, float]) -> float:
    """A figure's value: numbers pass through, strings are evaluated over `attributes`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(_bounded(value, value))
    try:
        result = _evaluate(_parse(str(value)).body, attributes, str(value))
    except ZeroDivisionError:
        raise ExpressionError(f"{_shown(value)} divides by zero") from None
    except OverflowError:  # a float operation past the largest double, before _bounded sees it
        raise ExpressionError(_too_large(str(value))) from None
    return float(result)


def _shown(text) -> str:
    """The expression as a message quotes it: a bomb's text can be long."""
    text = str(text)
    return f"'{text}'" if len(text) <= 60 else f"'{text[:60]}...'"


def _too_large(text) -> str:
    return f"{_shown(text)} exceeds {MAX_MAGNITUDE:g} in magnitude; figures and memory sizes are far smaller"


def _bounded(result, text):
    """`result` if it is a finite real number within MAX_MAGNITUDE; raises ExpressionError."""
    if isinstance(result, complex):  # a negative number to a fractional power
        raise ExpressionError(f"{_shown(text)} is not a real number (a negative base to a fractional power)")
    if isinstance(result, bool) or not isinstance(result, (int, float)):
        raise ExpressionError(f"{_shown(text)} is not a number")
    if isinstance(result, float) and math.isnan(result):
        raise ExpressionError(f"{_shown(text)} is not a number (NaN)")
    if abs(result) > MAX_MAGNITUDE:  # compares ints exactly: no conversion to float can overflow
        raise ExpressionError(_too_large(text))
    return result


def _parse(text: str) -> ast.Expression:
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise ExpressionError(f"an expression of {len(text)} characters; expressions are limited to {MAX_TEXT}")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: too many digits
        raise ExpressionError(f"{_shown(text)} is not an arithmetic expression; accepted: {ACCEPTED}") from None
    _check_size(tree.body, text)
    _names(tree.body)  # validates the grammar (recursion is safe: the depth is bounded)
    return tree


def _check_size(root: ast.AST, text: str) -> None:
    """Refuse a tree past MAX_NODES or MAX_DEPTH, walking it without recursion."""
    count, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ExpressionError(f"{_shown(text)} has more than {MAX_NODES} terms; simplify it")
        if depth > MAX_DEPTH:
            raise ExpressionError(f"{_shown(text)} nests deeper than {MAX_DEPTH} levels; simplify it")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


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


def _evaluate(node: ast.AST, attributes: Mapping[str, float], text: str):
    if isinstance(node, ast.Constant):
        return _bounded(node.value, text)
    if isinstance(node, ast.Name):
        if node.id not in attributes:
            raise ExpressionError(f"'{node.id}' is not an attribute")
        return _bounded(attributes[node.id], text)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, attributes, text), _evaluate(node.right, attributes, text)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right, text)
        return _bounded(_BINARY[type(node.op)](left, right), text)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, attributes, text))
    if isinstance(node, ast.Call):
        return _FUNCTIONS[node.func.id](*(_evaluate(arg, attributes, text) for arg in node.args))
    raise ExpressionError(f"'{ast.unparse(node)}' is not accepted in an expression")  # unreachable after _parse


def _check_power(base, exponent, text: str) -> None:
    """Refuse a power before computing it when its result would pass MAX_MAGNITUDE."""
    if abs(exponent) > MAX_EXPONENT:
        raise ExpressionError(f"exponents above {MAX_EXPONENT} are not accepted ({_shown(text)})")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > math.log10(MAX_MAGNITUDE):
        raise ExpressionError(_too_large(text))
