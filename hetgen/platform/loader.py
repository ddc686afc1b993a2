"""The platform stage's entry points: a platform file (or tag) becomes a validated `Platform`.

One pass collects every problem in the file, then raises them together as one `PlatformError`.
A platform file has `name:`, `target:`, and optionally `kinds:` (new kinds, written exactly like
the built-in kind files, so a new accelerator needs no Python) and `options:`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path

from hetgen.errors import Diagnostic, PlatformError
from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.kind_parts import parse_kind_block
from hetgen.platform.kinds import builtin_kinds, resolve_kinds
from hetgen.platform.model import FrozenMap, Platform, Role, SourcePos, Target
from hetgen.platform.schema import (
    Problems,
    check_keys,
    close_match,
    expect_map,
    read_bool,
    read_identifier,
    read_number,
    read_str,
)
from hetgen.platform.search_path import find_platform
from hetgen.platform.targets import MAX_THREADS, build_tree
from hetgen.platform.threads import has_pool, pool_owner
from hetgen.platform.tuning import parse_layout, parse_memory, parse_tuning
from hetgen.platform.yaml_positions import YMap, YNode, parse_yaml

PLATFORM_KEYS = ("name", "target", "kinds", "options")
OPTION_KEYS = ("placement", "pins", "threads", "tuning", "memory", "layout", "cascade", "objective")
# What the placement search minimises (hetgen/partition/search.py): latency, the makespan; energy,
# the energy per inference (hetgen/partition/energy.py); throughput, the steady-state period of
# frames pipelined across devices (hetgen/partition/throughput.py).
OBJECTIVES = ("latency", "throughput", "energy")
PLACEMENTS = ("cost", "greedy")  # cost: least estimated latency; greedy: first claiming pattern wins
DEFAULT_OPTIONS = FrozenMap({"placement": "cost", "pins": FrozenMap(), "threads": 1})
MAX_FILE_BYTES = 256 << 10  # shipped platforms are under 2 KiB; PyYAML parses ~200 KiB/s


def load_platform(spec: str | os.PathLike, search_path: Sequence[str | os.PathLike] = ()) -> Platform:
    """The platform a path or a tag names. Tags are looked up in `search_path`, then in hetgen's
    shipped platforms; the CLI passes `default_search_path(os.environ)` (./platforms and
    HETGEN_PLATFORM_PATH) here. Raises `PlatformError` listing every problem in the file."""
    path = find_platform(spec, search_path)
    return load_platform_text(read_platform_text(path), file=str(path))


def read_platform_text(path: Path) -> str:
    """The text of a platform file: at most MAX_FILE_BYTES of UTF-8, else one positioned error."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PlatformError("", (Diagnostic(str(path), 0, 0, f"cannot read platform file: {exc.strerror}"),)) from None
    if len(data) > MAX_FILE_BYTES:
        message = f"the file is larger than {MAX_FILE_BYTES} bytes; platform files are a few KiB of YAML"
        raise PlatformError("", (Diagnostic(str(path), 0, 0, message),))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]  # valid UTF-8: columns count characters, as YAML's marks do
        line, column = before.count(b"\n") + 1, len(before[before.rfind(b"\n") + 1 :].decode("utf-8")) + 1
        message = f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the platform file as UTF-8"
        raise PlatformError("", (Diagnostic(str(path), line, column, message),)) from None


def load_platform_text(text: str, file: str = "<string>", base_dir: str | os.PathLike | None = None) -> Platform:
    """The platform a YAML text describes. `file` names it in messages; `base_dir` (default: the
    folder of `file`) anchors relative `templates:` folders of kinds declared in it."""
    syntax: list[Diagnostic] = []
    tree = parse_yaml(text, file, syntax)
    problems = Problems()
    problems.extend(syntax)
    if not isinstance(tree, YMap):
        what = "empty" if tree is None else "not a mapping"
        problems.add(
            SourcePos(file, 1, 1), f"a platform file must be a mapping with {_keys_text()}; this one is {what}"
        )
        problems.raise_if_any()
    check_keys(tree, PLATFORM_KEYS, "a platform file", problems)
    name = _name(tree, problems)
    known = builtin_kinds()
    drafts: dict = {}
    if tree.get("kinds") is not None:
        base = Path(base_dir) if base_dir is not None else Path(file).parent
        drafts = parse_kind_block(tree.get("kinds"), problems, base.resolve(), builtin=False)
    resolved, broken = resolve_kinds(drafts, known, problems)
    root = None
    if tree.get("target") is None:
        if not _misspelt(tree, "target"):  # else the unknown-key message already says "did you mean"
            problems.add(tree.pos, "a platform file needs 'target:' (the controller that drives the rest)")
    elif name is not None:
        root = build_tree(tree.get("target"), name, {**known, **resolved}, broken, problems)
    options = _options(tree.get("options"), root, problems)
    if root is not None:
        _check_linked_threads(root, problems)
    problems.raise_if_any()
    declared = tuple(resolved[kind] for kind in drafts if kind in resolved)
    return Platform(name=name, file=file, root=root, options=options, declared_kinds=declared)


def _keys_text() -> str:
    return ", ".join(f"'{key}'" for key in PLATFORM_KEYS)


def _name(tree: YMap, problems: Problems) -> str | None:
    node = tree.get("name")
    if node is None:
        if not _misspelt(tree, "name"):
            problems.add(tree.pos, "a platform file needs 'name:' (a C identifier; it names the output folder)")
        return None
    return read_identifier(node, "the platform name", problems)


def _misspelt(tree: YMap, key: str) -> bool:
    """Whether an unknown top-level key is a near miss of `key`."""
    unknown = [name for name in tree.keys() if name not in PLATFORM_KEYS]
    return bool(difflib.get_close_matches(key, unknown, n=1, cutoff=0.6))


def _options(node: YNode | None, root: Target | None, problems: Problems) -> FrozenMap:
    if node is None:
        return DEFAULT_OPTIONS
    body = expect_map(node, "'options'", problems, node.pos)
    if body is None:
        return DEFAULT_OPTIONS
    check_keys(body, OPTION_KEYS, "'options'", problems)
    placement = DEFAULT_OPTIONS["placement"]
    if body.get("placement") is not None:
        placement = read_str(body.get("placement"), "'placement' of options", problems, PLACEMENTS)
    pins = _pins(body.get("pins"), root, problems) if body.get("pins") is not None else FrozenMap()
    threads = _threads(body.get("threads"), root, problems) if body.get("threads") is not None else 1
    options = {"placement": placement, "pins": pins, "threads": threads}
    # present only where the file gives them (hetgen.platform.tuning reads them with their defaults)
    if body.get("tuning") is not None:
        options["tuning"] = parse_tuning(body.get("tuning"), problems)
    if body.get("memory") is not None:
        options["memory"] = parse_memory(body.get("memory"), problems)
    if body.get("layout") is not None:
        options["layout"] = parse_layout(body.get("layout"), problems)
    if body.get("cascade") is not None:  # tiled accelerators' cascades (hetgen/partition/cascades.py)
        options["cascade"] = read_bool(body.get("cascade"), "'cascade' of options", problems)
    if body.get("objective") is not None:  # present only where given: a latency platform is unchanged
        objective = read_str(body.get("objective"), "'objective' of options", problems, OBJECTIVES)
        problem = objective_problem(objective) if objective is not None else None
        if problem is not None:
            problems.add(body.get("objective").pos, problem)
        elif objective is not None:
            options["objective"] = objective
    return FrozenMap(options)


def objective_problem(objective: str) -> str | None:
    """Why `objective` cannot be used (None: it can): one hetgen does not know."""
    if objective not in OBJECTIVES:
        return f"unknown objective {objective!r}; accepted: {', '.join(OBJECTIVES)}"
    return None


def _threads(node: YNode, root: Target | None, problems: Problems) -> int:
    """`options: {threads: N}`: the worker pool's thread count (templates/runtime/hg_threads.c) of
    every controller that has a pool and sets no `threads:` of its own (hetgen.platform.threads).
    A bare-metal controller has no OS threads and does not take it; where no controller has a
    pool, N > 1 would be ignored, so it is refused."""
    threads = read_number(node, "'threads' of options", problems, integer=True, minimum=1)
    if threads is None:
        return 1
    if threads > MAX_THREADS:
        problems.add(node.pos, f"'threads' of options must be at most {MAX_THREADS}, not {threads}")
        return 1
    if threads > 1 and root is not None and not any(has_pool(root, target) for target in root.walk()):
        bare = [target.path_str for target in root.walk() if is_bare_metal(target)]
        problems.add(
            node.pos,
            f"'threads: {threads}' needs OS threads, but {', '.join(bare)} is bare metal (no pthreads)"
            " and no controller runs on an OS; remove 'threads' or set it to 1",
        )
        return 1
    return threads


def _check_linked_threads(root: Target, problems: Problems) -> None:
    """A co-processor linked into another controller's program runs on that program's pool: its
    own `threads:` would be priced but never generated, so it is refused."""
    for target in root.walk():
        owner = pool_owner(root, target)
        if target.threads is not None and target.threads > 1 and owner is not target:
            problems.add(
                target.source,
                f"'threads: {target.threads}' of target '{target.path_str}' cannot take effect: its code is"
                f" linked into the program of '{owner.path_str}' and runs on that program's worker pool;"
                f" set 'threads' on '{owner.path_str}' instead",
            )


def _pins(node: YNode, root: Target | None, problems: Problems) -> FrozenMap:
    """`pins: {node name or pattern label: target path}`; paths may omit the root's name."""
    body = expect_map(node, "'pins' of options", problems, node.pos)
    if body is None:
        return FrozenMap()
    targets = {target.path_str: target for target in root.walk()} if root is not None else {}
    pins = {}
    for key, value in body.entries:
        path = read_str(value, f"the target of pin '{key.value}'", problems)
        if path is None or root is None:
            continue
        full = path if path in targets else f"{root.name}/{path}"
        target = targets.get(full)
        if target is None:
            problems.add(
                value.pos,
                f"pin '{key.value}' names unknown target '{path}'{close_match(full, targets)}; "
                f"targets: {', '.join(targets)}",
            )
        elif target.role is Role.COMPOSITE:
            problems.add(value.pos, f"pin '{key.value}' names composite '{path}', which runs nothing; pin to its host")
        else:
            pins[key.value] = full
    return FrozenMap(pins)
