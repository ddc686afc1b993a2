"""`threads` per controller (issue 21, item 5): each controller sets its own worker pool, a bare-metal
one has none, and each program is generated with, and priced at, its own count (one truth:
hetgen.platform.threads decides both)."""

from __future__ import annotations

import json
import re

import pytest

import hetgen
from hetgen.errors import HetgenError
from hetgen.frontend import import_model
from hetgen.partition.cost import pool_threads
from hetgen.partition.explain import explain_json
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform_text
from hetgen.platform.threads import has_pool, pool_owner
from hetgen.spec import build_kernel_specs
from tests.test_threads_price import group_cost, three_kernels
from verify_support import verify_matches

M7 = """      kind: cortex-m7
      runtime: aot
      link: {bandwidth_gbps: 1, latency_us: 10}
      flash_origin: 0x00000000
      flash_kib: 4096
      ram_origin: 0x20000000
      ram_kib: 4096
      stack_kib: 16
"""


def a53_and_m7(root_threads: str = "  threads: 4\n", m7_extra: str = "", options: str = "") -> str:
    """Four Cortex-A53s (Linux) as the root, a bare-metal Cortex-M7 beside them."""
    return (
        "name: mixed\ntarget:\n  kind: cortex-a53\n  runtime: vm\n"
        + root_threads
        + "  devices:\n    m7:\n"
        + M7
        + m7_extra
        + options
    )


def by_path(platform) -> dict[str, int]:
    return {target.path_str: pool_threads(platform, target) for target in platform.root.walk()}


def test_a_hosted_root_has_threads_beside_a_bare_metal_coprocessor():
    platform = load_platform_text(a53_and_m7(), "mixed.yaml")
    assert by_path(platform) == {"mixed": 4, "mixed/m7": 1}
    assert platform.root.threads == 4 and platform.target("mixed/m7").threads is None
    assert has_pool(platform.root, platform.root) and not has_pool(platform.root, platform.target("mixed/m7"))
    single = load_platform_text(a53_and_m7(m7_extra="      threads: 1\n"), "mixed.yaml")
    assert by_path(single) == {"mixed": 4, "mixed/m7": 1}


def test_options_threads_is_the_default_of_the_hosted_controllers_only():
    """Before, `options.threads: 4` was refused as soon as any target was bare metal."""
    platform = load_platform_text(a53_and_m7(root_threads="", options="options: {threads: 4}\n"), "mixed.yaml")
    assert platform.root.threads is None and by_path(platform) == {"mixed": 4, "mixed/m7": 1}
    own = load_platform_text(a53_and_m7(root_threads="  threads: 2\n", options="options: {threads: 4}\n"))
    assert by_path(own) == {"mixed": 2, "mixed/m7": 1}  # a controller's own count wins


def test_threads_on_a_bare_metal_controller_are_refused_with_file_and_line():
    text = a53_and_m7(m7_extra="      threads: 2\n")
    with pytest.raises(HetgenError) as error:
        load_platform_text(text, "platforms/mixed.yaml")
    line = text.splitlines().index("      threads: 2") + 1
    message = str(error.value)
    assert f"platforms/mixed.yaml:{line}:" in message, message
    assert "'threads: 2' of target 'mixed/m7' needs OS threads, but it is bare metal (no pthreads)" in message


def test_a_bare_metal_root_refuses_threads_and_gives_no_pool():
    memory = "".join(line[4:] + "\n" for line in M7.splitlines()[3:])  # the M7's map, as a root's
    text = "name: mcu\ntarget:\n  kind: cortex-m7\n  runtime: aot\n  threads: 2\n" + memory
    with pytest.raises(HetgenError) as error:
        load_platform_text(text, "mcu.yaml")
    assert "mcu.yaml:5:" in str(error.value) and "it is bare metal" in str(error.value)
    one = load_platform_text(text.replace("threads: 2", "threads: 1"), "mcu.yaml")
    assert not has_pool(one.root, one.root) and by_path(one) == {"mcu": 1}


def test_threads_on_an_accelerator_are_refused():
    text = "name: s\ntarget:\n  kind: aarch64\n  devices:\n    npu0: {kind: npu, threads: 2}\n"
    with pytest.raises(HetgenError) as error:
        load_platform_text(text, "s.yaml")
    assert "s.yaml:5:" in str(error.value) and "threads is only valid on a controller" in str(error.value)


NESTED = """name: s
target:
  kind: aarch64
  threads: 4
  devices:
    c1:
      kind: aarch64
      threads: 2
      link: {bandwidth_gbps: 4, latency_us: 20}
      devices:
        c2: {kind: aarch64, link: {bandwidth_gbps: 4, latency_us: 20}}
"""


def test_a_coprocessor_linked_into_another_program_runs_on_its_pool():
    """The root's own co-processor is a program of its own (served over the transport); one below it
    is linked into its driver's program (hetgen/build/board.py) and runs on that pool."""
    platform = load_platform_text(NESTED, "s.yaml")
    assert by_path(platform) == {"s": 4, "s/c1": 2, "s/c1/c2": 2}
    assert pool_owner(platform.root, platform.target("s/c1/c2")).path_str == "s/c1"
    with pytest.raises(HetgenError) as error:
        load_platform_text(NESTED.replace("c2: {kind: aarch64,", "c2: {kind: aarch64, threads: 3,"), "s.yaml")
    assert "s.yaml:11:" in str(error.value) and "linked into the program of 's/c1'" in str(error.value)


def test_the_canonical_form_keeps_a_controllers_threads():
    from hetgen.platform import canonical_yaml

    platform = load_platform_text(a53_and_m7(), "mixed.yaml")
    again = load_platform_text(canonical_yaml(platform), "mixed.yaml")
    assert again.root.threads == 4 and by_path(again) == by_path(platform)


def configs(out) -> dict[str, tuple[int, int]]:
    """Each generated program's (HG_THREADS_DEFAULT, HG_THREADS_POOL)."""
    found = {}
    for path in out.rglob("hg_threads_config.h"):
        text = path.read_text()
        default = int(re.search(r"#define HG_THREADS_DEFAULT (\d+)", text).group(1))
        pool = int(re.search(r"#define HG_THREADS_POOL (\d+)", text).group(1))
        found[path.parent.relative_to(out).as_posix()] = (default, pool)
    return found


def explained(graph, text: str, pins: dict[str, str]) -> dict:
    platform = load_platform_text(text)
    return explain_json(place(graph, platform, pins=pins, kernels=build_kernel_specs(graph, platform)), graph)


@pytest.mark.parametrize("root_threads", [1, 4])
def test_each_program_is_generated_and_priced_with_its_own_count(tmp_path, root_threads):
    """The root's big GEMM is priced at its 4 threads, the M7's kernel at 1; each program's
    hg_threads_config.h says the same, and hetgen.json's estimates are explain's."""
    text = a53_and_m7(root_threads=f"  threads: {root_threads}\n")
    pins = {"small_matmul": "m7"}
    out = hetgen.compile(
        load_platform_text(text), three_kernels(), out=tmp_path / "out", build=False, native_only=True, pins=pins
    )
    assert configs(out) == {"mixed": (root_threads, 1), "mixed/m7": (1, 0)}
    assert not (out / "runtime" / "hg_threads_config.h").exists()  # no shared config to shadow a program's
    platform = load_platform_text(text)
    for folder, (default, _) in configs(out).items():
        assert pool_threads(platform, platform.target(folder)) == default
    explanation = explained(import_model(three_kernels()), text, pins)
    assert group_cost(explanation, "small_matmul")[0] == "mixed/m7"
    assert group_cost(explanation, "big_gemm")[0] == "mixed"
    manifest = json.loads((out / "hetgen.json").read_text())
    generated = {tuple(e["nodes"]): (e["target"], e["estimate_us"]) for e in manifest["estimates"] if e["nodes"]}
    explain = {tuple(g["ops"]): (g["target"], g["cost_us"]) for g in explanation["groups"] if g.get("ops")}
    assert generated.keys() <= explain.keys() and any("big_gemm" in n for nodes in generated for n in nodes)
    for nodes, (target, estimate) in generated.items():
        assert explain[nodes][0] == target and explain[nodes][1] == pytest.approx(estimate, abs=1e-3), nodes


def test_the_root_threads_speed_its_kernels_not_the_bare_metal_ones():
    graph = import_model(three_kernels())
    pins = {"small_matmul": "m7", "big_add": "m7"}
    one = explained(graph, a53_and_m7(root_threads="  threads: 1\n"), pins)
    four = explained(graph, a53_and_m7(root_threads="  threads: 4\n"), pins)
    assert group_cost(four, "big_gemm")[1] < group_cost(one, "big_gemm")[1] / 3
    assert group_cost(four, "big_add")[1] == group_cost(one, "big_add")[1]  # the M7: no pool, no pool cost
    assert group_cost(four, "small_matmul")[1] == group_cost(one, "small_matmul")[1]


SOC = """name: s
target:
  kind: aarch64
  runtime: vm
  threads: 4
  devices:
    vdev:
      kind: accelerator-with-coprocessor
      link: {bandwidth_gbps: 4, latency_us: 20}
      host: {kind: riscv64, runtime: graph, threads: 2}
      devices:
        npu0: {kind: npu}
"""


def test_two_hosted_controllers_each_get_their_own_count(tmp_path):
    platform = load_platform_text(SOC)
    assert by_path(platform) == {"s": 4, "s/vdev": 1, "s/vdev/host": 2, "s/vdev/npu0": 1}
    graph = three_kernels()
    out = hetgen.compile(
        platform, graph, out=tmp_path / "out", build=False, native_only=True, pins={"big_gemm": "vdev/host"}
    )
    found = configs(out)
    assert found["s"] == (4, 1) and found["s/vdev/host"] == (2, 1)
    assert all(pool == 0 and default == 1 for folder, (default, pool) in found.items() if folder.endswith("npu0"))


@pytest.mark.cc
def test_a_threaded_root_and_a_poolless_coprocessor_build_and_agree(tmp_path, monkeypatch):
    """The native build links the M7's kernels (HG_THREADS_POOL 0: inline serial loops) beside the
    root's pool (HG_THREADS_POOL 1): warning-free, clean under ASan/UBSan, onnxruntime's outputs."""
    monkeypatch.delenv("HG_THREADS", raising=False)
    model = three_kernels()
    out = hetgen.compile(
        load_platform_text(a53_and_m7(root_threads="  threads: 2\n")),
        model,
        out=tmp_path / "out",
        native_only=True,
        pins={"small_matmul": "m7", "big_add": "m7"},
        werror=True,
        sanitize=("address", "undefined"),
        opt=("-O1",),
    )
    assert configs(out) == {"mixed": (2, 1), "mixed/m7": (1, 0)}
    verify_matches(out, 2)
