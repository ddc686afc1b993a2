"""Memory banks (`memories:` on the root, hetgen/platform/banks.py, hetgen/lower/banks.py): loading
and refusals with file:line, the assignment by heat (weights in the read-only bank, spills to the
slow bank when the fast one is full, deterministic), the price of each bank's accesses in the
placement's groups and total (one calculation with explain's per-bank lines and the manifest's
estimates; no banks: priced as placed), explain's plan per bank, the generated storage and linker
script, hosted banks (no origin, the weights' bank checked); and (external) the multi-bank ELF under
qemu-system-arm matching onnxruntime, each section in its bank."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import hetgen
from hetgen.cli import main
from hetgen.errors import HetgenError
from hetgen.lower import lower
from hetgen.lower.banks import plan_banks
from hetgen.lower.memory import Interval
from hetgen.partition.search import place
from hetgen.pipeline import import_graph
from hetgen.platform.banks import holding
from hetgen.platform.loader import load_platform, load_platform_text
from verify_support import verify_matches

REPO = Path(__file__).resolve().parent.parent
BANKS = REPO / "platforms/mcu-m55-banks.yaml"
MODEL = REPO / "examples/resnet_tiny.onnx"


def platform_text(memories: str, extra: str = "") -> str:
    return f"name: t\ntarget:\n  kind: cortex-m55\n  runtime: aot\n{extra}  memories:\n{memories}"


def refusal(text: str) -> str:
    with pytest.raises(HetgenError) as caught:
        load_platform_text(text, "banks.yaml")
    return str(caught.value)


def test_shipped_banked_platform_loads_with_what_each_bank_holds():
    target = load_platform(BANKS).root
    assert [(b.name, b.origin, b.size // 1024, b.read_only) for b in target.memories] == [
        ("itcm", 0, 512, True),
        ("dtcm", 0x20000000, 64, False),
        ("sram", 0x21000000, 4096, False),
    ]
    holds = {b.name: b.holds for b in target.memories}
    assert holds == {"itcm": ("code", "weights"), "dtcm": ("arena", "stack"), "sram": ("arena",)}
    assert [b.name for b in holding(target.memories, "arena")] == ["dtcm", "sram"]  # fastest first
    assert target.memories[2].latency_ns == pytest.approx(4 * 1e3 / 32)  # latency_cycles at clock_mhz


def test_explicit_holds_give_the_arena_preference_order():
    text = platform_text(
        "    flash: {origin: 0, kib: 256, bandwidth_gbps: 0.1, read_only: true, holds: [code, weights]}\n"
        "    slow: {origin: 0x20000000, kib: 64, bandwidth_gbps: 0.1, holds: [arena, stack]}\n"
        "    fast: {origin: 0x30000000, kib: 64, bandwidth_gbps: 1, holds: [arena]}\n"
    )
    target = load_platform_text(text, "banks.yaml").root
    assert [b.name for b in holding(target.memories, "arena")] == ["slow", "fast"]  # as written


def test_canonical_tree_reloads_to_the_same_banks(capsys):
    assert main(["check", str(BANKS)]) == 0
    canonical = capsys.readouterr().out
    assert "flash_kib" not in canonical and "memories:" in canonical
    assert load_platform_text(canonical, "canonical.yaml").root == load_platform(BANKS).root


@pytest.mark.parametrize(
    "memories, extra, expected",
    [
        (
            "    ram: {origin: 0x20000000, kib: 64, bandwith_gbps: 1}\n",
            "",
            "banks.yaml:6:",  # the misspelt key's line
        ),
        (
            "    a: {origin: 0x20000000, kib: 64, bandwidth_gbps: 1}\n"
            "    b: {origin: 0x2000f000, kib: 64, bandwidth_gbps: 1}\n",
            "",
            "bank 'b' of target 't' (kind cortex-m55, controller) (from 0x2000f000) overlaps bank 'a'",
        ),
        (
            "    big: {origin: 0xffff0000, kib: 128, bandwidth_gbps: 1}\n",
            "",
            "past the 32-bit address space",
        ),
        (
            "    ram: {kib: 64, bandwidth_gbps: 1}\n",
            "",
            "needs an 'origin'",
        ),
        (
            "    ram: {origin: 0x20000000, kib: 64, bandwidth_gbps: 1}\n",
            "  ram_kib: 64\n",
            "declares memories, which replace ram_kib",
        ),
        (
            "    rom: {origin: 0, kib: 64, bandwidth_gbps: 1, read_only: true, holds: [arena]}\n",
            "",
            "is read_only but holds the arena",
        ),
        (
            "    ram: {origin: 0x20000000, kib: 64, bandwidth_gbps: 1}\n",
            "",
            "holds the code and weights but is not read_only",
        ),
        (
            "    ram: {origin: 0x20000000, kib: 64, bandwidth_gbps: 1, latency_ns: 1, latency_cycles: 2}\n",
            "",
            "gives both 'latency_ns' and 'latency_cycles'",
        ),
        (
            "    ram: {origin: 0x20000000, kib: 64, bandwidth_gbps: 1, shared: false}\n",
            "",
            "'shared: false' declares a memory the controller cannot reach",
        ),
    ],
)
def test_bad_memories_are_refused_with_file_and_line(memories, extra, expected):
    message = refusal(platform_text(memories, extra))
    assert expected in message and "banks.yaml:" in message, message


def test_memories_below_the_root_are_refused():
    text = (
        "name: t\ntarget:\n  kind: cortex-m4\n  runtime: vm\n  devices:\n    npu0: {kind: npu}\n"
        "    core:\n      kind: accelerator-with-coprocessor\n      host:\n        kind: riscv64\n"
        "        memories: {ram: {kib: 64, bandwidth_gbps: 1}}\n      devices: {npu1: {kind: npu}}\n"
    )
    assert "only accepted on the root controller" in refusal(text)


def intervals():
    """A chain of 64 KiB activations (each live two steps, touched twice), a 32 KiB skip tensor live
    across the whole chain (touched twice over 8 steps: cold), and a 4 KiB scratch (hot)."""
    chain = [Interval(f"t{i}", 64 << 10, i, i + 1) for i in range(8)]
    return chain + [Interval("skip", 32 << 10, 0, 8), Interval("scratch:3", 4 << 10, 3, 3)]


def test_hot_buffers_fill_the_fast_bank_and_the_cold_ones_spill():
    target = load_platform(BANKS).root  # dtcm 64 KiB, then sram
    accesses = {f"t{i}": 2 for i in range(8)} | {"skip": 2, "scratch:3": 1}
    reserved = {"dtcm": 16 << 10}  # 48 KiB left for the arena: no 64 KiB chain tensor fits
    plan, arenas = plan_banks(target, intervals(), accesses, reserved)
    dtcm, sram = arenas
    assert dtcm.bank.name == "dtcm" and "scratch:3" in dtcm.buffers and "skip" in dtcm.buffers
    assert all(f"t{i}" in sram.buffers for i in range(8))
    assert dtcm.size <= dtcm.capacity == (64 - 16) << 10
    assert sram.base == dtcm.size and plan.arena_size == dtcm.size + sram.size
    # more room (140 KiB: the chain's two live tensors and the scratch, not the skip tensor besides):
    # the hot chain comes into the fast bank and the cold skip tensor is the one to spill
    roomy = load_platform_text(BANKS.read_text().replace("kib: 64,", "kib: 140,"), "roomy.yaml").root
    plan, (dtcm, sram) = plan_banks(roomy, intervals(), accesses, {})
    assert sram.buffers == ("skip",) and all(f"t{i}" in dtcm.buffers for i in range(8))
    # deterministic, whatever order the intervals come in
    assert plan_banks(roomy, list(reversed(intervals())), accesses, {}) == (plan, (dtcm, sram))


def test_the_last_bank_overflowing_is_refused_with_its_name_and_the_bytes_over(tmp_path):
    text = platform_text(
        "    rom: {origin: 0, kib: 512, bandwidth_gbps: 1, read_only: true}\n"
        "    ram: {origin: 0x20000000, kib: 24, bandwidth_gbps: 1}\n"
    )
    path = Path(__file__).parent / "banks.yaml"
    platform = load_platform_text(text, str(path))
    with pytest.raises(HetgenError) as caught:
        hetgen.compile(platform, MODEL, out=tmp_path / "out", build=False)
    message = str(caught.value)
    assert "bank 'ram' (24 KiB) overflows by 78,912 B" in message and "Fix:" in message, message


def test_weights_past_their_bank_are_refused_per_bank_before_the_build(tmp_path):
    small = load_platform_text(BANKS.read_text().replace("kib: 512,", "kib: 128,"), "small.yaml")
    with pytest.raises(HetgenError) as caught:
        hetgen.compile(small, MODEL, out=tmp_path / "out", build=False)
    message = str(caught.value)
    assert "bank 'itcm' (128 KiB) overflows by 179,776 B: 310,848 B needed (weights 310,848 B)" in message, message
    assert "Nothing was built" in message and "Fix:" in message


def test_a_spill_under_a_runtime_that_resolves_one_arena_is_refused(tmp_path):
    graph_runtime = load_platform_text(BANKS.read_text().replace("runtime: aot", "runtime: graph"), "graph.yaml")
    with pytest.raises(HetgenError) as caught:
        hetgen.compile(graph_runtime, MODEL, out=tmp_path / "out", build=False)
    assert "spills from bank 'dtcm' to 'sram', which runtime 'graph' cannot address" in str(caught.value)


def test_a_slower_bank_prices_the_same_accesses_higher():
    fast, slow = load_platform(BANKS).root.memories[1:]
    assert slow.access_us(1 << 20, 10) > fast.access_us(1 << 20, 10) > 0
    assert fast.access_us(1 << 20, 10) == pytest.approx((1 << 20) / 128 + 10 * 1e3 / 32 / 1e3)


def explained(capsys, text: str, tmp_path, name: str) -> tuple[dict, dict]:
    """explain --format json of the banked platform as `text`: (its document, its bank rows by name)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    assert main(["explain", str(path), str(MODEL), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    return document, {row["bank"]: row for row in document["banks"]}


# The spill bank slow enough that every group touching it is memory-bound, then slower two ways: its
# bandwidth halved, a latency on each access (latency_ns, and latency_cycles at the 32 MHz clock).
MEMORY_BOUND = "bandwidth_gbps: 0.0002, latency_cycles: 4}"


@pytest.mark.parametrize(
    "slower",
    [
        "bandwidth_gbps: 0.0001, latency_cycles: 4}",
        "bandwidth_gbps: 0.0002, latency_ns: 40000}",
        "bandwidth_gbps: 0.0002, latency_cycles: 1280}",
    ],
    ids=["bandwidth", "latency_ns", "latency_cycles"],
)
def test_a_slower_spill_bank_raises_the_groups_and_the_total_by_its_bank_line(capsys, tmp_path, slower):
    base_text = BANKS.read_text().replace("bandwidth_gbps: 0.032, latency_cycles: 4}", MEMORY_BOUND)
    assert base_text != BANKS.read_text()
    base, base_rows = explained(capsys, base_text, tmp_path, "base")
    slow, slow_rows = explained(capsys, base_text.replace(MEMORY_BOUND, slower), tmp_path, "slow")
    for document, rows in ((base, base_rows), (slow, slow_rows)):
        groups = [g for g in document["groups"] if g["bank_us"]]
        assert groups and all(g["bank_us"].keys() <= rows.keys() for g in groups)
        for bank, row in rows.items():  # each bank's line is the sum of the groups' traffic there
            assert sum(g["bank_us"].get(bank, 0.0) for g in groups) == pytest.approx(row["access_us"], abs=1e-2)
        for g in groups:
            if "sram" in g["bank_us"]:  # memory-bound: its price is its launch and its banks' traffic
                assert g["cost_us"] == pytest.approx(g["launch_us"] + sum(g["bank_us"].values()))
    delta = slow_rows["sram"]["access_us"] - base_rows["sram"]["access_us"]
    assert delta > 100  # us: the slower bank is dearer, and by as much in the total
    assert slow["total_us"] - base["total_us"] == pytest.approx(delta, abs=1e-2)
    assert slow_rows["sram"]["touched_bytes"] == base_rows["sram"]["touched_bytes"]  # same plan, same traffic
    for a, b in zip(base["groups"], slow["groups"]):
        assert b["cost_us"] - a["cost_us"] == pytest.approx(b["bank_us"].get("sram", 0) - a["bank_us"].get("sram", 0))
    assert slow["total_us"] == pytest.approx(sum(g["cost_us"] for g in slow["groups"]))  # one core, no copies


def test_banks_at_the_cpus_own_figures_price_as_the_search_did():
    """Every bank at the core's one bandwidth (cortex-m55 at 32 MHz: 8 x 32 / 1000 GB/s) and no
    latency: the banked price is the plain one, group by group (the banks' shares sum to its bytes)."""
    text = BANKS.read_text()
    for figure in ("bandwidth_gbps: 0.128, latency_cycles: 1", "bandwidth_gbps: 0.032, latency_cycles: 4"):
        text = text.replace(figure, "bandwidth_gbps: 0.256")
    platform = load_platform_text(text, "even.yaml")
    graph = import_graph(MODEL, {})
    placement = place(graph, platform)
    lowered = lower(graph, platform, placement)
    priced = lowered.placement
    assert [g.bank_us for g in priced.groups if g.bank_us]  # priced per bank
    assert [g.cost_us for g in priced.groups] == pytest.approx([g.cost_us for g in placement.groups])
    assert priced.total_us == pytest.approx(placement.total_us) and lowered.estimate_us == priced.total_us


def test_a_platform_without_memories_prices_exactly_as_placed():
    platform = load_platform(REPO / "platforms/mcu-m55.yaml")
    graph = import_graph(MODEL, {})
    placement = place(graph, platform)
    lowered = lower(graph, platform, placement)
    assert lowered.placement is placement and lowered.estimate_us == placement.total_us
    assert not any(g.bank_us for g in placement.groups) and lowered.root.bank_traffic == ()


def test_the_generated_estimates_are_the_banked_prices(tmp_path):
    """The manifest's estimates (what `hetgen bench` replays and compares) are the banked groups'."""
    platform = load_platform(BANKS)
    graph = import_graph(MODEL, {})
    placement = place(graph, platform)
    lowered = lower(graph, platform, placement)
    assert lowered.placement.total_us > placement.total_us  # the spill bank is slower than the core's figure
    out = hetgen.compile(BANKS, MODEL, out=tmp_path / "out", build=False)
    manifest = json.loads((out / "hetgen.json").read_text())
    assert manifest["estimate_us"] == pytest.approx(lowered.placement.total_us, abs=1e-3)
    by_group = {e["name"]: e["estimate_us"] for e in manifest["estimates"] if e["label"] != "transfer"}
    assert by_group == pytest.approx({g.name: g.cost_us for g in lowered.placement.groups}, abs=1e-3)


def explain_banks(capsys, platform) -> dict:
    assert main(["explain", str(platform), str(MODEL), "--format", "json"]) == 0
    return {row["bank"]: row for row in json.loads(capsys.readouterr().out)["banks"]}


def test_explain_shows_the_plan_per_bank_and_a_slower_spill_bank_costs_more(capsys, tmp_path):
    rows = explain_banks(capsys, BANKS)
    assert rows["itcm"]["weights"] and rows["itcm"]["used"] >= 310_000  # every weight block in flash
    assert rows["dtcm"]["tensors"] and rows["sram"]["tensors"]  # the arena spills: 64 KiB is too small
    assert rows["dtcm"]["used"] <= 64 * 1024 - rows["dtcm"]["reserved"]
    slower = tmp_path / "slower.yaml"
    slower.write_text(BANKS.read_text().replace("bandwidth_gbps: 0.032", "bandwidth_gbps: 0.008"))
    assert explain_banks(capsys, slower)["sram"]["access_us"] > 2 * rows["sram"]["access_us"]
    assert main(["explain", str(BANKS), str(MODEL)]) == 0
    text = capsys.readouterr().out
    assert "memory banks of mcu_m55_banks" in text and "  sram: 65,536 of 4,194,304 B used" in text


def test_generated_storage_and_linker_script_name_each_bank(tmp_path):
    out = hetgen.compile(BANKS, MODEL, out=tmp_path / "out", build=False)
    model = (out / "mcu_m55_banks/model.c").read_text()
    assert (
        'hg_mcu_m55_banks_static_workspace[HG_MCU_M55_BANKS_WORKSPACE_SIZE] __attribute__((aligned(64), section(".bss.hg_bank_dtcm")))'
        in model
    )
    assert (
        'static unsigned char hg_mcu_m55_banks_bank_sram[65536] __attribute__((aligned(64), section(".bss.hg_bank_sram")));'
        in model
    )
    assert "hg_mcu_m55_banks_bank_sram + 0u" in model  # a spilled buffer is named in its bank
    script = (out / "mcu_m55_banks/link.ld").read_text()
    for region in (
        "BANK_ITCM (rx) : ORIGIN = 0x00000000, LENGTH = 524288",
        "BANK_DTCM (rwx) : ORIGIN = 0x20000000, LENGTH = 65536",
        "BANK_SRAM (rwx) : ORIGIN = 0x21000000, LENGTH = 4194304",
    ):
        assert region in script
    assert ".hg_bank_sram (NOLOAD)" in script and "*(.bss.hg_bank_sram)" in script


def big_io_model():
    """A Conv + Relu whose input and output (72 KiB each) outgrow the 64 KiB DTCM that holds the stack."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(3).standard_normal((8, 8, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "big_io",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 48, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 48, 48])],
        [weights],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_example_buffers_past_the_stacks_bank_go_to_the_bank_that_takes_the_arenas_rest(tmp_path):
    """The board example's buffers lie beside the stack where they fit (resnet_tiny), else in the
    last arena bank's section, zeroed by the run on zero inputs (a NOLOAD section is not)."""
    small = hetgen.compile(BANKS, MODEL, out=tmp_path / "small", build=False)
    assert "section(" not in (small / "mcu_m55_banks/board_main.c").read_text().split("static void report")[0]
    out = hetgen.compile(BANKS, big_io_model(), out=tmp_path / "big", build=False)
    main_c = (out / "mcu_m55_banks/board_main.c").read_text()
    for buffer in ("input_0[73728]", "output_0[73728]"):
        assert f'{buffer} __attribute__((aligned(8), section(".bss.hg_bank_sram")));' in main_c
    assert "memset(input_0, 0, sizeof input_0);" in main_c


HOSTED = """name: hb
target:
  kind: native
  runtime: aot
  memories:
    fast: {kib: 4, bandwidth_gbps: 50}
    dram: {kib: 65536, bandwidth_gbps: 10, latency_ns: 80}
"""


@pytest.mark.cc
def test_hosted_banked_root_spills_and_matches_onnxruntime_under_sanitizers(tmp_path):
    """A hosted root's banks have no sections: the spilled buffers are a static array; clean under
    ASan/UBSan, and the same numbers as onnxruntime."""

    platform = tmp_path / "hb.yaml"
    platform.write_text(HOSTED)
    from hetgen.models import tiny_cnn

    out = hetgen.compile(
        platform,
        tiny_cnn(seed=1),
        out=tmp_path / "out",
        native_only=True,
        werror=True,
        sanitize=("address", "undefined"),
        opt=("-O1",),
    )
    model = (out / "hb/model.c").read_text()
    assert "static unsigned char hg_hb_bank_dram[" in model and "hg_hb_bank_dram + " in model
    verify_matches(out, 1)


TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")


@pytest.mark.cc
@pytest.mark.external
@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_banked_elf_runs_under_qemu_matches_onnxruntime_with_each_section_in_its_bank(tmp_path):
    from hetgen.build.baremetal import section_headers
    from hetgen.runtime.verify import verify

    out = hetgen.compile(BANKS, MODEL, out=tmp_path / "out", werror=True, opt=("-O2",), native_tuning=False)
    (program,) = json.loads((out / "hetgen.json").read_text())["board"]["programs"]
    sections = {name: (address, size) for name, address, size, *_ in section_headers(out / program["path"])}
    banks = {
        "itcm": range(0, 512 << 10),
        "dtcm": range(0x20000000, 0x20000000 + (64 << 10)),
        "sram": range(0x21000000, 0x21000000 + (4 << 20)),
    }
    for name, bank in {
        ".text": "itcm",
        ".rodata": "itcm",
        ".hg_bank_dtcm": "dtcm",
        ".bss": "dtcm",
        ".stack": "dtcm",
        ".hg_bank_sram": "sram",
    }.items():
        address, size = sections[name]
        assert address in banks[bank] and address + size - 1 in banks[bank], (name, hex(address), size)
    assert sections[".hg_bank_sram"][1] > 0  # the arena did spill
    assert ".hg_bank_sram" in (out / "board/bin/hg_mcu_m55_banks_main.map").read_text()
    errors = verify(out, seed=2, emulate=True)
    assert errors and all(e.ok for e in errors), errors


@pytest.mark.cc
@pytest.mark.external
@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_example_buffers_in_the_sram_bank_run_under_qemu_and_match_onnxruntime(tmp_path):
    from hetgen.build.baremetal import section_headers
    from hetgen.runtime.verify import verify

    out = hetgen.compile(BANKS, big_io_model(), out=tmp_path / "out", werror=True, opt=("-O2",), native_tuning=False)
    (program,) = json.loads((out / "hetgen.json").read_text())["board"]["programs"]
    sections = {name: (address, size) for name, address, size, *_ in section_headers(out / program["path"])}
    address, size = sections[".hg_bank_sram"]
    assert 0x21000000 <= address and size >= 2 * 73728  # the example's buffers, past the DTCM
    errors = verify(out, seed=2, emulate=True)
    assert errors and all(e.ok for e in errors), errors


def test_a_hosted_bank_with_an_origin_is_refused():
    text = HOSTED.replace("fast: {kib: 4,", "fast: {origin: 0x20000000, kib: 4,")
    assert "bank 'fast' of target 'hb'" in refusal(text) and "only a bare-metal image links to" in refusal(text)


def test_hosted_weights_past_their_bank_are_refused_with_its_name_and_the_bytes_over(tmp_path):
    text = HOSTED.replace("  memories:\n", "  memories:\n    rom: {kib: 64, bandwidth_gbps: 50, read_only: true}\n")
    with pytest.raises(HetgenError) as caught:
        hetgen.compile(load_platform_text(text, "hb.yaml"), MODEL, out=tmp_path / "out", build=False)
    message = str(caught.value)
    assert "bank 'rom' (64 KiB) overflows by 250,944 B: 316,480 B needed (weights 316,480 B)" in message, (
        message
    )  # packed layouts
