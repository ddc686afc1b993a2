"""The platform stage: loading, defaults, figures, tags, canonical form, and every bad input's message.

Each file in tests/bad_platforms/ says on its first line which error must come first
(`# expect: LINE:COL: text`, the text a substring of the message); optional `# also: LINE:COL: text` lines must appear among the other
diagnostics and `# count: N` fixes how many there are.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hetgen.errors import PlatformError
from hetgen.platform import (
    FrozenMap,
    Role,
    Runtime,
    builtin_kinds,
    canonical_yaml,
    default_search_path,
    find_platform,
    json_schema,
    kinds_table,
    load_platform,
    load_platform_text,
    platform_tags,
)
from hetgen.platform.expressions import ExpressionError, evaluate
from hetgen.templates_dir import platforms_dir

BAD = Path(__file__).resolve().parent / "bad_platforms"
SHIPPED = ("host", "soc", "dual", "slowlink")


def load(text: str):
    return load_platform_text(text, file="test.yaml")


# --- bad inputs ---------------------------------------------------------------------------------


def _expectations(path: Path) -> tuple[str, list[str], int | None]:
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()  # some files are not UTF-8
    first = re.fullmatch(r"# expect: (.*)", lines[0]).group(1)
    also = [m.group(1) for line in lines if (m := re.fullmatch(r"# also: (.*)", line))]
    count = next((int(m.group(1)) for line in lines if (m := re.fullmatch(r"# count: (\d+)", line))), None)
    return first, also, count


def _matches(diagnostic: str, path: Path, expected: str) -> bool:
    """`expected` is `LINE:COL: text`: the position must be exact, the text a substring."""
    position, text = re.fullmatch(r"(\d+:\d+): (.*)", expected).groups()
    prefix = f"{path}:{position}: "
    return diagnostic.startswith(prefix) and text in diagnostic[len(prefix) :]


@pytest.mark.parametrize("path", sorted(BAD.glob("*.yaml")), ids=lambda p: p.stem)
def test_bad_platform_reports_expected_first_error(path: Path):
    first, also, count = _expectations(path)
    with pytest.raises(PlatformError) as caught:
        load_platform(str(path))
    diagnostics = [str(d) for d in caught.value.diagnostics]
    assert diagnostics, "a platform error must carry positioned diagnostics"
    assert _matches(diagnostics[0], path, first), diagnostics
    for expected in also:
        assert any(_matches(d, path, expected) for d in diagnostics), (expected, diagnostics)
    if count is not None:
        assert len(diagnostics) == count, diagnostics
    assert diagnostics[0] in str(caught.value)


def test_bad_platform_folder_covers_the_required_cases():
    names = {path.stem for path in BAD.glob("*.yaml")}
    required = {
        "malformed_yaml",
        "unknown_key",
        "unknown_kind",
        "refines_cycle",
        "runtime_on_leaf",
        "devices_on_accelerator",
        "bad_platform_name",
        "bad_device_name",
        "wrong_attribute_type",
        "missing_required_attribute",
        "several_errors",
        "alias_bomb",
        "deep_nesting",
        "huge_scalar",
        "non_utf8",
        "binary_garbage",
        "tabs",
        "duplicate_key",
    }
    assert required <= names


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: p\ntarget: native\nkinds: {a: {refines: a}}\n", "cycle: a -> a"),
        ("name: p\ntarget: {kind: native, toolchain: {cc: 3}}\n", "'cc' of the toolchain"),
        ("name: p\ntarget: {kind: native, figures: {peak_gflops: -1}}\n", "must be at least 0"),
        ("name: p\ntarget: [native]\n", "must be a kind name or a mapping"),
        ("name: p\ntarget: {runtime: vm}\n", "needs 'kind'; known kinds:"),
        (
            "name: p\ntarget: {kind: native, devices: {d: {kind: npu, link: {bandwidth_gbps: 1}}}}\n",
            "needs 'latency_us'",
        ),
        (
            "name: p\ntarget: {kind: native, devices: {d: {kind: npu, link: {bandwidth_gbps: 0, latency_us: 1}}}}\n",
            "at least",
        ),
        ("name: p\ntarget: {kind: native, devices: {int: npu}}\n", "not a valid C identifier"),
        (
            "name: p\ntarget:\n  kind: aarch64\n  devices:\n    v: {kind: accelerator-with-coprocessor, host: npu, devices: {n: npu}}\n",
            "use a controller kind",
        ),
        (
            "name: p\ntarget:\n  kind: aarch64\n  devices:\n    v: {kind: accelerator-with-coprocessor, host: riscv64, devices: {host: npu}}\n",
            "cannot be named 'host'",
        ),
        ("name: p\nkinds: {k: {refines: nothere}}\ntarget: native\n", "refines unknown kind 'nothere'"),
        ("name: p\nkinds: {k: {refines: npu, role: controller}}\ntarget: native\n", "cannot change role"),
        (
            "name: p\nkinds: {k: {refines: npu, attributes: {sram_kib: {type: str, default: x}}}}\ntarget: native\n",
            "not its type",
        ),
        ("name: p\nkinds: {k: {role: accelerator}}\ntarget: native\n", "has no figures"),
        ("name: p\nkinds: {k: {role: composite, patterns: []}}\ntarget: native\n", "runs nothing itself"),
        (
            "name: p\noptions: {pins: {conv: p/v}}\ntarget:\n  kind: aarch64\n  devices:\n    v: {kind: accelerator-with-coprocessor, host: riscv64, devices: {n: npu}}\n",
            "pin to its host",
        ),
        ("name: p\ntarget: native\nname: q\n", "duplicate key 'name'"),
        ("- just\n- a list\n", "must be a mapping"),
    ],
)
def test_more_bad_inputs(text: str, message: str):
    with pytest.raises(PlatformError) as caught:
        load(text)
    assert message in str(caught.value)
    assert all(d.file == "test.yaml" and d.line > 0 for d in caught.value.diagnostics)


def test_missing_file_and_unknown_tag_are_platform_errors(tmp_path: Path):
    with pytest.raises(PlatformError, match="does not exist"):
        load_platform(str(tmp_path / "absent.yaml"))
    with pytest.raises(PlatformError, match=r"no platform named 'sco' \(did you mean 'soc'\?\).*available: .*soc"):
        load_platform("sco")


# --- shorthand, defaults, figures ---------------------------------------------------------------


def test_shorthand_expands_to_the_full_node():
    short = load("name: p\ntarget: native\n")
    full = load("name: p\ntarget: {kind: native}\n")
    assert short == full
    assert short.root.kind.name == "native"
    nested = load("name: p\ntarget:\n  kind: native\n  devices: {npu0: npu}\n")
    assert nested.target("p/npu0").attrs == {
        "sram_kib": 512,
        "macs_per_cycle": 256,
        "int8_macs_per_cycle": 1024,
        "clock_mhz": 800,
        "dma_gbps": 8.0,
        "mac_rows": 16,
        "vector_lanes": 16,
        "sram_bytes_per_cycle": 64.0,
        "dma_setup_cycles": 32,
        "command_cycles": 64,
        "invoke_cycles": 1600,
    }


def test_defaults_applied_and_runtimes_defaulted():
    platform = load(
        "name: p\ntarget:\n  kind: aarch64\n  devices:\n"
        "    v: {kind: accelerator-with-coprocessor, host: riscv64, devices: {n: {kind: npu, sram_kib: 64}}}\n"
    )
    npu = platform.target("p/v/n")
    assert npu.attrs["sram_kib"] == 64 and npu.attrs["clock_mhz"] == 800
    assert isinstance(npu.attrs["dma_gbps"], float)
    assert platform.root.runtime is Runtime.VM  # it drives devices
    assert platform.target("p/v/host").runtime is Runtime.VM  # a composite's host drives its devices
    assert platform.target("p/v").runtime is None and npu.runtime is None
    assert load("name: p\ntarget: native\n").root.runtime is Runtime.AOT  # a lone CPU
    assert platform.options == {"placement": "cost", "pins": {}, "threads": 1}


def test_figures_and_memory_computed_from_attributes():
    platform = load(
        "name: p\ntarget:\n  kind: native\n  devices:\n    a: npu\n    b: {kind: npu, macs_per_cycle: 64, clock_mhz: 500, sram_kib: 128}\n"
    )
    default, small = platform.target("p/a"), platform.target("p/b")
    assert default.figures.peak_gflops == pytest.approx(2 * 256 * 800 / 1000)
    assert small.figures.peak_gflops == pytest.approx(2 * 64 * 500 / 1000)
    # launch: (invoke_cycles + command_cycles) at its 500 MHz, the cycles the simulator counts per invocation
    assert small.figures.bandwidth_gbps == 8.0 and small.figures.launch_us == pytest.approx((1600 + 64) / 500)
    assert small.figures.local_gbps == pytest.approx(64 * 500 / 1000)  # sram_bytes_per_cycle at its clock
    assert default.memory_bytes == 512 * 1024 and small.memory_bytes == 128 * 1024
    assert platform.root.memory_bytes is None


def test_figures_can_be_overridden_per_target():
    platform = load("name: p\ntarget: {kind: native, figures: {peak_gflops: 55.5}}\n")
    assert platform.root.figures.peak_gflops == 55.5
    assert platform.root.figures.bandwidth_gbps == builtin_kinds()["native"].figures["bandwidth_gbps"]


def test_soc_tree_paths_links_and_toolchains():
    soc = load_platform("soc")
    assert [t.path for t in soc.targets()] == [
        ("soc",),
        ("soc", "vdevice0"),
        ("soc", "vdevice0", "host"),
        ("soc", "vdevice0", "npu0"),
    ]
    vdevice = soc.target("soc/vdevice0")
    assert vdevice.role is Role.COMPOSITE and vdevice.controller() is vdevice.host
    assert vdevice.link.bandwidth_gbps == 4 and vdevice.link.latency_us == 20
    assert vdevice.host.runtime is Runtime.GRAPH and soc.root.runtime is Runtime.VM
    assert soc.root.toolchain.triple == "aarch64-linux-gnu"
    assert vdevice.host.toolchain.triple == "riscv64-linux-gnu"
    assert soc.target("soc/vdevice0/npu0").toolchain == vdevice.host.toolchain  # built by its driver
    assert vdevice.host.figures.peak_gflops < soc.root.figures.peak_gflops / 5  # the co-processor is slow


def test_parent_and_driver_follow_the_runtimes():
    soc = load_platform("soc")
    root, vdevice = soc.root, soc.target("soc/vdevice0")
    npu, host = soc.target("soc/vdevice0/npu0"), soc.target("soc/vdevice0/host")
    assert soc.parent(root) is None and soc.driver(root) is None
    assert soc.parent(npu) == vdevice and soc.driver(npu) == host  # the co-processor drives the NPU
    assert soc.parent(host) == vdevice and soc.driver(host) == root  # the host core drives the co-processor
    assert soc.driver(vdevice) == root
    assert [k.name for k in soc.kinds()] == ["aarch64", "accelerator-with-coprocessor", "riscv64", "npu"]


def test_shipped_platforms_load():
    for tag in SHIPPED:
        platform = load_platform(tag)
        assert platform.name == tag
        assert platform.root.role is Role.CONTROLLER
    assert load_platform("host").root.toolchain.triple == ""
    slow = load_platform("slowlink").target("slowlink/npu0").link
    assert slow.bandwidth_gbps <= 0.1 and slow.latency_us >= 100


def test_toolchain_override_accepts_strings_and_lists():
    platform = load(
        "name: p\ntarget:\n  kind: aarch64\n  toolchain: {cflags: -mcpu=cortex-a72 -O3, launcher: [ccache]}\n"
    )
    toolchain = platform.root.toolchain
    assert toolchain.cflags == ("-mcpu=cortex-a72", "-O3") and toolchain.launcher == ("ccache",)
    assert toolchain.triple == "aarch64-linux-gnu"  # the rest comes from the kind


def test_pins_accept_paths_with_or_without_the_root_name():
    platform = load(
        "name: p\ntarget: {kind: native, devices: {n: npu}}\noptions: {pins: {conv1: n, fc: p}, placement: greedy}\n"
    )
    assert platform.options["pins"] == {"conv1": "p/n", "fc": "p"}
    assert platform.options["placement"] == "greedy"


def test_yaml_anchors_and_merge_keys():
    platform = load(
        "name: p\ntarget:\n  kind: native\n  devices:\n"
        "    a: &big {kind: npu, sram_kib: 2048}\n    b: {<<: *big, sram_kib: 1024}\n"
    )
    assert platform.target("p/a").attrs["sram_kib"] == 2048
    assert platform.target("p/b").attrs["sram_kib"] == 1024


def test_platform_values_are_frozen_and_hashable():
    soc = load_platform("soc")
    assert hash(soc.root) == hash(load_platform("soc").root)
    assert {soc.root: 1}[load_platform("soc").root] == 1
    with pytest.raises(AttributeError):
        soc.root.name = "x"
    assert isinstance(soc.root.attrs, FrozenMap)
    with pytest.raises(TypeError):
        soc.target("soc/vdevice0/npu0").attrs["sram_kib"] = 1


# --- kinds ----------------------------------------------------------------------------------------


def test_builtin_kinds():
    kinds = builtin_kinds()
    assert {"cpu", "native", "x86_64", "aarch64", "riscv64", "npu", "accelerator-with-coprocessor"} <= set(kinds)
    assert kinds["npu"].role is Role.ACCELERATOR
    assert kinds["accelerator-with-coprocessor"].role is Role.COMPOSITE
    for name in ("native", "x86_64", "aarch64", "riscv64"):
        assert kinds[name].parent == "cpu" and kinds[name].role is Role.CONTROLLER
        assert kinds[name].patterns[0].chain[0].ops == ("*",)
    assert kinds["aarch64"].toolchain.triple == "aarch64-linux-gnu"
    assert kinds["riscv64"].toolchain.triple == "riscv64-linux-gnu"
    assert kinds["native"].toolchain.triple == ""


def test_npu_patterns_are_parsed_into_steps_and_data():
    patterns = {p.label: p for p in builtin_kinds()["npu"].patterns}
    conv = patterns["conv2d"]
    assert conv.chain[0].ops == ("Conv",) and not conv.chain[0].optional
    assert conv.chain[1].ops == ("Relu", "Clip", "LeakyRelu") and conv.chain[1].optional
    assert conv.where == {"dtype": "float32", "max_kernel": 7, "groups": 1, "fits_memory": True}
    assert patterns["matmul"].chain[0].ops == ("MatMul", "Gemm")
    assert patterns["pool"].chain[0].ops == ("MaxPool", "AveragePool", "GlobalAveragePool")
    assert all(0 < p.efficiency <= 1 for p in patterns.values())


def test_yaml_declared_kind_needs_no_python():
    dual = load_platform("dual")
    vec = dual.target("dual/vec0")
    assert vec.kind.name == "vecunit" and vec.role is Role.ACCELERATOR
    assert vec.figures.peak_gflops == pytest.approx(2 * 32 * 1000 / 1000)
    assert vec.memory_bytes == 256 * 1024
    assert Path(vec.kind.templates) == (platforms_dir() / "../templates/vecunit").resolve()
    assert [k.name for k in dual.declared_kinds] == ["vecunit"]
    assert {p.label for p in vec.kind.patterns} == {"binary", "activation"}


def test_refinement_inherits_and_overrides():
    platform = load(
        "name: p\nkinds:\n"
        "  bignpu:\n    refines: npu\n    doc: more SRAM\n"
        "    attributes: {sram_kib: {default: 4096}, tiles: {type: int, default: 2, choices: [1, 2, 4]}}\n"
        "    figures: {peak_gflops: '2 * macs_per_cycle * clock_mhz * tiles / 1000'}\n"
        "    patterns:\n      - {label: add, chain: ['Add|Sub', 'Relu?'], efficiency: 0.2}\n"
        "      - {label: softmax, chain: [Softmax]}\n"
        "  biggernpu: {refines: bignpu, attributes: {tiles: {default: 4}}}\n"
        "target: {kind: native, devices: {n: biggernpu}}\n"
    )
    kind = platform.target("p/n").kind
    assert kind.parent == "bignpu" and kind.role is Role.ACCELERATOR and kind.doc == "more SRAM"
    inherited = [spec.name for spec in builtin_kinds()["npu"].attributes]
    assert [spec.name for spec in kind.attributes] == [*inherited, "tiles"]
    assert inherited[:4] == ["sram_kib", "macs_per_cycle", "clock_mhz", "dma_gbps"]
    assert kind.attribute("sram_kib").default == 4096 and kind.attribute("sram_kib").type == "int"
    assert kind.attribute("tiles").choices == (1, 2, 4)
    labels = [p.label for p in kind.patterns]
    int8 = [
        "qconv2d",
        "depthwise_qconv2d",
        "qmatmul",
        "qadd",
        "qpool",
        "maxpool_int8",
        "qlookup",
        "quantize",
        "dequantize",
    ]
    plain = ["conv2d", "depthwise_conv2d", "matmul", "add", "pool"]
    assert labels == [*plain, *int8, "conv_residual", "qconv_residual", "softmax"]  # same label replaces
    assert next(p for p in kind.patterns if p.label == "add").chain[0].ops == ("Add", "Sub")
    assert platform.target("p/n").figures.peak_gflops == pytest.approx(2 * 256 * 800 * 4 / 1000)
    assert kind.templates == builtin_kinds()["npu"].templates
    with pytest.raises(PlatformError, match="must be one of: 1, 2$"):
        load(
            "name: p\nkinds: {b: {refines: npu, attributes: {t: {type: int, default: 1, choices: [1, 2]}}}}\n"
            "target: {kind: native, devices: {n: {kind: b, t: 3}}}\n"
        )


def test_expressions_are_evaluated_without_eval():
    assert evaluate("2 * a * b / 1000", {"a": 256, "b": 800}) == pytest.approx(409.6)
    assert evaluate("max(a, 3) - -1", {"a": 2}) == 4.0
    assert evaluate(7, {}) == 7.0
    for bad in ("a.__class__", "open('x')", "a if a else 1", "[1]", "2 ** 1000", "1 / 0", "lambda: 1"):
        with pytest.raises(ExpressionError):
            evaluate(bad, {"a": 1})


# --- canonical form, tags, descriptions ---------------------------------------------------------


@pytest.mark.parametrize("tag", SHIPPED)
def test_canonical_form_round_trips(tag: str):
    platform = load_platform(tag)
    text = canonical_yaml(platform)
    again = load_platform_text(text, file="canonical.yaml")
    assert again == platform
    assert canonical_yaml(again) == text  # a fixed point, so it is deterministic too


def test_canonical_form_round_trips_refinements_and_overrides():
    platform = load(
        "name: p\nkinds:\n  base: {role: accelerator, attributes: {w: {type: int, required: true}},"
        " figures: {peak_gflops: w, bandwidth_gbps: 1, launch_us: 1e1}, patterns: [{label: x, chain: ['*']}]}\n"
        "  child: {refines: base, attributes: {mode: {type: str, default: 'yes', choices: ['yes', 'no']},"
        " flags: {type: 'list[str]', default: ['a, b', '1e3']}, fast: {type: bool, default: false}}}\n"
        "target:\n  kind: native\n  figures: {launch_us: 0.5}\n  toolchain: {launcher: ccache}\n"
        "  devices: {c: {kind: child, w: 3, mode: 'no', link: {bandwidth_gbps: 1, latency_us: 0}}}\n"
        "options: {pins: {conv: c}}\n"
    )
    text = canonical_yaml(platform)
    assert "figures: {launch_us: 0.5}" in text and "mode: 'no'" in text
    assert platform.target("p/c").attrs["flags"] == ("a, b", "1e3")
    assert load_platform_text(text) == platform


def test_tags_found_on_the_search_path(tmp_path: Path):
    (tmp_path / "mine.yaml").write_text("name: mine\ntarget: native\n")
    (tmp_path / "soc.yaml").write_text("name: shadow\ntarget: native\n")
    assert load_platform("mine", (str(tmp_path),)).name == "mine"
    assert load_platform("soc", (str(tmp_path),)).name == "shadow"  # earlier folders win
    assert load_platform("soc").name == "soc"  # the shipped one
    assert find_platform(str(tmp_path / "mine.yaml")) == tmp_path / "mine.yaml"
    assert load_platform(tmp_path / "mine.yaml").name == "mine"  # a Path is a path, never a tag
    assert {"mine", "soc", "host"} <= set(platform_tags((str(tmp_path),)))
    with pytest.raises(PlatformError, match="no platform named 'mien'"):
        load_platform("mien", (str(tmp_path),))


def test_default_search_path_reads_only_what_it_is_given(tmp_path: Path):
    env = {"HETGEN_PLATFORM_PATH": f"/a/b{__import__('os').pathsep}/c"}
    assert default_search_path(env, cwd=tmp_path) == (str(tmp_path / "platforms"), "/a/b", "/c")
    assert default_search_path({}, cwd=tmp_path) == (str(tmp_path / "platforms"),)


def test_kinds_table_lists_every_kind_with_its_attributes():
    table = kinds_table(load_platform("dual").declared_kinds)
    for name in (*builtin_kinds(), "vecunit"):
        assert re.search(rf"^{re.escape(name)} \(", table, re.MULTILINE), name
    assert "sram_kib" in table and "default 512" in table and "refines cpu" in table


def test_json_schema_accepts_shipped_platforms_and_flags_unknown_keys():
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    for tag in SHIPPED:
        platform = load_platform(tag)
        schema = json_schema(platform.declared_kinds)
        jsonschema.Draft202012Validator.check_schema(schema)
        document = yaml.safe_load(Path(find_platform(tag)).read_text())
        assert not list(jsonschema.Draft202012Validator(schema).iter_errors(document)), tag
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    bad = {"name": "p", "target": {"kind": "native", "devices": {"n": {"kind": "npu", "sram_kb": 1}}}}
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(bad))
    good = {"name": "p", "target": {"kind": "native", "devices": {"n": {"kind": "npu", "sram_kib": 1}}}}
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(good))


@pytest.mark.parametrize(
    "text", ["!!int\n", "a: !!int x\n", "a: !!python/object {}\n", "<<: 3\n", "a: &x [*x]\n", "a: \x01\n"]
)
def test_odd_yaml_is_reported_not_raised(text: str):
    with pytest.raises(PlatformError) as caught:
        load(text)
    assert caught.value.diagnostics and caught.value.diagnostics[0].line >= 1
