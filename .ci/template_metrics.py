#!/usr/bin/env python3
"""How much templates compute: arithmetic, inline conditionals and string tests, per template.

Templates should only lay out what Python prepared (docs/STYLE habit 6: arithmetic, naming and
decisions happen in the view-models). This counts, with Jinja's own parser, what is left in every
`templates/**/*.j2`:

- arithmetic: `+ - * / // % **` and unary `-` (a `%` whose left side is a string literal is
  formatting, and a `+` with a string literal on either side is concatenation: neither counts);
- concatenation: `~` (and `+` of a string literal), counted apart: naming belongs in Python too,
  but it is not arithmetic;
- inline conditionals: `a if c else b`;
- string ifs: an `{% if %}` or `{% elif %}` whose test compares with a string literal
  (`variant == "direct"`, `kind in ("a", "b")`): a decision made on a name instead of an enum.

    python .ci/template_metrics.py          # totals and the worst templates
    python .ci/template_metrics.py --all    # every template with a nonzero count

tests/test_template_metrics.py holds the recorded ceilings: a count may fall, never grow.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from jinja2 import Environment, nodes

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"

_ARITHMETIC = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Pow, nodes.Neg)


@dataclass
class Counts:
    arithmetic: int = 0
    concat: int = 0
    inline_ifs: int = 0
    string_ifs: int = 0

    def __iadd__(self, other: Counts) -> Counts:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


def _is_str(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Const) and isinstance(node.value, str)


def _has_str_literal(node: nodes.Node) -> bool:
    if _is_str(node):
        return True
    if isinstance(node, (nodes.Tuple, nodes.List)):
        return any(_is_str(item) for item in node.items)
    return False


def _compares_with_string(test: nodes.Node) -> bool:
    compares = [test] if isinstance(test, nodes.Compare) else []
    for compare in [*compares, *test.find_all(nodes.Compare)]:
        if _has_str_literal(compare.expr) or any(_has_str_literal(op.expr) for op in compare.ops):
            return True
    return False


def count(source: str) -> Counts:
    tree = Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"]).parse(source)
    counts = Counts()
    for node in tree.find_all(_ARITHMETIC):
        if isinstance(node, nodes.Mod) and _is_str(node.left):
            continue  # "%d" % x: formatting
        if isinstance(node, nodes.Add) and (_is_str(node.left) or _is_str(node.right)):
            counts.concat += 1
            continue
        counts.arithmetic += 1
    counts.concat += sum(1 for _ in tree.find_all(nodes.Concat))
    counts.inline_ifs += sum(1 for _ in tree.find_all(nodes.CondExpr))
    for branch in tree.find_all(nodes.If):
        # An `{% elif %}` is an If node of its parent's elif_ list, so find_all visits it too.
        counts.string_ifs += _compares_with_string(branch.test)
    return counts


def template_counts(root: Path = TEMPLATES) -> dict[str, Counts]:
    return {str(path.relative_to(root)): count(path.read_text()) for path in sorted(root.rglob("*.j2"))}


def totals(per_template: dict[str, Counts]) -> Counts:
    total = Counts()
    for counts in per_template.values():
        total += counts
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="list every template with a nonzero count")
    args = parser.parse_args()
    per_template = template_counts()
    total = totals(per_template)
    with_arith = sum(1 for c in per_template.values() if c.arithmetic)
    print(
        f"{len(per_template)} templates: {total.arithmetic} arithmetic in {with_arith} templates, "
        f"{total.concat} concatenations, {total.inline_ifs} inline conditionals, {total.string_ifs} string ifs"
    )
    ranked = sorted(
        ((name, c) for name, c in per_template.items() if c.any()),
        key=lambda item: (-item[1].arithmetic, -item[1].inline_ifs, -item[1].string_ifs, item[0]),
    )
    print(f"{'template':40} arith concat inline str-if")
    for name, c in ranked if args.all else ranked[:12]:
        print(f"{name:40} {c.arithmetic:5} {c.concat:6} {c.inline_ifs:6} {c.string_ifs:6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
