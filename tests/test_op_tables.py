"""Operators carry their facts: outside hetgen/ops, no module keeps a table keyed by operator names.

What another stage asks of an operator (its weight input, whether it aliases, its work rule, tile
geometry, input roles...) is a trait on its `OpDef` (hetgen/ops/base.py), read with
`op_def(op).<trait>`; docs/operators.md lists them. This test parses every module outside
hetgen/ops and fails on a module-level set/frozenset/tuple/list/dict literal whose string elements
(or keys) are mostly registered operator names, so such a table cannot come back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hetgen.ops.registry import supported_ops

HETGEN = Path(__file__).resolve().parent.parent / "hetgen"

# Tables that stay, each with why it is not an operator's fact. They map ONNX forms as the model
# writes them (old opsets, the com.microsoft domain, QDQ islands, operators hetgen never registers)
# to frontend rewrite or check functions, which the ops stage cannot hold (it is imported by the
# frontend, not the other way round). A per-operator value is a trait instead (the reductions'
# `axes_input_since`, the QDQ passthroughs' `quantized_passthrough`).
ALLOWED = {
    "frontend/contrib_quant.py:UNARY": (
        "rewrite of com.microsoft forms: QLinearSoftmax/Sigmoid/LeakyRelu have no OpDef to carry it"
    ),
    "frontend/contrib_quant.py:BINARY": "rewrite of com.microsoft forms into float ops, beside UNARY",
    "frontend/functions.py:HETGEN_BODIES": "frontend functions writing ONNX bodies (ops cannot import the frontend)",
    "frontend/normalize.py:RULES": "frontend rewrite functions of old-opset forms, some never registered (Upsample)",
    "frontend/qdq.py:MATCHERS": "frontend rewrite functions matching QDQ islands around several operators",
    "frontend/rules.py:_WINDOWED": "validity rules of ONNX forms (LpPool is expanded, not registered)",
    "frontend/rules.py:RULES": "frontend validity-check functions of ONNX forms",
}


def _strings(node: ast.expr) -> tuple[list[str], int] | None:
    """The string elements (or keys) of a literal collection, and how many elements it has."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        if node.func.id in ("frozenset", "set", "tuple", "dict", "list"):
            return _strings(node.args[0])
        return None
    if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        elements = node.elts
    elif isinstance(node, ast.Dict):
        elements = [key for key in node.keys if key is not None]
    else:
        return None
    return [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)], len(elements)


def op_tables(source: str) -> list[str]:
    """The names of module-level literals in `source` whose elements are mostly operator names."""
    ops = supported_ops()
    found = []
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        else:
            continue
        strings = _strings(value)
        if not strings:
            continue
        names, count = strings
        hits = sum(name in ops for name in names)
        if hits and 2 * hits >= count:
            found += [ast.unparse(target) for target in targets]
    return found


def test_the_guard_sees_a_table():
    assert op_tables('ALIASES = frozenset({"Reshape", "Flatten", "Identity"})\nX = ("a", "b")\n') == ["ALIASES"]
    assert op_tables('W: dict[str, int] = {"Conv": 1, "QLinearConv": 3}\n') == ["W"]


@pytest.mark.parametrize(
    "path", sorted(p for p in HETGEN.rglob("*.py") if "ops" not in p.relative_to(HETGEN).parts[:1])
)
def test_no_operator_table_outside_ops(path):
    relative = path.relative_to(HETGEN).as_posix()
    tables = [name for name in op_tables(path.read_text()) if f"{relative}:{name}" not in ALLOWED]
    assert not tables, (
        f"hetgen/{relative} keeps a table keyed by operator names ({', '.join(tables)}): make it a trait on "
        "OpDef (hetgen/ops/base.py), set it in the operators' DEFS and read op_def(op).<trait> (docs/operators.md)"
    )


def test_allowed_tables_still_exist():
    """An entry of ALLOWED whose table is gone is removed from it, so the list only shrinks."""
    stale = []
    for entry in ALLOWED:
        relative, name = entry.split(":")
        if name not in op_tables((HETGEN / relative).read_text()):
            stale.append(entry)
    assert not stale, f"no longer a table, remove from ALLOWED: {stale}"
