"""The Jinja sandbox every template renders in.

A kind's `templates:` folder travels with a platform file, and platform files are shared like
source code, so opening one must be as safe as reading it: a template must not reach Python (no
attribute walks to `__globals__`, `__subclasses__`, `os`; no `str.format` field tricks), and must
not burn unbounded time or memory either.

Every environment is Jinja's `ImmutableSandboxedEnvironment` (underscored and internal attributes
are refused, containers cannot be mutated) with only the globals, filters and tests hetgen's own
templates use (`ALLOWED_*`; tests/test_template_sandbox.py keeps the lists exact). An environment
that searches a kind's folder from outside hetgen's templates is also *bounded*: each render has a budget of steps (calls, loop
iterations, filters, printed values) and of characters built, methods of Python's own types are
limited to ones whose result cannot outgrow their input, and `*`, `**`, `%`, `+`, `~`,
`str.replace` and the `join`, `indent` and `format` filters are checked before they run or charged
as they do. Renders that search hetgen's folders alone are not budgeted: what they produce is a
function of the model (a C-array weights file is as large as the weights), which the frontend bounds.

A refusal is a `TemplateRefused` (a Jinja `SecurityError`); `refusal_site` finds the kind's template
file and line an error of a bounded render comes from (hetgen/codegen/render.py reports it).
"""

from __future__ import annotations

import contextvars
import os
import re
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.visitor import NodeTransformer

# What hetgen's templates use; nothing else is defined (no cycler, joiner, lipsum, namespace, dict).
ALLOWED_GLOBALS = ("range",)  # Jinja's sandboxed range: at most MAX_RANGE (100,000) items
ALLOWED_FILTERS = ("float", "format", "indent", "join", "length", "map", "max", "min", "trim", "upper")
ALLOWED_TESTS = ("none",)

# The budget of one bounded render. A kind's kernel template renders a few KiB in a few thousand steps.
MAX_STEPS = 2_000_000  # about two seconds of template work
MAX_CHARS = 64 << 20  # characters built in one render: strings made, values printed, text looped
MAX_ITEMS = 1 << 20  # items of one list or tuple a template builds with `*`
MAX_INT_BITS = 4096  # an integer a template computes
MAX_TEMPLATE_BYTES = 1 << 20  # one template file of a kind's folder
MAX_FORMAT_WIDTH = 1000  # a width or precision in a `%` format

# Methods of Python's own types a bounded template may call: none returns more than a small multiple
# of its input (`replace` is sized before it runs). Everything else on these types (format,
# format_map, join (the join filter is sized), ljust, center, zfill, expandtabs, encode...) is refused.
_SAFE_METHODS = frozenset(
    """capitalize casefold count endswith find get index isalnum isalpha isdigit isidentifier islower
    isspace isupper items keys lower lstrip partition removeprefix removesuffix replace rfind
    rindex rpartition rsplit rstrip split splitlines startswith strip title upper values""".split()
)
_BUILTIN_TYPES = (str, bytes, int, float, bool, list, tuple, dict, set, frozenset, range)
_COUNTED = "hetgen_counted_loop"  # the filter every loop of a bounded template iterates through
_SIZED = "hetgen_sized"  # the filter every `~` of a bounded template is charged through
_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


class TemplateRefused(SecurityError):
    """A template did something the sandbox does not allow, or ran past its budget. `file`: the
    template file the loader refused, when the refusal is about a file."""

    def __init__(self, message: str, file: str = ""):
        super().__init__(message)
        self.file = file


@dataclass
class _Budget:
    steps: int = MAX_STEPS
    chars: int = MAX_CHARS

    def step(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise TemplateRefused(f"the template ran past {MAX_STEPS:,} steps (calls, loop iterations, filters)")

    def charge(self, size: int) -> None:
        self.chars -= size
        if self.chars < 0:
            raise TemplateRefused(f"the template built more than {MAX_CHARS:,} characters")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("hetgen_template_budget", default=None)


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:  # compiled outside `budgeted()` (a bare get_template): a budget of its own
        budget = _Budget()
        _BUDGET.set(budget)
    return budget


class budgeted:  # noqa: N801 - used as `with budgeted():`, like contextlib's lower-case managers
    """A fresh budget for one render (its templates' compilation included)."""

    def __enter__(self) -> _Budget:
        budget = _Budget()
        self._token = _BUDGET.set(budget)
        return budget

    def __exit__(self, *exc) -> None:
        _BUDGET.reset(self._token)


def text_size(value, depth: int = 0) -> int:
    """An upper bound of len(str(value)), computed without building it (containers print their
    items' reprs: a character's escape is at most 10 characters)."""
    if isinstance(value, str):
        return len(value) * (10 if depth else 1) + 2
    if isinstance(value, bytes):
        return len(value) * 4 + 3
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    if isinstance(value, float):
        return 25
    if isinstance(value, (list, tuple, set, frozenset)):
        return 2 + sum(text_size(item, depth + 1) + 2 for item in value)
    if isinstance(value, dict):
        return 2 + sum(text_size(k, depth + 1) + text_size(v, depth + 1) + 4 for k, v in value.items())
    return 0  # hetgen's view-model objects: what their str() prints is hetgen's, not the template's


def _sized(value):
    """Charge what a template built; refuse an integer past MAX_INT_BITS."""
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        _budget().charge(len(value))
    elif isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise TemplateRefused(f"the template computed an integer of more than {MAX_INT_BITS} bits")
    return value


def _check_percent_format(text: str) -> None:
    for width, precision in _PERCENT_FIELD.findall(text):
        for number in (width, precision):
            if number == "*" or (number and int(number) > MAX_FORMAT_WIDTH):
                raise TemplateRefused(f"a %-format width or precision of {number!r} (at most {MAX_FORMAT_WIDTH})")


def _check_binop(operator: str, left, right) -> None:
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(times, int):
                limit = MAX_CHARS if isinstance(seq, (str, bytes)) else MAX_ITEMS
                if len(seq) * max(times, 0) > limit:
                    raise TemplateRefused(f"'*' would repeat {len(seq)} items {times} times (at most {limit:,})")
        if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise TemplateRefused(f"'*' would compute an integer of more than {MAX_INT_BITS} bits")
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            if left.bit_length() * right > MAX_INT_BITS:
                raise TemplateRefused(f"'**' would compute an integer of more than {MAX_INT_BITS} bits")
    elif operator == "%" and isinstance(left, str):
        _check_percent_format(left)


def _check_callable(function, args) -> None:
    """What a bounded template may call: Jinja's own callables (macros, `caller`, `loop.cycle`,
    blocks), `range`, hetgen's view-model methods, and methods of Python's own types whose result
    cannot outgrow their input (`replace` is sized first). Nothing else: a numpy array's `dump` or
    `tofile` in a view-model would otherwise write any file."""
    function = getattr(function, "__wrapped__", function)  # the sandbox's str.format wrapper
    if function is safe_range:
        return
    owner = getattr(function, "__self__", None)
    if isinstance(function, (types.BuiltinMethodType, types.MethodWrapperType)) and isinstance(owner, _BUILTIN_TYPES):
        _check_builtin_method(function, owner, args)
        return
    if owner is not None and not isinstance(owner, types.ModuleType):
        module = type(owner).__module__  # a bound method: its object's class's
    elif isinstance(function, (types.FunctionType, types.BuiltinFunctionType)):
        module = function.__module__
    else:
        module = type(function).__module__  # a callable object (a macro, a loop): its class's
    if not (module or "").startswith(("jinja2.", "hetgen.")):
        name = getattr(function, "__qualname__", type(function).__qualname__)
        raise TemplateRefused(f"{module}.{name} is not available to a kind's templates")


def _check_builtin_method(method, owner, args) -> None:
    name = method.__name__
    if name not in _SAFE_METHODS:
        raise TemplateRefused(f"{type(owner).__name__}.{name} is not available to a kind's templates")
    if isinstance(owner, str) and name == "replace" and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        grown = len(owner) + owner.count(old) * max(len(new) - len(old), 0)
        _budget().charge(grown)


def _bounded_filter(name: str, function):
    """`function` with its arguments checked before it runs and its result charged after."""
    passed = jinja2.utils._PassArg.from_obj(function)  # the context, eval context or environment it takes

    def checked(*args, **kwargs):
        first, (value, *rest) = (args[:1], args[1:]) if passed is not None else ((), args)
        _check_filter(name, value, rest, kwargs)
        return _sized(function(*first, value, *rest, **kwargs))

    if passed is not None:
        checked.jinja_pass_arg = passed
    return checked


def _check_filter(name: str, value, args, kwargs) -> None:
    budget = _budget()
    budget.step()
    if name == "join":
        separator = args[0] if args else kwargs.get("d", "")
        if isinstance(value, (list, tuple)):
            budget.charge(sum(text_size(item) for item in value) + len(str(separator)) * len(value))
    elif name == "indent":
        width = args[0] if args else kwargs.get("width", 4)
        prefix = len(width) if isinstance(width, str) else width
        budget.charge(text_size(value) * (1 + max(prefix, 0)))
    elif name == "format":
        _check_percent_format(str(value))


def _counted_loop(iterable, literal: int):
    """Every loop of a bounded template iterates through this: one step, and the loop body's own
    text, per iteration."""
    budget = _budget()
    for item in iterable:
        budget.step()
        budget.charge(literal)
        yield item


class _Metered(NodeTransformer):
    """Rewrites a bounded template so its loops iterate through `_counted_loop` and its `~`
    concatenations are charged (a chain of `{% set b = a ~ a %}` doubles without any call)."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        literal = sum(len(data.data) for data in node.find_all(nodes.TemplateData))
        node.iter = nodes.Filter(node.iter, _COUNTED, [nodes.Const(literal)], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Filter(node, _SIZED, [], [], None, None, lineno=node.lineno)


class _ConfinedLoader(jinja2.FileSystemLoader):
    """A FileSystemLoader that reads only files inside its folders (a symlink out is refused), of a
    sane size, as UTF-8; a refusal names the file."""

    def get_source(self, environment, template):
        pieces = jinja2.loaders.split_template_path(template)  # refuses `..`
        for folder in self.searchpath:
            filename = os.path.normpath(os.path.join(folder, *pieces))
            if os.path.isfile(filename):
                break
        else:
            raise jinja2.TemplateNotFound(template, f"{template!r} is in none of {', '.join(self.searchpath)}")
        resolved = Path(filename).resolve()
        if not any(resolved.is_relative_to(Path(folder).resolve()) for folder in self.searchpath):
            raise TemplateRefused(f"{filename} is a link to {resolved}, outside the templates folder", filename)
        if os.path.getsize(filename) > MAX_TEMPLATE_BYTES:
            raise TemplateRefused(
                f"{filename} is larger than a template may be ({MAX_TEMPLATE_BYTES:,} bytes)", filename
            )
        try:
            with open(filename, encoding="utf-8") as stream:
                contents = stream.read()
        except (OSError, UnicodeDecodeError) as error:
            raise TemplateRefused(f"{filename} cannot be read as UTF-8 text ({error})", filename) from None
        mtime = os.path.getmtime(filename)
        return contents, filename, lambda: os.path.isfile(filename) and os.path.getmtime(filename) == mtime


class TemplateSandbox(ImmutableSandboxedEnvironment):
    """hetgen's template environment. `bounded`: searched folders include a kind's, so renders run
    under a budget (see the module's docstring)."""

    def __init__(self, search: list[str], bounded: bool, filters: dict, finalize):
        super().__init__(
            loader=_ConfinedLoader(search),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            autoescape=False,
            finalize=finalize,
        )
        self.bounded = bounded
        self.globals = {name: self.globals[name] for name in ALLOWED_GLOBALS}
        allowed = {name: self.filters[name] for name in ALLOWED_FILTERS}
        allowed.update(filters)
        self.tests = {name: self.tests[name] for name in ALLOWED_TESTS}
        if bounded:
            # Intercepted operators are also never folded at compile time, so a constant bomb such as
            # 'x' * 10**10 is checked like any other.
            self.intercepted_binops = frozenset({"*", "**", "%", "+"})
            allowed = {name: _bounded_filter(name, function) for name, function in allowed.items()}
            allowed[_COUNTED] = _counted_loop
            allowed[_SIZED] = _sized
        self.filters = allowed

    def _parse(self, source, name, filename):
        tree = super()._parse(source, name, filename)
        if self.bounded:
            for loop in tree.find_all(nodes.For):
                if loop.recursive:  # `loop(...)` would iterate past the counted loop
                    raise TemplateSyntaxError(
                        "recursive loops are not available to a kind's templates", loop.lineno, name, filename
                    )
            tree = _Metered().visit(tree)
        return tree

    def getattr(self, obj, attribute):
        if isinstance(obj, jinja2.Undefined):  # `cycler.__init__`: say that `cycler` is undefined
            obj._fail_with_undefined_error()
        return super().getattr(obj, attribute)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
        if not __self.bounded:
            return super().call(__context, __obj, *args, **kwargs)
        _budget().step()
        _check_callable(__obj, args)
        return _sized(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context, operator, left, right):
        if self.bounded:
            _budget().step()
            _check_binop(operator, left, right)
            return _sized(super().call_binop(context, operator, left, right))
        return super().call_binop(context, operator, left, right)


def bounded_printed(value):
    """What a bounded template prints is charged before str() builds it."""
    budget = _budget()
    budget.step()
    budget.charge(text_size(value))
    return value


@dataclass(frozen=True)
class Where:
    file: str
    line: int


def refusal_site(error: BaseException, kind_folders: tuple[str, ...]) -> Where | None:
    """The place in a kind's templates a render error comes from: the innermost template frame in a
    kind's folder (the error may have been raised in a hetgen macro it called), or the kind's file
    that does not parse or that the loader refused. None: the error is not the kind's templates'."""
    roots = [Path(folder).resolve() for folder in kind_folders]

    def in_kind_folder(file: str | None) -> bool:
        if not file or not Path(file).is_absolute():
            return False
        path = Path(file).parent.resolve() / Path(file).name  # a link out is still the kind's file
        return any(path.is_relative_to(root) for root in roots)

    if isinstance(error, TemplateSyntaxError) and in_kind_folder(error.filename):
        return Where(error.filename, error.lineno or 0)
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if in_kind_folder(frame.filename)]
    if frames:
        return Where(frames[-1].filename, frames[-1].lineno or 0)
    if isinstance(error, TemplateRefused) and in_kind_folder(error.file):
        return Where(error.file, 0)
    return None


def describe(error: BaseException) -> str:
    """One line for what went wrong, without Jinja's internals."""
    if isinstance(error, RecursionError):
        return "macros call each other too deeply (unbounded recursion)"
    if isinstance(error, MemoryError):
        return "ran out of memory"
    if isinstance(error, TemplateError):
        text = error.message or type(error).__name__
    else:
        text = f"{type(error).__name__}: {error}"
    text = " ".join(str(text).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def is_template_failure(error: BaseException) -> bool:
    """An error a template's own text can cause (the sandbox's, Jinja's, or Python's from its
    expressions), as opposed to a hetgen error raised while rendering."""
    return isinstance(
        error,
        (
            TemplateError,
            RecursionError,
            MemoryError,
            OverflowError,
            TypeError,
            ValueError,
            ArithmeticError,
            LookupError,
            AttributeError,
            UnicodeError,
            OSError,
        ),
    )
