"""YAML parsed once, into a small tree that remembers where every key and value was written.

PyYAML's `compose` keeps marks on nodes but its constructed dicts forget them, and every platform
error must say `file:line:col`. So we compose, then convert the node graph into `YMap` / `YSeq` /
`YScalar` values that carry a `SourcePos`. Nothing here interprets a platform; schemas do that.

Platform files may come from anyone, so composing is bounded: nesting depth, scalar length and
the number of values the document holds once aliases are expanded (an alias bomb, "billion laughs",
names a few nodes that expand to billions). A file past a bound is refused at the position where it
crossed it, before anything expands; the caller bounds the file's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from hetgen.errors import Diagnostic, PlatformError
from hetgen.platform.model import SourcePos

# Shipped platform and kind files hold at most ~150 values and nest about ten levels deep; these bounds are far
# above any real platform file and far below what would take a noticeable time or memory.
MAX_VALUES = 20_000  # scalars, lists and mappings in the document, each alias counted expanded
MAX_DEPTH = 64  # lists and mappings inside each other
MAX_SCALAR_CHARS = 10_000


@dataclass(frozen=True)
class YScalar:
    value: Any  # str, int, float, bool or None, as YAML's safe schema resolves it
    pos: SourcePos


@dataclass(frozen=True)
class YSeq:
    items: tuple[YNode, ...]
    pos: SourcePos


@dataclass(frozen=True)
class YMap:
    entries: tuple[tuple[YScalar, YNode], ...]  # keys are string scalars, unique, in file order
    pos: SourcePos

    def keys(self) -> tuple[str, ...]:
        return tuple(key.value for key, _ in self.entries)

    def get(self, key: str) -> YNode | None:
        return next((value for k, value in self.entries if k.value == key), None)

    def key_node(self, key: str) -> YScalar | None:
        return next((k for k, _ in self.entries if k.value == key), None)


YNode = YScalar | YSeq | YMap


def describe(node: YNode) -> str:
    """How an error names what the user wrote instead of what was expected."""
    if isinstance(node, YMap):
        return "a mapping"
    if isinstance(node, YSeq):
        return "a list"
    value = node.value
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    return f"the string {value!r}"


def plain(node: YNode) -> Any:
    """The plain Python value of a node (lists as tuples), for pass-through data like `where:`."""
    if isinstance(node, YMap):
        return {key.value: plain(value) for key, value in node.entries}
    if isinstance(node, YSeq):
        return tuple(plain(item) for item in node.items)
    return node.value


def parse_yaml(text: str, file: str, found: list[Diagnostic] | None = None) -> YNode | None:
    """The positioned tree of one YAML document (None for an empty file).

    Malformed YAML raises `PlatformError` at the position PyYAML reports. Duplicate keys, odd
    tags and the like leave a usable tree: they are appended to `found` when given (so the schema
    checks still run and everything is reported together), else raised.
    """
    loader = None
    try:
        loader = _BoundedLoader(text)
        root = loader.get_single_node()
    except _TooLarge as exc:
        mark = exc.problem_mark
        raise PlatformError("", (Diagnostic(file, mark.line + 1, mark.column + 1, exc.problem),)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed YAML"
        line, column = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        opened = exc.context_mark if exc.problem and exc.context else None
        if opened is not None and opened is not mark:  # e.g. where the unclosed `{` was opened
            problem += f" ({exc.context} opened at line {opened.line + 1}, column {opened.column + 1})"
        if "'\\t'" in problem:
            problem += "; indent with spaces, not tabs"
        raise PlatformError("", (Diagnostic(file, line, column, f"malformed YAML: {problem}"),)) from None
    except yaml.reader.ReaderError as exc:  # a control character: positioned by offset, not mark
        before = text[: exc.position]
        line, column = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
        message = f"malformed YAML: control character U+{code:04X} is not allowed"
        raise PlatformError("", (Diagnostic(file, line, column, message),)) from None
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        return None
    problems: list[Diagnostic] = []
    tree = _convert(root, file, loader, problems, active=set())
    if found is not None:
        found.extend(problems)
    elif problems:
        raise PlatformError("", tuple(sorted(problems, key=lambda d: (d.line, d.column))))
    return tree


class _TooLarge(yaml.MarkedYAMLError):
    """A bound of this module crossed; `problem` is the whole message, `problem_mark` where."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe composer, counting as it composes so that nothing past a bound is built.

    Each node's expanded size (itself and everything under it, aliases expanded) is remembered, so
    an alias adds its target's size in one step: a bomb is refused after a few hundred events.
    """

    def __init__(self, text: str):
        super().__init__(text)
        self._depth = 0
        self._values = 0  # values composed so far, aliases expanded
        self._sizes: dict[int, int] = {}  # id(node) -> its expanded size

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:  # an undefined alias is PyYAML's to report
                self._count(self._sizes.get(id(target), 1), event.start_mark, f"alias '*{event.anchor}'")
            return super().compose_node(parent, index)
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_SCALAR_CHARS:
            raise _TooLarge(
                problem=f"a value of {len(event.value)} characters; values are limited to {MAX_SCALAR_CHARS}",
                problem_mark=event.start_mark,
            )
        if self._depth >= MAX_DEPTH:
            raise _TooLarge(
                problem=f"lists and mappings nest more than {MAX_DEPTH} deep; a platform file needs far fewer levels",
                problem_mark=event.start_mark,
            )
        before = self._values
        self._count(1, event.start_mark, "")
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._sizes[id(node)] = self._values - before
        return node

    def _count(self, added: int, mark, what: str) -> None:
        self._values += added
        if self._values <= MAX_VALUES:
            return
        if what:
            problem = f"{what} expands to {added} values and takes the document past {MAX_VALUES} (aliases expanded)"
            advice = "write repeated values out, or alias fewer, smaller blocks"
        else:
            problem, advice = f"the document holds more than {MAX_VALUES} values", "split it or remove unused data"
        raise _TooLarge(problem=f"{problem}; platform files are far smaller: {advice}", problem_mark=mark)


def _pos(node: yaml.Node, file: str) -> SourcePos:
    return SourcePos(file, node.start_mark.line + 1, node.start_mark.column + 1)


def _convert(node: yaml.Node, file: str, loader: yaml.SafeLoader, problems: list, active: set) -> YNode:
    pos = _pos(node, file)
    if id(node) in active:  # an alias of one of its own ancestors would recurse forever
        problems.append(Diagnostic(file, pos.line, pos.column, "recursive YAML alias; write the value out"))
        return YScalar(None, pos)
    if isinstance(node, yaml.ScalarNode):
        try:
            return YScalar(loader.construct_object(node, deep=True), pos)
        except yaml.MarkedYAMLError as exc:  # e.g. an unknown tag such as !!python/object
            problems.append(Diagnostic(file, pos.line, pos.column, f"malformed YAML: {exc.problem}"))
        except Exception:  # PyYAML's constructors fail variously on a tag that does not fit, e.g. `!!int x`
            shown = (
                f"'{node.value}'" if len(node.value) <= 40 else f"'{node.value[:20]}...' ({len(node.value)} characters)"
            )
            problems.append(Diagnostic(file, pos.line, pos.column, f"malformed YAML: {node.tag} {shown}"))
        return YScalar(None, pos)
    active = active | {id(node)}
    if isinstance(node, yaml.SequenceNode):
        return YSeq(tuple(_convert(item, file, loader, problems, active) for item in node.value), pos)
    explicit = sum(1 for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge")
    try:
        loader.flatten_mapping(node)  # resolves `<<: *anchor` merge keys the way PyYAML does
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or node.start_mark
        problems.append(Diagnostic(file, mark.line + 1, mark.column + 1, f"malformed YAML: {exc.problem}"))
        node = yaml.MappingNode(node.tag, [(k, v) for k, v in node.value if k.tag != "tag:yaml.org,2002:merge"])
    merged = len(node.value) - explicit  # flatten_mapping puts the merged entries first
    entries: dict[str, tuple[YScalar, YNode]] = {}
    merged_keys: set[str] = set()
    for index, (key_node, value_node) in enumerate(node.value):
        key = _convert(key_node, file, loader, problems, active)
        if not isinstance(key, YScalar) or not isinstance(key.value, str):
            problems.append(Diagnostic(file, key.pos.line, key.pos.column, f"keys must be names, not {describe(key)}"))
            continue
        if key.value in entries and key.value not in merged_keys:
            earlier = entries[key.value][0].pos
            problems.append(
                Diagnostic(
                    file,
                    key.pos.line,
                    key.pos.column,
                    f"duplicate key '{key.value}' (first given at line {earlier.line}); give each key once",
                )
            )
            continue
        # A later entry overrides one merged in from an anchor, as YAML's merge key says.
        entries[key.value] = (key, _convert(value_node, file, loader, problems, active))
        if index < merged:
            merged_keys.add(key.value)
        else:
            merged_keys.discard(key.value)
    return YMap(tuple(entries.values()), pos)
