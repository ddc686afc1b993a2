"""Names are data, never code: hostile ONNX names build, match onnxruntime, and never become C.

Every name of the models below (inputs, outputs, initializers, intermediate tensors, nodes, the
graph) is hostile: comment closers and openers, quotes, backslashes, trigraphs, NUL, newlines, `$`,
`:`, spaces, `#define`, shell metacharacters, non-ASCII, 300 characters, names that clean to the
same identifier, C keywords. Most carry the marker token `HG_PAYLOAD`; a small C lexer (phases 1-3
as `gcc -std=c11`, which enables trigraphs, reads them) checks the marker never appears as a code
token, i.e. outside every comment and literal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from ninja import BIN_DIR
from onnx import TensorProto, helper, numpy_helper

import hetgen
from hetgen.build import run_ninja
from hetgen.errors import HetgenError
from hetgen.names import (
    C_KEYWORDS,
    MAX_IDENTIFIER,
    c_comment,
    c_identifier,
    c_string,
    is_path_component,
    ninja_command,
    ninja_path,
    ninja_value,
    path_component,
    unique_c_identifiers,
)
from hetgen.platform.loader import load_platform_text
from hetgen.runtime.reference import ort_session

MARKER = "HG_PAYLOAD"
NINJA = str(Path(BIN_DIR) / "ninja")
SHAPE = [1, 4, 5, 5]

# Names ninja and a shell must carry verbatim (pins reach the regenerate command): no newline or NUL.
NINJA_SAFE = [
    f"in */ {MARKER}(); /* x",
    f"op /* {MARKER}",
    f'q"); {MARKER}("',
    f"dollar $ {MARKER} ${{{MARKER}}} $",
    f"colon: {MARKER} = 1",
    f"with  spaces {MARKER}",
    f"#define {MARKER} 1",
    f"`{MARKER}` $({MARKER}) ; | & > < ' {MARKER}",
    f"é中😀 {MARKER}",
    "long" + "x" * 300 + f" {MARKER}",
    "a-b",
    "a_b",
    "A_B",
    "int",
    "for",
    "*/",
    "/*",
    "??=",
    f"tri??/ {MARKER}",
    "-rf ..",
]
# And names build.ninja cannot hold at all (only tensors and nodes that are not pinned get them).
UNSAFE = [
    "trailing backslash\\",
    "\\",
    f"splice\\\n{MARKER}",
    f"tri??/\n{MARKER}",
    f"nul\x00{MARKER}",
    f"nl\n{MARKER}\r\n",
    f"\n#define {MARKER} 1\n",
]
HOSTILE = NINJA_SAFE + UNSAFE


# --- a C lexer, enough to tell code from comments and literals ----------------------------------

TRIGRAPHS = {"=": "#", "/": "\\", "'": "^", "(": "[", ")": "]", "!": "|", "<": "{", ">": "}", "-": "~"}
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PP_NUMBER = re.compile(r"\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.])*")


def code_tokens(text: str) -> list[str]:
    """The identifiers of C text outside comments and string/char literals, as gcc -std=c11 reads it:
    trigraphs replaced, then line splices (backslash, optional blanks, newline) removed."""
    text = re.sub(r"\?\?([=/'()!<>-])", lambda m: TRIGRAPHS[m[1]], text)
    text = re.sub(r"\\[ \t]*\n", "", text)
    tokens, i = [], 0
    while i < len(text):
        char = text[i]
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            assert end >= 0, "unterminated comment"
            i = end + 2
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif char in "\"'":
            j = i + 1
            while text[j] != char:
                assert text[j] != "\n", f"newline inside a literal: {text[i : j + 1]!r}"
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif char.isdigit() or (char == "." and text[i + 1 : i + 2].isdigit()):
            i = PP_NUMBER.match(text, i).end()
        elif char.isalpha() or char == "_":
            match = IDENTIFIER.match(text, i)
            tokens.append(match[0])
            i = match.end()
        else:
            i += 1
    return tokens


def test_the_lexer_finds_what_escaping_must_prevent():
    assert MARKER in code_tokens(f"/* a */ {MARKER} /* b */")
    assert MARKER in code_tokens(f'"a" {MARKER} "b"')
    assert MARKER in code_tokens(f'"??/"" {MARKER} "x"')  # ??/ is a backslash: the first literal is "\""
    assert MARKER not in code_tokens(f"// comment ??/\n{MARKER};")  # ... and splices a line into a comment
    assert MARKER not in code_tokens(f"// comment \\ \n{MARKER};")
    assert MARKER not in code_tokens(f'/* {MARKER} */ "{MARKER}\\"{MARKER}" \'"\' // {MARKER}')


# --- the escaping functions on their own ---------------------------------------------------------

TRICKY = [*HOSTILE, "", "*", "/", "?", "??", "???/", "*/*/", "/*/", "a*", "/a", "\t\x7f\x01", "\ud7ff\U0010ffff"]


@pytest.mark.parametrize("text", TRICKY, ids=range(len(TRICKY)))
def test_comment_text_cannot_leave_a_comment(text):
    escaped = c_comment(text)
    assert re.fullmatch(r"[\x20-\x7e]*", escaped)
    for forbidden in ("*/", "/*", "??"):
        assert forbidden not in escaped
    assert not escaped.endswith("\\")
    assert escaped[:1] not in ("*", "/") and escaped[-1:] not in ("*", "/")
    assert code_tokens(f"/*{escaped}*/ // {escaped}\n") == []


@pytest.mark.cc
def test_literals_and_comments_compile_and_read_back(tmp_path):
    """gcc -std=c11 (trigraphs on) reads every c_string literal back as the name's UTF-8 bytes, and
    no c_comment, in a block or a line comment, swallows or adds code."""
    lines = ["#include <stdio.h>", "#include <string.h>", "int main(void) {", "    int count = 0;"]
    for text in TRICKY:
        lines.append(f'    {{ static const char s[] = "{c_string(text)}"; /* {c_comment(text)} */ // {c_comment(text)}')
        lines.append("        ++count;")
        lines.append('        for (size_t i = 0; i + 1 < sizeof s; ++i) printf("%02x", (unsigned char)s[i]);')
        lines.append('        printf("\\n"); }')
    lines += ['    printf("%d\\n", count);', "    return 0;", "}"]
    source = tmp_path / "names.c"
    source.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "names"
    subprocess.run(
        ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(source), "-o", str(exe)], check=True, capture_output=True
    )
    printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    assert printed[: len(TRICKY)] == [text.encode("utf-8", "surrogatepass").hex() for text in TRICKY]
    assert printed[len(TRICKY)] == str(len(TRICKY))  # every ++count ran: no comment swallowed code


def test_identifiers_are_distinct_valid_and_bounded():
    names = [*HOSTILE, "x", "X", "x_2", "", "9", "_", "int_", "a__b", "A-B"]
    identifiers = unique_c_identifiers(names, "tensor")
    assert len({i.lower() for i in identifiers}) == len(names)
    for identifier in identifiers:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", identifier) and identifier not in C_KEYWORDS
        assert len(identifier) <= MAX_IDENTIFIER
    assert identifiers == unique_c_identifiers(names, "tensor")  # deterministic
    assert unique_c_identifiers(["a-b", "a_b"], "t") == ("a_b", "a_b_2")
    long_a, long_b = "y" * 300 + "a", "y" * 300 + "b"
    assert c_identifier(long_a, "t") != c_identifier(long_b, "t")


@pytest.mark.parametrize("text", ["..", ".", "", "-rf", "a/b", "../../etc/passwd", ".hidden", "x" * 400, "é\x00\n"])
def test_path_components_are_safe(text):
    component = path_component(text, "file")
    assert is_path_component(component)
    assert component not in (".", "..") and "/" not in component and not component.startswith((".", "-"))
    assert len(component.encode()) <= 255


@pytest.mark.cc
def test_ninja_reads_back_escaped_paths_and_commands(tmp_path):
    """A build edge from and to files with `$`, `$ `, spaces and colons in their names, whose command
    has hostile arguments: ninja builds exactly those files and the shell sees exactly those words."""
    from ninja import ninja_syntax

    names = ["in $x: y", "a$ b", "$$ c", "d $", "é: $HOME"]
    for name in names:
        (tmp_path / name).write_text(name)
    with (tmp_path / "build.ninja").open("w") as stream:
        writer = ninja_syntax.Writer(stream)
        writer.rule("copy", ninja_command(["cp", "--"]) + " $in $out")
        writer.rule("echo", ninja_command(["printf", "%s\\n", *HOSTILE[:10]]) + " > $out")
        for name in names:
            writer.build(ninja_path(f"out/{name}"), "copy", ninja_path(name))
        writer.build("said.txt", "echo")
        writer.variable("unused", ninja_value("$ weird: value"))
    subprocess.run([NINJA, "-C", str(tmp_path)], check=True, capture_output=True)
    for name in names:
        assert (tmp_path / "out" / name).read_text() == name
    assert (tmp_path / "said.txt").read_text().split("\n")[:10] == HOSTILE[:10]


def test_ninja_refuses_what_it_cannot_hold():
    with pytest.raises(HetgenError, match="newline"):
        ninja_path("a\nb")
    with pytest.raises(HetgenError, match="build.ninja"):
        ninja_command(["--pin", "x\x00y"])


# --- whole models with hostile names -------------------------------------------------------------


def hostile_model(nodes: list[str], tensors: list[str], inputs: list[str], weights: list[str], graph: str):
    """A chain of nine nodes over four inputs and two initializers; the 9th, 5th and 7th tensors are
    the outputs. Every name is the caller's."""
    rng = np.random.default_rng(0)
    weight, bias = weights
    initializers = [
        numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32), weight),
        numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), bias),
    ]
    chain = [
        ("Add", [inputs[0], inputs[1]], {}),
        ("Conv", [None, weight], {"pads": [1, 1, 1, 1]}),
        ("Mul", [None, inputs[2]], {}),
        ("Add", [None, bias], {}),
        ("Relu", [None], {}),
        ("Sub", [None, inputs[3]], {}),
        ("Conv", [None, weight], {"pads": [1, 1, 1, 1]}),
        ("Sigmoid", [None], {}),
        ("Tanh", [None], {}),
    ]
    onnx_nodes, previous = [], None
    for (op, operands, attrs), out, node in zip(chain, tensors, nodes, strict=True):
        operands = [previous if operand is None else operand for operand in operands]
        onnx_nodes.append(helper.make_node(op, operands, [out], name=node, **attrs))
        previous = out
    outputs = [tensors[8], tensors[4], tensors[6]]
    onnx_graph = helper.make_graph(
        onnx_nodes,
        graph,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE) for n in outputs],
        initializer=initializers,
    )
    return helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", 17)])


def hostile_pool(names: list[str], count: int) -> list[str]:
    """`count` distinct names taken from `names` in turn (a repeat gets a numbered suffix)."""
    return [text if index < len(names) else f"{text} #{index}" for index, text in enumerate((names * 3)[:count])]


def default_model() -> onnx.ModelProto:
    """Nearly every hostile name once; the first five nodes' names can be pinned (no newline or NUL)."""
    nodes = [*NINJA_SAFE[:5], UNSAFE[1], UNSAFE[6], *NINJA_SAFE[5:7]]
    tensors = NINJA_SAFE[8:17]  # outputs: `/*`, `A_B` and `*/`
    inputs = [UNSAFE[4], UNSAFE[5], UNSAFE[0], NINJA_SAFE[18]]  # NUL, newline, trailing backslash, trigraph
    graph = f"{NINJA_SAFE[7]} {NINJA_SAFE[17]} {NINJA_SAFE[19]}"
    return hostile_model(nodes, tensors, inputs, UNSAFE[2:4], graph)


def check_project(out: Path, model: onnx.ModelProto) -> None:
    """The generated (not yet built) project holds no payload as code and has safe file names; it
    builds (gcc -Wall -Wextra, -std=c11), parses as ninja and JSON, and computes what onnxruntime
    computes."""
    listed = (out / ".hetgen-files").read_text().split()
    sources = [path for path in listed if path.endswith((".c", ".h", ".S"))]
    assert sources
    for path in listed:
        assert all(is_path_component(part) for part in path.split("/")), path
    for path in sources:
        text = (out / path).read_text(encoding="ascii")
        assert re.fullmatch(r"[\x20-\x7e\n]*", text), path
        assert MARKER not in code_tokens(text), f"{path}: a name became code"
    run_ninja(out)

    for command in json.loads((out / "compile_commands.json").read_text()):
        assert (out / command["file"]).is_file()
    targets = subprocess.run([NINJA, "-C", str(out), "-t", "targets", "all"], capture_output=True, text=True)
    assert targets.returncode == 0, targets.stderr
    dry_run = subprocess.run([NINJA, "-C", str(out), "-n"], capture_output=True, text=True)
    assert dry_run.returncode == 0 and "no work to do" in dry_run.stdout, dry_run.stdout + dry_run.stderr

    manifest = json.loads((out / "hetgen.json").read_text())
    assert [t["name"] for t in manifest["inputs"]] == [vi.name for vi in model.graph.input]
    assert [t["name"] for t in manifest["outputs"]] == [vi.name for vi in model.graph.output]
    rng = np.random.default_rng(1)
    built = hetgen.load(out)
    feeds = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in built.inputs}
    got = built.run(feeds)
    expected = ort_session(model.SerializeToString()).run(None, feeds)
    for output, wanted in zip(model.graph.output, expected):
        np.testing.assert_allclose(got[output.name], wanted, rtol=1e-4, atol=1e-5, err_msg=repr(output.name))


@pytest.mark.cc
def test_hostile_names_on_the_host(tmp_path):
    """Inputs whose identifiers collide (`a-b`, `a_b`, `A_B`) beside an injection; outputs named
    `int`, `for` and with a NUL; every other name hostile. The C example prints the output names as
    the C table holds them."""
    pool = hostile_pool([n for n in UNSAFE + NINJA_SAFE if n not in ("a-b", "a_b", "A_B", "int", "for")], 16)
    tensors = [*pool[9:13], "for", pool[13], f"nul\x00{MARKER} out", pool[14], "int"]
    inputs = ["a-b", "a_b", "A_B", f"in */ {MARKER}(); /* x"]
    model = hostile_model(pool[:9], tensors, inputs, [pool[15], "??=weights"], f"\\graph\n#define {MARKER}")
    out = hetgen.compile(
        "platforms/host.yaml", model, out=tmp_path / "out", opt=("-O1",), native_tuning=False, build=False
    )
    check_project(out, model)
    header = next(out.glob("*/hg_host.h")).read_text()
    defines = re.findall(r"#define HG_HOST_(?:INPUT|OUTPUT)_(\w+) ", header)
    assert len(defines) == len(set(defines)) == 7
    exe = next(out.glob("bin/*_main"))
    printed = subprocess.run([str(exe)], check=True, capture_output=True).stdout
    for output in model.graph.output:
        shown = output.name.encode().split(b"\0")[0]  # C strings end at the NUL
        assert shown + b": " in printed


@pytest.mark.external
def test_hostile_names_on_the_soc(tmp_path):
    """The soc's vm root, graph co-processor and simulated npu, with nodes pinned onto each by their
    hostile names; the model file and output folder have `$`, spaces and colons in their paths, so
    build.ninja's regenerate rule carries them all."""
    model = default_model()
    folder = tmp_path / "models $x: y"
    folder.mkdir()
    model_path = folder / "m $o: del.onnx"
    onnx.save(model, model_path)
    targets = ["soc/vdevice0/npu0", "soc/vdevice0/npu0", "soc/vdevice0/host", "soc", "soc/vdevice0/host"]
    pins = {node.name: target for node, target in zip(model.graph.node[:5], targets)}
    assert all("\n" not in node and "\0" not in node for node in pins)
    out = hetgen.compile(
        "platforms/soc.yaml",
        model_path,
        out=tmp_path / "out $y: z",
        pins=pins,
        opt=("-O1",),
        native_tuning=False,
        build=False,
    )
    roles = {t["path"]: t["kernels"] for t in json.loads((out / "hetgen.json").read_text())["targets"]}
    assert roles["soc/vdevice0/npu0"] >= 1 and roles["soc/vdevice0/host"] >= 1, roles
    check_project(out, model)
    # The regenerate rule re-runs hetgen on that model path with those pins, as the shell reads them.
    os.utime(model_path)
    rebuilt = subprocess.run([NINJA, "-C", str(out)], capture_output=True, text=True)
    assert rebuilt.returncode == 0 and "REGENERATE" in rebuilt.stdout, rebuilt.stdout[-3000:]


def test_long_platform_names_give_bounded_names(tmp_path):
    """Platform and device names are identifiers of at most 63 characters (they name folders and C
    symbols); the longest give file names and C prefixes well within the limits."""
    with pytest.raises(HetgenError, match="at most 63 characters"):
        load_platform_text(f"name: {'p' * 64}\ntarget: native\n")
    platform = load_platform_text(
        f"name: {'p' * 63}\ntarget:\n  kind: native\n  runtime: vm\n  devices:\n    {'d' * 63}: {{kind: npu}}\n"
    )
    model = default_model()
    pins = {model.graph.node[1].name: f"{'p' * 63}/{'d' * 63}"}  # a Conv onto the npu
    out = hetgen.compile(platform, model, out=tmp_path / "out", pins=pins, build=False)
    listed = (out / ".hetgen-files").read_text().split()
    assert any(path.startswith(f"{'p' * 63}/{'d' * 63}/kernels/") for path in listed), listed
    for path in listed:
        assert all(len(part.encode()) <= 255 and is_path_component(part) for part in path.split("/")), path
    for target in json.loads((out / "hetgen.json").read_text())["targets"]:
        assert len(target["prefix"]) <= MAX_IDENTIFIER


def test_targets_whose_c_names_meet_are_refused(tmp_path):
    platform = load_platform_text(
        "name: p\ntarget:\n  kind: native\n  runtime: vm\n  devices:\n    npu: {kind: npu}\n    Npu: {kind: npu}\n"
    )
    with pytest.raises(HetgenError, match="would both be named"):
        hetgen.compile(platform, default_model(), out=tmp_path / "o", build=False)


def renamed(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every tensor, node and the graph renamed from HOSTILE (distinct, in turn)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    fresh = (f"{HOSTILE[i % len(HOSTILE)]} #{i}" for i in range(10**6))
    mapping: dict[str, str] = {}

    def new(name: str) -> str:
        if name and name not in mapping:
            mapping[name] = next(fresh)
        return mapping.get(name, name)

    for value in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        value.name = new(value.name)
    for node in graph.node:
        node.input[:] = [new(name) for name in node.input]
        node.output[:] = [new(name) for name in node.output]
        node.name = next(fresh)
    graph.name = next(fresh)
    return model


@pytest.mark.external
@pytest.mark.parametrize("example", ["resnet_tiny", "transformer_tiny"])
def test_shipped_examples_with_hostile_names_match_onnxruntime(tmp_path, example):
    """The examples' operators (and so their kernel templates) on the soc, every name hostile."""
    model = renamed(onnx.load(f"examples/{example}.onnx"))
    out = hetgen.compile(
        "platforms/soc.yaml", model, out=tmp_path / "out", opt=("-O1",), native_tuning=False, build=False
    )
    check_project(out, model)
