"""`options.threads` is priced as the generated code runs it (one truth).

A platform's `threads: N` compiles a worker pool into every controller's program; the GEMM splits a
large product between the threads at run time (templates/runtime/hg_gemm.c) and LayerNorm, Softmax,
attention, large elementwise and pooling kernels run tasks cut at generate time
(hetgen/ops/_parallel.py). The cost model reads how each kernel splits from the kernel itself
(`Kernel.parallel`, set by the lowering from the split it renders), so explain and the placement
search see the threads: a big GEMM's time drops by about N, a small kernel's and a memory-bound
kernel's do not, and a controller with threads can win a layer an accelerator won before.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen import lower
from hetgen.codegen.kernels import kernel_source
from hetgen.frontend import import_model
from hetgen.models import mobilenet_v2, resnet, transformer_encoder
from hetgen.ops import _gemm_plan, _parallel
from hetgen.partition.cost import Calibration, Work, kernel_us, pool_threads
from hetgen.partition.explain import explain_json
from hetgen.partition.search import place
from hetgen.partition.space import SearchSpace
from hetgen.platform.loader import load_platform_text
from hetgen.platform.model import CostFigures
from hetgen.spec import build_kernel_specs
from tests.test_one_truth import REPO

F = TensorProto.FLOAT
NATIVE = "peak_gflops: 30, bandwidth_gbps: 20, launch_us: 0.05"  # the native kind's figures (kinds/cpu.yaml)


def host(threads: int) -> str:
    return f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{threads: {threads}}}\n"


def three_kernels():
    """A big GEMM (67 M multiply-adds), a large Add (memory-bound, cut into tasks) and a small MatMul
    (far below the GEMM's split threshold)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((512, 512)).astype(np.float32), "w")
    ws = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "ws")
    nodes = [
        helper.make_node("Gemm", ["x", "w"], ["y"], name="big_gemm"),
        helper.make_node("Add", ["y", "x2"], ["z"], name="big_add"),
        helper.make_node("MatMul", ["a", "ws"], ["s"], name="small_matmul"),
    ]
    inputs = [
        helper.make_tensor_value_info(n, F, s) for n, s in (("x", [256, 512]), ("x2", [256, 512]), ("a", [4, 16]))
    ]
    outputs = [helper.make_tensor_value_info(n, F, s) for n, s in (("z", [256, 512]), ("s", [4, 16]))]
    graph = helper.make_graph(nodes, "three", inputs, outputs, [w, ws])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def explained(graph, platform_text: str) -> dict:
    platform = load_platform_text(platform_text)
    kernels = build_kernel_specs(graph, platform)
    return explain_json(place(graph, platform, kernels=kernels), graph)


def group_cost(explanation: dict, node: str) -> tuple[str, float]:
    group = next(g for g in explanation["groups"] if any(node in op for op in g["ops"]))
    return group["target"], group["cost_us"]


def test_explain_prices_the_threads():
    graph = import_model(three_kernels())
    one, four = explained(graph, host(1)), explained(graph, host(4))
    launch = 0.05
    gemm_1, gemm_4 = group_cost(one, "big_gemm")[1], group_cost(four, "big_gemm")[1]
    # 32 row panels of 8 (the split side: B is packed), 8 per thread: the compute part drops 4x,
    # plus one pool call
    # (the JSON's times are rounded to 1 ns)
    assert (gemm_1 - launch) / (gemm_4 - launch - _parallel.POOL_CALL_US) == pytest.approx(4.0, rel=1e-5)
    assert gemm_1 / gemm_4 > 3.9
    # the Add is cut into tasks but its bytes dominate: the threads share the memory bus
    add_1, add_4 = group_cost(one, "big_add")[1], group_cost(four, "big_add")[1]
    assert add_4 == pytest.approx(add_1 + _parallel.POOL_CALL_US)
    # 4 x 16 x 16 stays on the caller: no speed-up, no pool cost
    assert group_cost(four, "small_matmul")[1] == group_cost(one, "small_matmul")[1]
    assert four["total_us"] < one["total_us"] / 3


def test_threads_one_is_the_serial_price():
    """No `threads` and `threads: 1` price every kernel the same (one thread, no pool cost)."""
    graph = import_model(three_kernels())
    default = explained(graph, "name: host\ntarget: {kind: native, runtime: aot}\n")
    assert explained(graph, host(1)) == default


def npu_beside_host(threads: int) -> str:
    return f"""name: beside
target:
  kind: native
  runtime: aot
  devices:
    npu0: {{kind: npu, macs_per_cycle: 32, clock_mhz: 1000, link: {{bandwidth_gbps: 8, latency_us: 5}}}}
options: {{threads: {threads}}}
"""


def test_threads_move_a_layer_from_the_accelerator_to_the_controller():
    """An NPU of 64 GFLOP/s beats one native thread on the big GEMM, not four."""
    graph = import_model(three_kernels())
    one, four = explained(graph, npu_beside_host(1)), explained(graph, npu_beside_host(4))
    assert group_cost(one, "big_gemm")[0] == "beside/npu0"
    assert group_cost(four, "big_gemm")[0] == "beside"
    assert four["total_us"] < one["total_us"]


def candidate_times(graph, platform_text: str) -> dict[tuple[str, tuple[int, ...]], float]:
    platform = load_platform_text(platform_text)
    space = SearchSpace(graph, platform, Calibration(), build_kernel_specs(graph, platform))
    return {(space.paths[c.loc], c.nodes): c.compute_us for c in space.candidates}


def test_an_accelerator_is_not_priced_with_the_pool():
    graph = import_model(three_kernels())
    one, four = candidate_times(graph, npu_beside_host(1)), candidate_times(graph, npu_beside_host(4))
    on_npu = [key for key in one if key[0] == "beside/npu0"]
    assert on_npu and all(one[key] == four[key] for key in on_npu)
    assert four[("beside", (0,))] < one[("beside", (0,))] / 3


SOC = """name: s
target:
  kind: aarch64
  runtime: vm
  devices:
    vdev:
      kind: accelerator-with-coprocessor
      link: {bandwidth_gbps: 4, latency_us: 20}
      host: {kind: riscv64, runtime: graph}
      devices:
        npu0: {kind: npu}
"""


def test_every_controller_gets_the_pool_a_coprocessor_too():
    """The generated runtime compiles a pool into each controller's program (the co-processor's
    device server included, with its own hg_threads_config.h), so the co-processor's kernels are
    priced with the threads as the root's are: `options.threads` is the default of both."""
    one = load_platform_text(SOC)
    four = load_platform_text(SOC + "options: {threads: 4}\n")
    threads = {t.path_str: pool_threads(four, t) for t in four.root.walk()}
    assert threads == {"s": 4, "s/vdev": 1, "s/vdev/host": 4, "s/vdev/npu0": 1}
    assert all(pool_threads(one, t) == 1 for t in one.root.walk())
    graph = import_model(three_kernels())
    before, after = candidate_times(graph, SOC), candidate_times(graph, SOC + "options: {threads: 4}\n")
    assert after[("s/vdev/host", (0,))] < before[("s/vdev/host", (0,))] / 3


def test_the_gemm_rule_is_hg_gemm_c():
    """The Python copy of hg_sgemm_ex's split rule (its constants: hetgen/abi.py, which hg_gemm.c
    reads from the generated hg_constants.h; tests/test_constants.py) splits as hg_gemm.c does."""
    source = (REPO / "templates" / "runtime" / "hg_gemm.c").read_text()
    assert "(double)m * n * k < HG_SGEMM_SPLIT_MACS ? 1 : hg_threads_count()" in source
    rule = _gemm_plan.gemm_parallelism
    assert rule(64, 64, 63, 4) == 1.0  # 258,048 multiply-adds: below the threshold
    assert rule(64, 64, 64, 4) == 4.0  # 8 row panels or 2 column panels: rows, 2 each
    assert rule(8, 96, 4096, 4) == 1.0  # 3 column panels, 1 row panel: fewer than 4 threads
    assert rule(8, 160, 4096, 4) == 5 / 2  # 5 column panels: the busiest thread takes 2
    assert rule(1024, 1024, 1024, 1) == 1.0
    # packed weights (a convolution's A): 288 columns make 2 parts per thread of at least 64 columns,
    # [2, 2, 2, 3] panels taken in turn by 2 threads; 100 columns one part per thread
    assert "(split_rows ? m : n) / (HG_SGEMM_PART_MIN * reads * threads)" in source
    assert rule(64, 9 * 32, 512, 2, a_packed=True) == 9 / 5
    assert rule(64, 100, 512, 2, a_packed=True) == 2.0


def test_fixed_tasks_balance():
    assert _parallel.Parallel(tasks=32).speedup(4) == 4.0
    assert _parallel.Parallel(tasks=5).speedup(4) == 2.5  # two rounds for the busiest thread
    assert _parallel.Parallel(tasks=3).speedup(4) == 3.0
    assert _parallel.SERIAL.speedup(8) == 1.0 and _parallel.SERIAL.pool_calls(8) == 0
    assert _parallel.tasks_of(None) == _parallel.SERIAL and _parallel.tasks_of(1) == _parallel.SERIAL
    # steps (Winograd's): weighed by their work, one pool call per call of a split step
    phased = _parallel.phased(_parallel.Phase(1, 1, 3), _parallel.Phase(2, 16, 3), _parallel.Phase(1, 5, 3))
    assert phased.speedup(4) == 4 / (1 + 2 / 4 + 1 / 2.5) and phased.pool_calls(4) == 6
    assert _parallel.phased(_parallel.Phase(5, 1, 2)) == _parallel.SERIAL


def test_a_kernel_of_several_gemms_is_weighed_by_their_work():
    """A big product that splits 4 ways and an equal amount of work in small calls that do not:
    half the work at a quarter of the time (2 / 1.25 = 1.6x), one pool call per split product."""
    big = _parallel.GemmCall(256, 256, 256)  # 16.8 M multiply-adds
    small = _parallel.GemmCall(16, 16, 16, calls=4096)  # the same, in calls below the threshold
    kernel = _parallel.gemm(big, small)
    assert kernel.speedup(4) == pytest.approx(1.6)
    assert kernel.pool_calls(4) == 1 and kernel.pool_calls(1) == 0


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_recurrent_layer_is_priced_as_its_steps_and_projections(cell):
    """lstm_classifier's shape (50 steps, 64 inputs, 256 hidden): each step's hidden units are shared
    by the pool, the steps of each 8-step chunk one hg_parallel_phases call with a barrier between
    two steps (PyTorch's GRU resets after its product: one pass a step), the input projection of
    each chunk a GEMM that splits; at 16 hidden units neither pays and nothing is handed out."""
    from hetgen.models import recurrent

    builder = {"lstm": recurrent.lstm_classifier, "gru": recurrent.gru_classifier}[cell]
    platform = load_platform_text(host(2))
    priced = {}
    for hidden in (256, 16):
        graph = import_model(builder(seq=50, inputs=64, hidden=hidden))
        kernels = build_kernel_specs(graph, platform)
        (spec,) = [spec for names, spec in kernels.units.items() if cell.upper() in names[0].upper()]
        priced[hidden] = spec.parallel
        # the steps the price shares are the steps the generated kernel hands to the pool
        source = kernel_source(spec.kernel, "k", cell)
        assert ("hg_parallel_phases" in source) == (hidden == 256), hidden
    chunks = -(-50 // _gemm_plan.PANEL_M)
    assert priced[256].pool_calls(2) == 2 * chunks and priced[256].pool_calls(1) == 0
    assert priced[256].barriers(2) == 50 - chunks and priced[256].barriers(1) == 0
    # the price adds each call and each barrier to the shared compute (no memory term: no bytes)
    figures, work = CostFigures(peak_gflops=1.0, bandwidth_gbps=1.0, launch_us=0.0), Work(flops=1e6, bytes=0)
    pool_us = 2 * chunks * _parallel.POOL_CALL_US + (50 - chunks) * _parallel.POOL_BARRIER_US
    assert kernel_us(figures, work, parallel=priced[256], threads=2) == pytest.approx(1e3 / 2.0 + pool_us)
    assert priced[256].speedup(2) == pytest.approx(2.0)  # 8 panels of hidden units, 32 projection panels
    assert priced[16].pool_calls(2) == 0 and priced[16].speedup(2) == 1.0


def one_long_head():
    """One head of 256 queries: too few heads to share, so its block GEMMs split instead."""
    return transformer_encoder(heads=1, seq=256, dim=64, layers=1)


@pytest.mark.parametrize("model", [resnet, transformer_encoder, one_long_head])
def test_the_priced_split_is_the_generated_split(model):
    """Each controller kernel of the generated program calls hg_parallel_for exactly as its
    `parallel` (what the cost model prices) says: its fixed task count, or through the GEMM; a
    kernel priced serial never hands work to the pool."""
    graph = import_model(model())
    platform = load_platform_text(host(4))
    kernels = build_kernel_specs(graph, platform)
    placement = place(graph, platform, kernels=kernels)
    lowered = lower.lower(graph, platform, placement)
    # the kernel each unit runs as the choice stage priced it (a variant may split otherwise than
    # the table's kernel: the small-plane convolution, hetgen/ops/_conv_small.py, runs on one thread)
    chosen = {choice.unit.names: choice.kernel for choice in placement.choices.units}
    seen = {"tasks": 0, "gemm": 0}
    for program in lowered.programs:
        for unit in program.units:
            parallel = unit.kernel.parallel
            source = kernel_source(unit.kernel, unit.fn, unit.label)
            calls = re.findall(r"hg_parallel_for\((\d+)u", source)
            gemm = _gemm_plan.HELPER in unit.kernel.helpers
            if parallel.tasks > 1:
                seen["tasks"] += 1
                assert calls == [str(parallel.tasks)], unit.label
            else:
                assert calls == [], unit.label
            assert bool(parallel.gemms) == (gemm and parallel.tasks == 1), unit.label
            seen["gemm"] += bool(parallel.gemms)
            # the kernel placement priced (the table's spec, as the choice stage took it) splits the same way
            names = tuple(unit.nodes)
            pattern = kernels.fused(names) if len(names) > 1 else None
            spec = kernels.units[pattern.names if pattern is not None else names]
            priced = chosen[pattern.names if pattern is not None else names].parallel
            # (but the small-plane convolution's, and a layer whose cache blocks the choice stage
            # narrowed, hetgen/partition/prepack.py: its phase planes then come in bands, the tasks)
            assert (
                len(priced.gemms) == len(spec.parallel.gemms)
                or unit.kernel.params.get("variant") == "small"
                or unit.kernel.params.get("band_tasks")
            )
            assert priced.tasks == parallel.tasks, unit.label
            assert len(priced.gemms) == len(parallel.gemms), unit.label
    assert seen["tasks"] and seen["gemm"], seen


def test_every_kernel_that_splits_says_so():
    """A lowering that renders hg_parallel_for (it needs hg_threads.c) records its split for the cost
    model: `parallel=_parallel.tasks_of(split)` — one line for each new splitting kernel."""
    checked = 0
    for model in (resnet, mobilenet_v2, one_long_head):
        graph = import_model(model())
        kernels = build_kernel_specs(graph, load_platform_text(host(4)))
        for names, spec in kernels.units.items():
            if spec.kernel is not None and _parallel.HELPER in spec.kernel.helpers:
                assert spec.parallel.tasks > 1, names
                checked += 1
    assert checked
