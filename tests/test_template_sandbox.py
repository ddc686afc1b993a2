"""A kind's `templates:` folder travels with a platform file, so a template must not run code nor burn
unbounded time or memory: each known escape and bomb, put into the vecunit kind's folder of a copied
platforms/dual.yaml, is refused by `hetgen generate` with exit 1 and the template's file:line, and
the file the payload would create does not appear. The sandbox allows only what hetgen's own
templates use, and those render unchanged (the replay check, .ci/replay.py, shows it file by file)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import jinja2
import onnx
import pytest
from jinja2 import nodes
from onnx import TensorProto, helper

from hetgen.cli import main
from hetgen.codegen import sandbox
from hetgen.codegen.render import environment
from hetgen.templates_dir import templates_dir

REPO = Path(__file__).resolve().parent.parent
KERNEL = "kernels/elementwise.c.j2"  # the template vecunit replaces, rendered for each of its kernels

# name -> template text; {canary} is a file the payload would create if it ran.
PAYLOADS = {
    "cycler_globals_os": "{{ cycler.__init__.__globals__.os.system('touch {canary}') }}",
    "lipsum_globals": "{{ lipsum.__globals__['os'].popen('touch {canary}').read() }}",
    "joiner_global": "{{ joiner.__init__.__globals__ }}",
    "namespace_global": "{% set ns = namespace(f=fn) %}{{ ns.f }}",
    "dict_global": "{{ dict(a=1) }}",
    "subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "class_mro": "{{ ().__class__.__mro__ }}",
    "subprocess_walk": "{% for c in fn.__class__.__base__.__subclasses__() %}{% if 'Popen' in c.__name__ %}"
    "{{ c(['touch', '{canary}']) }}{% endif %}{% endfor %}",
    "os_name": "{{ os.system('touch {canary}') }}",
    "import_builtins": "{{ range.__globals__['__builtins__']['__import__']('os').system('touch {canary}') }}",
    "template_reference_context": "{{ self._TemplateReference__context }}",
    "getitem_dunder": "{{ fn['__class__'] }}",
    "attr_filter": "{{ fn|attr('__class__') }}",
    "str_format_field": "{{ '{0.__class__.__init__.__globals__}'.format(fn) }}",
    "str_format_map": "{{ '{x.__class__}'.format_map({'x': fn}) }}",
    "format_width_bomb": "{{ '{:>9999999999}'.format(1) }}",
    "percent_width_bomb": "{{ '%0999999999d' % 1 }}",
    "format_filter_bomb": "{{ '%0999999999d'|format(1) }}",
    "loop_context": "{% for i in range(2) %}{{ loop.__class__ }}{% endfor %}",
    "huge_range": "{% for i in range(10**9) %}{% endfor %}",
    "nested_loops": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "string_multiply": "{{ 'x' * 10**10 }}",
    "list_multiply": "{{ ([0] * 10**8)|length }}",
    "integer_power": "{{ 2 ** 100000000 }}",
    "doubling_concat": "{% set a0 = 'x' * 1000 %}"
    + "".join(f"{{% set a{i + 1} = a{i} ~ a{i} %}}" for i in range(40))
    + "{{ a40|length }}",
    "join_bomb": "{% set s = 'x' * 10000000 %}{{ [s, s, s, s, s, s, s, s]|join }}",
    "indent_bomb": "{{ ('x\\n' * 1000000)|indent(60) }}",
    "loop_nest_depth_bomb": "{{ ([{'var': 'i', 'extent': 1}]|loop_nest(10**9)).body|length }}",
    "loop_nest_width_bomb": "{{ (([{'var': 'i', 'extent': 1}] * 60000)|loop_nest(0)).level }}",
    "ljust_bomb": "{{ 'x'.ljust(10**9) }}",
    "replace_bomb": "{% set s = 'x' * 100000 %}{{ s.replace('', s) }}",
    "recursive_macro": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "recursive_loop": "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "undefined_name": "{{ no_such_value }}",
    "syntax_error": "{% for x in %}",
}


def elementwise_model() -> onnx.ModelProto:
    shape = [2, 8]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "y"], ["m"], name="mul"), helper.make_node("Relu", ["m"], ["z"], name="relu")],
        "vec",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "y")],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def platform(tmp_path_factory) -> Path:
    """A copy of platforms/dual.yaml whose vecunit kind reads its templates from ./tpl."""
    folder = tmp_path_factory.mktemp("dual")
    text = (REPO / "platforms/dual.yaml").read_text()
    text, count = re.subn(r"templates: \S+", "templates: ./tpl", text)
    assert count == 1
    (folder / "dual.yaml").write_text(text)
    onnx.save(elementwise_model(), folder / "vec.onnx")
    (folder / "tpl/kernels").mkdir(parents=True)
    return folder / "dual.yaml"


def generate(platform: Path, out: Path, capfd) -> tuple[int, str]:
    pins = [arg for node in ("mul", "relu") for arg in ("--pin", f"{node}=dual/vec0")]
    code = main(["generate", str(platform), str(platform.parent / "vec.onnx"), "-o", str(out), *pins])
    captured = capfd.readouterr()
    return code, captured.out + captured.err


def put(platform: Path, text: str) -> Path:
    path = platform.parent / "tpl" / KERNEL
    path.write_text("/* line 1 */\n" + text + "\n")
    return path


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_payload_is_refused_at_its_file_and_line(name, platform, tmp_path, capfd):
    canary = tmp_path / "CANARY"
    template = put(platform, PAYLOADS[name].replace("{canary}", str(canary)))
    started = time.perf_counter()
    code, text = generate(platform, tmp_path / "out", capfd)
    assert code == 1, text
    assert f"{template}:2: template " in text, text  # the payload is line 2
    assert f"a template of kind 'vecunit', declared at {platform}:" in text, text
    assert "Traceback" not in text and "internal error" not in text, text
    assert not canary.exists() and not (tmp_path / "out").exists()
    assert time.perf_counter() - started < 30, name


def test_the_cli_exits_1_in_its_own_process(platform, tmp_path):
    canary = tmp_path / "CANARY"
    template = put(platform, PAYLOADS["import_builtins"].replace("{canary}", str(canary)))
    pins = [arg for node in ("mul", "relu") for arg in ("--pin", f"{node}=dual/vec0")]
    command = [sys.executable, "-m", "hetgen", "generate", str(platform), str(platform.parent / "vec.onnx")]
    result = subprocess.run([*command, "-o", str(tmp_path / "o"), *pins], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith(f"hetgen: error: {template}:2: template refused"), result.stderr
    assert not canary.exists()


def test_a_harmless_kind_template_still_renders(platform, tmp_path, capfd):
    put(platform, (REPO / "templates/vecunit" / KERNEL).read_text())
    code, text = generate(platform, tmp_path / "out", capfd)
    assert code == 0, text
    kernels = list((tmp_path / "out/dual/vec0/kernels").glob("*.c"))
    assert kernels and all("vecunit kernel: 32 float lanes" in k.read_text() for k in kernels)


def test_a_link_out_of_the_templates_folder_is_refused(platform, tmp_path, capfd):
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's private key\n")
    # under a shipped template's name: `hetgen check` refuses a file that replaces none
    template = put(platform, '{% include "kernels/_loops.j2" %}')
    link = platform.parent / "tpl/kernels/_loops.j2"
    link.symlink_to(secret)
    try:
        code, text = generate(platform, tmp_path / "out", capfd)
    finally:
        link.unlink()
    assert code == 1 and f"{template}:2: template refused" in text, text
    assert f"{link} is a link to {secret}, outside the templates folder" in text, text
    assert not (tmp_path / "out").exists()
    template.unlink()
    template.symlink_to(secret)  # the kind's kernel template itself
    try:
        code, text = generate(platform, tmp_path / "out", capfd)
    finally:
        template.unlink()
    assert code == 1 and f"{template}: template refused" in text and "outside the templates folder" in text, text


def test_a_template_that_is_not_utf8_is_refused(platform, tmp_path, capfd):
    template = put(platform, "")
    template.write_bytes(b"/* \xff\xfe */\n")
    code, text = generate(platform, tmp_path / "out", capfd)
    assert code == 1 and f"{template}: template refused" in text and "UTF-8" in text, text


def shipped_usage() -> dict[str, Counter]:
    """The globals, filters and tests hetgen's own templates name."""
    parser = jinja2.Environment()
    used = {"globals": Counter(), "filters": Counter(), "tests": Counter()}
    defaults = set(jinja2.Environment().globals)
    for path in sorted(templates_dir().rglob("*.j2")):
        tree = parser.parse(path.read_text())
        used["filters"].update(n.name for n in tree.find_all(nodes.Filter))
        used["tests"].update(n.name for n in tree.find_all(nodes.Test))
        used["globals"].update(n.name for n in tree.find_all(nodes.Name) if n.ctx == "load" and n.name in defaults)
    return used


def test_the_sandbox_allows_exactly_what_hetgens_templates_use():
    used = shipped_usage()
    assert set(used["globals"]) == set(sandbox.ALLOWED_GLOBALS)
    assert set(used["filters"]) == {*sandbox.ALLOWED_FILTERS, "cfloat", "loop_nest"}
    assert set(used["tests"]) == set(sandbox.ALLOWED_TESTS)
    for env in (environment(), environment(("/nonexistent",))):
        assert isinstance(env, jinja2.sandbox.ImmutableSandboxedEnvironment)
        assert set(env.globals) == {"range"}
        assert set(env.tests) == {"none"}
        assert set(env.filters) - {"hetgen_counted_loop", "hetgen_sized"} == {
            *sandbox.ALLOWED_FILTERS,
            "cfloat",
            "loop_nest",
        }


def test_only_jinja_hetgen_and_sized_builtin_callables_can_be_called(tmp_path):
    """A view-model value of another library is data, not an API: numpy's `dump` would write a file."""
    import numpy as np

    from hetgen.codegen.render import render
    from hetgen.errors import HetgenError

    canary = tmp_path / "CANARY"
    folder = tmp_path / "kind"
    folder.mkdir()
    refused = {
        f"{{{{ array.dump('{canary}') }}}}": "numpy.ndarray.dump is not available",
        f"{{{{ array.tofile('{canary}') }}}}": "numpy.ndarray.tofile is not available",
        "{{ path.read_text() }}": "pathlib.Path.read_text is not available",
        "{{ function(1) }}": "builtins.len is not available",
    }
    context = {"array": np.arange(3), "path": Path("/etc/hostname"), "function": len}
    for body, reason in refused.items():
        (folder / "t.j2").write_text(body)
        with pytest.raises(HetgenError, match=re.escape(f"{folder / 't.j2'}:1: template refused: {reason}")):
            render("t.j2", (str(folder),), **context)
    assert not canary.exists()
    (folder / "t.j2").write_text(
        "{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}{{ 'a b'.split()|join('+') }}{% endcall %}"
        "{% for i in range(3) %}{{ loop.cycle('x', 'y') }}{% endfor %}"
    )
    assert render("t.j2", (str(folder),)) == "[a+b]xyx"
