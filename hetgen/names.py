"""Names are data, never code: the one place that escapes a string for each context it reaches.

ONNX names (tensors, nodes, the graph) may hold any character — `*/`, quotes, backslashes, `??/`,
NUL, newlines, `$`, non-ASCII, hundreds of characters — and platform files name targets, paths and
toolchains. Whatever of them reaches generated text goes through exactly one function here, chosen
by the context it lands in:

- `c_comment`: inside a C comment (`/* ... */` or `// ...`);
- `c_string`: inside a C (or GNU as) string literal, between the quotes;
- `c_identifier` / `unique_c_identifiers` / `target_prefix`: a C identifier;
- `path_component`: one component of a generated file's path;
- `ninja_path`, `ninja_value`, `ninja_command`, `ninja_comment`: build.ninja;
- `html_text`: HTML text and quoted attribute values (explain's HTML page, its SVG and its script's data).

JSON (hetgen.json, compile_commands.json) needs nothing here: `json.dumps` escapes everything.
The generated C is compiled with `-std=c11`, which turns trigraphs on, so `??` is neutralised too.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex

from hetgen.errors import HetgenError

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "_Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert _Thread_local".split()
)

# C11 guarantees 63 significant initial characters in an internal identifier; names also become
# file names (kernel sources, headers), which most file systems limit to 255 bytes.
MAX_IDENTIFIER = 63
MAX_PATH_COMPONENT = 255
_DIGEST = 8  # hex digits of the hash that keeps a shortened name distinct

_NOT_IDENTIFIER = re.compile(r"[^0-9A-Za-z_]")
_NOT_PATH = re.compile(r"[^0-9A-Za-z_.+-]")
_PRINTABLE = re.compile(r"[\x20-\x7e]*")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST]


def _shorten(cleaned: str, original: str, limit: int) -> str:
    """`cleaned` cut to `limit` characters, ending in a hash of `original` so cut names stay distinct."""
    if len(cleaned) <= limit:
        return cleaned
    return f"{cleaned[: limit - _DIGEST - 1].rstrip('_')}_{_digest(original)}"


# --- C identifiers -------------------------------------------------------------------------------


def c_identifier(text: str, fallback: str, limit: int = MAX_IDENTIFIER) -> str:
    """A C identifier made from `text` (invalid characters become '_'); `fallback` if nothing is left.

    Not a C keyword, at most `limit` characters (longer names end in a hash of the whole name).
    Different texts can give the same identifier (`a-b`, `a_b`): where identifiers must differ, use
    `unique_c_identifiers`.
    """
    cleaned = re.sub(r"__+", "_", _NOT_IDENTIFIER.sub("_", text).strip("_")) or fallback
    if cleaned[:1].isdigit():
        cleaned = f"_{cleaned}"
    if cleaned in C_KEYWORDS:
        cleaned += "_"
    return _shorten(cleaned, text, limit)


def unique_c_identifiers(texts: tuple[str, ...] | list[str], fallback: str) -> tuple[str, ...]:
    """One identifier per text, all distinct even ignoring case (they also appear upper-cased in
    macros, and as file names on case-insensitive file systems). Deterministic: a clash is resolved
    in order, the later text getting the first free `_2`, `_3`, ... suffix."""
    taken: set[str] = set()
    found = []
    for index, text in enumerate(texts):
        base = c_identifier(text, f"{fallback}{index}", MAX_IDENTIFIER - 6)
        candidate, serial = base, 1
        while candidate.lower() in taken:
            serial += 1
            candidate = f"{base}_{serial}"
        taken.add(candidate.lower())
        found.append(candidate)
    return tuple(found)


def target_prefix(platform_name: str, target_path: tuple[str, ...]) -> str:
    """The C prefix of a target's API and files: `hg_<platform>_<device>_...` (the root's name left
    out; platform and target names are C identifiers already, checked by the platform loader)."""
    return _shorten("_".join(("hg", platform_name, *target_path[1:])), "/".join(target_path), MAX_IDENTIFIER)


# --- C text ----------------------------------------------------------------------------------------


def _escape_code_point(char: str) -> str:
    code = ord(char)
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def c_comment(text: str) -> str:
    """`text` made safe anywhere inside a C comment, readable, and printable ASCII only.

    Outside printable ASCII, characters are written `\\xNN` (control characters, backslash),
    `\\uNNNN` or `\\UNNNNNNNN` (non-ASCII), so no newline, NUL or line splice can occur, and the
    result never ends with a backslash. The second character of `*/`, `/*` and `??` (a trigraph
    start) is escaped the same way, and so is a `*` or `/` at either end, so the text cannot close or
    open a comment whatever surrounds it.
    """
    out: list[str] = []
    for index, char in enumerate(text):
        previous = out[-1][-1] if out else ""
        last = index == len(text) - 1
        if not ("\x20" <= char <= "\x7e") or char == "\\":
            out.append(_escape_code_point(char))
        elif (previous, char) in (("*", "/"), ("/", "*"), ("?", "?")) or (char in "*/" and (index == 0 or last)):
            out.append(_escape_code_point(char))
        else:
            out.append(char)
    return "".join(out)


def c_string(text: str) -> str:
    """The body of a C string literal (between its quotes) holding `text`'s UTF-8 bytes.

    Printable ASCII stays, except `\\` and `"` (backslash-escaped) and `?` (so no trigraph forms);
    every other byte is a three-digit octal escape, which cannot run into a following digit the way a
    hex escape would. GNU as reads the same escapes, so `.incbin "..."` uses this too.
    """
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif "\x20" <= char <= "\x7e" and char != "?":
            out.append(char)
        else:
            out.extend(f"\\{byte:03o}" for byte in char.encode("utf-8", "surrogatepass"))
    return "".join(out)


def is_printable_ascii(text: str) -> bool:
    return _PRINTABLE.fullmatch(text) is not None


# --- terminal text ---------------------------------------------------------------------------------


def terminal_text(text: str) -> str:
    """Text from another program (a device server's refusal, a board program's stderr) safe to print:
    lines and tabs stay, every other control character (ESC and its sequences, CR, DEL, C1 controls)
    and backslash become `\\xNN` escapes, so no peer can move the cursor or retitle the terminal."""
    return "".join(
        char if char in "\n\t" or (char.isprintable() and char != "\\") else _escape_code_point(char) for char in text
    )


# --- HTML ------------------------------------------------------------------------------------------


def html_text(text: str) -> str:
    """`text` safe as HTML (and SVG) text and inside a double- or single-quoted attribute value, and
    printable ASCII only: `&`, `<`, `>`, quotes and every character outside printable ASCII become
    numeric character references, so no name can open a tag, end an attribute or a `<script>`."""
    out = []
    for char in text:
        if "\x20" <= char <= "\x7e" and char not in "&<>\"'`":
            out.append(char)
        else:
            code = ord(char)
            # a lone surrogate or a control character is not a character HTML may reference
            allowed = code in (0x9, 0xA) or (code >= 0x20 and code != 0x7F and not 0xD800 <= code <= 0xDFFF)
            out.append(f"&#x{code:x};" if allowed else "&#xfffd;")
    return "".join(out)


def html_script_json(value) -> str:
    """`value` as JSON inside an HTML `<script type="application/json">` element: ASCII only, and no
    `<`, `>` or `&`, so no name can end the element or start a comment in it."""
    text = json.dumps(value, ensure_ascii=True, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# --- file names ------------------------------------------------------------------------------------


def path_component(text: str, fallback: str) -> str:
    """One safe path component from `text`: letters, digits and `_.+-` only, no leading `.` or `-`
    (no hidden files, no `..`, nothing a tool reads as an option), at most 255 bytes."""
    cleaned = _NOT_PATH.sub("_", text).lstrip(".-") or fallback
    return _shorten(cleaned, text, MAX_PATH_COMPONENT)


def is_path_component(text: str) -> bool:
    return path_component(text, "") == text and text != ""


# --- build.ninja -----------------------------------------------------------------------------------


def _ninja_text(text: str, what: str) -> str:
    if "\n" in text or "\r" in text or "\0" in text:
        raise HetgenError(f"{what} {text!r} cannot be written into build.ninja: it holds a newline or NUL; rename it")
    return text


def ninja_path(path: str, what: str = "the path") -> str:
    """A path for ninja_syntax.Writer's build(), which escapes ' ' and ':' itself but not '$'.

    Writer.build turns '$ ' into '$$ ' (it assumes an escaped space), so '$' is doubled only where
    no space follows; ninja then reads back exactly `path`.
    """
    return re.sub(r"\$(?! )", "$$", _ninja_text(path, what))


def ninja_value(text: str, what: str = "the value") -> str:
    """A string for a ninja variable or rule, taken literally by ninja (`$` doubled)."""
    return _ninja_text(text, what).replace("$", "$$")


def ninja_command(arguments: tuple[str, ...] | list[str], what: str = "the command") -> str:
    """Arguments joined into one shell command line (each one argument to the program) for a ninja
    variable or rule: shell-quoted, then ninja-escaped, spaces inside an argument as `$ ` so that the
    Writer's line wrapping (which drops the blanks it breaks at) only breaks between arguments."""
    return " ".join(ninja_value(shlex.quote(argument), what).replace(" ", "$ ") for argument in arguments)


def ninja_comment(text: str) -> str:
    """Text for a `# ...` line of build.ninja: printable ASCII, one line."""
    return "".join(c if "\x20" <= c <= "\x7e" else _escape_code_point(c) for c in text)
